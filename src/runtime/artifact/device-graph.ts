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
 * log-probabilities), and the masked logit of a given target token (prompt scoring).
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
export const DEVICE_GRAPH_REVISION = 8;

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
  /** float32 [rows, positions, DEVICE_CANDIDATES]: the highest logits after mask and adjustments, descending (lowest id first on ties). */
  candidateLogits: "candidate_logits",
  /** int64 [rows, positions, DEVICE_CANDIDATES]: their token ids. */
  candidateIds: "candidate_ids",
  /** float32 [rows, positions, DEVICE_CANDIDATES]: the same tokens' logits after the mask only (what log-probabilities report). */
  candidateRaw: "candidate_raw",
  /** float32 [rows, positions, DEVICE_TOP_LOGPROBS]: the highest masked logits before adjustments, descending. */
  topLogits: "top_logits",
  /** int64 [rows, positions, DEVICE_TOP_LOGPROBS]: their token ids. */
  topIds: "top_ids",
  /** float32 [rows, positions]: log-sum-exp of the masked logits over the whole vocabulary. */
  logNormalizer: "log_normalizer",
  /** float32 [rows, positions]: the masked logit of each position's `score_targets` token. */
  targetLogits: "target_logits",
  /** One layer's key pool with the step's positions written. */
  keyPoolOut: (layer: number) => `kv_key_out.${layer}`,
  /** One layer's value pool with the step's positions written. */
  valuePoolOut: (layer: number) => `kv_value_out.${layer}`,
} as const;

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
  const outputs: string[] = [g.candidateLogits, g.candidateIds, g.candidateRaw, g.topLogits, g.topIds, g.logNormalizer, g.targetLogits];
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
