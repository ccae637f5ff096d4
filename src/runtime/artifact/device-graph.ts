/**
 * The contract of the GPU compile target's text graph (`manifest.device = "webgpu"`): the names of
 * its inputs and outputs, and the layout of the KV cache it keeps on the device.
 *
 * The cache is a pool of `slots` sequences at a fixed capacity, per layer keys and values
 * [slots, kv_heads, capacity, head_dim] ({@link devicePoolDims}), fed as inputs and returned, updated
 * with the step's new positions, as outputs that stay on the device and are fed back as the next
 * step's inputs. A sliding-window layer's pools are rings of at most slidingCacheCapacity(window)
 * positions, position p at index p mod ring. A step computes the consecutive slots
 * [first_slot, first_slot + rows) and reads the first `past_span` positions of each (`past_mask`),
 * or of a ring at most the ring. It returns no logits row: per
 * computed position, the top candidates after the constraint mask and logit adjustments (for
 * sampling), the top alternatives and the log-normalizer of the masked row before adjustments (for
 * log-probabilities), the masked logit of a given target token (prompt scoring), and, for a step
 * that embeds, the final normalized hidden state.
 *
 * The slot-copy graph (`ARTIFACT_FILES.slotCopyGraph`) sets one slot of every layer's pool to
 * another's, on the device.
 */
import type { GraphIo } from "./manifest.js";

/**
 * The GPU graph's revision, part of a GPU artifact's id: raised whenever what the target builds for
 * the same options changes (its pools' layout or type, its head), so an artifact built before is
 * never taken for one built now.
 */
export const DEVICE_GRAPH_REVISION = 10;

/**
 * One layer's key or value pool: [slots, kv_heads, capacity, head_dim], the layout GroupQueryAttention
 * reads its past in, so a step reads a slot's rows without transposing them.
 */
export function devicePoolDims<T extends number | string>(slots: T, capacity: T, shape: { kvHeads: number; headDim: number }): [T, number, T, number] {
  return [slots, shape.kvHeads, capacity, shape.headDim];
}

/** Candidates per position the graph returns for sampling: top_k and top_p choose among these. */
export const DEVICE_CANDIDATES = 64;

/** Alternatives per position the graph returns for `top_logprobs` (the API's most). */
export const DEVICE_TOP_LOGPROBS = 20;

/** Bits per word of the constraint mask (`token_mask`): bit t % 32 of word t / 32 allows token t. */
export const MASK_WORD_BITS = 32;

export const DEVICE_GRAPH = {
  /** int64 [rows, seq]: new token ids. */
  inputIds: "input_ids",
  /** int64 [rows, seq]: their positions (also where they are written in the pool). */
  positionIds: "position_ids",
  /**
   * [rows, 1, 1, past_span] in the activations' type: 0 for cached positions a row may see, -inf for
   * the rest. Its length, the past span, is how many of each slot's first positions the step reads
   * (at least the longest row's length after the step, at most the capacity): the graph slices the
   * pools to it, so a step's cost follows what its rows hold, not the pools' capacity.
   */
  pastMask: "past_mask",
  /** float32 [1, 1, group * seq, seq]: causal mask among the new tokens. */
  newMask: "new_mask",
  /** int64 [1]: the first new position computed to the end: -1 for the last only, 0 for every position (prompt scoring). */
  logitsFrom: "logits_from",
  /** int64 [1]: the pool slot of row 0. */
  firstSlot: "first_slot",
  /** int32 [rows, ceil(vocab / 32)]: allowed tokens as bits (all set: unconstrained). */
  tokenMask: "token_mask",
  /**
   * int64 [rows, n]: tokens whose logit is adjusted (logit_bias, penalties), at least one entry per
   * row; an entry whose bias and subtract are 0 and repetition 1 changes nothing. Ids are distinct
   * within a row, except padding that repeats an entry whole.
   */
  adjustIds: "adjust_ids",
  /** float32 [rows, n]: added first (logit_bias). */
  adjustBias: "adjust_bias",
  /** float32 [rows, n]: then a positive logit is divided by it, a negative one multiplied (repetition_penalty; 1: none). */
  adjustRepetition: "adjust_repetition",
  /** float32 [rows, n]: then subtracted (presence and frequency penalties). */
  adjustSubtract: "adjust_subtract",
  /** int64 [rows, positions]: per computed position, the token whose masked logit `target_logits` returns (0 when none is wanted). */
  scoreTargets: "score_targets",
  /** [slots, kv_heads, capacity, head_dim] in the activations' type (float32, or float16 on a half-precision artifact): one layer's key pool. */
  keyPool: (layer: number) => `kv_key.${layer}`,
  /** [slots, kv_heads, capacity, head_dim] in the activations' type: one layer's value pool. */
  valuePool: (layer: number) => `kv_value.${layer}`,
  /**
   * float32 [rows, positions, width]: each computed position's results side by side, as
   * {@link deviceResultLayout} places them (candidates, alternatives, log-normalizer, target logit;
   * token ids as floats, exact below 2^24, -1 for no token). One tensor, because each output a step
   * brings back is a wait of its own for the device (about 0.1 ms each on lavapipe).
   */
  results: "step_results",
  /**
   * float32 [rows, positions, hidden]: each computed position's final normalized hidden state (what
   * an embedding pools: the last position's). Brought back only by a step that embeds: another
   * leaves it out of its fetches, and it never leaves the device.
   */
  hidden: "hidden",
  /** One layer's key pool with the step's positions written. */
  keyPoolOut: (layer: number) => `kv_key_out.${layer}`,
  /** One layer's value pool with the step's positions written. */
  valuePoolOut: (layer: number) => `kv_value_out.${layer}`,
} as const;

/** Where each result sits in a position's row of `step_results`: offsets and counts, in floats. */
export interface DeviceResultLayout {
  /** Candidates per position: DEVICE_CANDIDATES, or the vocabulary when smaller. */
  candidates: number;
  /** Alternatives per position: DEVICE_TOP_LOGPROBS, or the vocabulary when smaller. */
  top: number;
  /** Floats per position. */
  width: number;
  /** The highest logits after the mask and the adjustments, descending (lowest id first on ties). */
  candidateLogits: number;
  /** Their token ids (-1: none, past the finite entries). */
  candidateIds: number;
  /** The same tokens' logits after the mask only (what log-probabilities report). */
  candidateRaw: number;
  /** The highest masked logits before adjustments, descending. */
  topLogits: number;
  /** Their token ids (-1: none). */
  topIds: number;
  /** The log-sum-exp of the masked logits over the whole vocabulary. */
  logNormalizer: number;
  /** The masked logit of the position's `score_targets` token. */
  targetLogit: number;
}

/** The layout of a position's results for a vocabulary of `vocab` tokens (the compiler writes it, the runtime reads it). */
export function deviceResultLayout(vocab: number): DeviceResultLayout {
  const candidates = Math.min(DEVICE_CANDIDATES, vocab);
  const top = Math.min(DEVICE_TOP_LOGPROBS, vocab);
  const candidateLogits = 0;
  const candidateIds = candidateLogits + candidates;
  const candidateRaw = candidateIds + candidates;
  const topLogits = candidateRaw + candidates;
  const topIds = topLogits + top;
  const logNormalizer = topIds + top;
  const targetLogit = logNormalizer + 1;
  return { candidates, top, width: targetLogit + 1, candidateLogits, candidateIds, candidateRaw, topLogits, topIds, logNormalizer, targetLogit };
}

/** A step's results unpacked, [rows, positions, ...] row-major (see {@link DeviceResultLayout}). */
export interface DeviceResults {
  positions: number;
  candidates: number;
  top: number;
  candidateLogits: Float32Array;
  candidateIds: Int32Array;
  candidateRaw: Float32Array;
  topLogits: Float32Array;
  topIds: Int32Array;
  logNormalizer: Float32Array;
  targetLogits: Float32Array;
}

/** Unpacks `step_results` ([rows * positions, layout.width] floats) into one array per result. */
export function unpackDeviceResults(packed: Float32Array, rows: number, positions: number, vocab: number): DeviceResults {
  const layout = deviceResultLayout(vocab);
  const { candidates, top, width } = layout;
  const n = rows * positions;
  if (packed.length !== n * width) throw new RangeError(`step results of ${packed.length} floats, not ${n} positions of ${width}`);
  const out: DeviceResults = {
    positions,
    candidates,
    top,
    candidateLogits: new Float32Array(n * candidates),
    candidateIds: new Int32Array(n * candidates),
    candidateRaw: new Float32Array(n * candidates),
    topLogits: new Float32Array(n * top),
    topIds: new Int32Array(n * top),
    logNormalizer: new Float32Array(n),
    targetLogits: new Float32Array(n),
  };
  for (let at = 0; at < n; at++) {
    const row = at * width;
    const part = (offset: number, count: number) => packed.subarray(row + offset, row + offset + count);
    out.candidateLogits.set(part(layout.candidateLogits, candidates), at * candidates);
    out.candidateIds.set(part(layout.candidateIds, candidates), at * candidates);
    out.candidateRaw.set(part(layout.candidateRaw, candidates), at * candidates);
    out.topLogits.set(part(layout.topLogits, top), at * top);
    out.topIds.set(part(layout.topIds, top), at * top);
    out.logNormalizer[at] = packed[row + layout.logNormalizer];
    out.targetLogits[at] = packed[row + layout.targetLogit];
  }
  return out;
}

/** The slot-copy graph's own inputs beside the pools (`keyPool`/`valuePool` in, `keyPoolOut`/`valuePoolOut` out). */
export const SLOT_COPY_GRAPH = {
  /** int64 [1]: the slot copied. */
  from: "from_slot",
  /** int64 [1]: the slot overwritten. */
  to: "to_slot",
} as const;

/** The names of the device step graph with `layers` layers, in declaration order. */
export function deviceGraphIo(layers: number): GraphIo {
  const g = DEVICE_GRAPH;
  const inputs: string[] = [
    g.inputIds,
    g.positionIds,
    g.pastMask,
    g.newMask,
    g.logitsFrom,
    g.firstSlot,
    g.tokenMask,
    g.adjustIds,
    g.adjustBias,
    g.adjustRepetition,
    g.adjustSubtract,
    g.scoreTargets,
  ];
  const outputs: string[] = [g.results, g.hidden];
  for (let l = 0; l < layers; l++) inputs.push(g.keyPool(l), g.valuePool(l));
  for (let l = 0; l < layers; l++) outputs.push(g.keyPoolOut(l), g.valuePoolOut(l));
  return { inputs, outputs };
}

/** The names of the slot-copy graph with `layers` layers, in declaration order. */
export function slotCopyGraphIo(layers: number): GraphIo {
  const g = DEVICE_GRAPH;
  const inputs: string[] = [SLOT_COPY_GRAPH.from, SLOT_COPY_GRAPH.to];
  const outputs: string[] = [];
  for (let l = 0; l < layers; l++) inputs.push(g.keyPool(l), g.valuePool(l));
  for (let l = 0; l < layers; l++) outputs.push(g.keyPoolOut(l), g.valuePoolOut(l));
  return { inputs, outputs };
}

/** Throws when recorded names are not the ones this runtime feeds and fetches for a device graph. */
export function checkDeviceGraphIo(io: GraphIo, want: GraphIo, where: string): void {
  const same = (a: readonly string[], b: readonly string[]) => a.length === b.length && a.every((x, i) => x === b[i]);
  if (!same(io.inputs, want.inputs) || !same(io.outputs, want.outputs)) {
    throw new Error(
      `${where} has graph inputs/outputs this runtime does not know (compiled by another kiln version?): recompile it with \`kiln compile --force\``,
    );
  }
}

/** Words of the constraint mask for a vocabulary of `vocab` tokens. */
export function maskWords(vocab: number): number {
  return Math.ceil(vocab / MASK_WORD_BITS);
}
