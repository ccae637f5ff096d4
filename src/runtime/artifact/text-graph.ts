/**
 * The contract between kiln's compiler and its runtime for a text graph: the names of its inputs
 * and outputs, and the geometry of the KV cache the runtime keeps for it. The graph builder declares
 * exactly these names, the manifest records them, and the runtime refuses an artifact whose
 * recorded names differ (it was built for another contract).
 *
 * The KV cache is a graph input that lives in the runtime's memory, float32: keys transposed
 * [slots, kv_heads, head_dim, capacity], values [slots, kv_heads, capacity, head_dim]. The graph
 * returns only the new tokens' keys and values [rows, kv_heads, seq, head_dim].
 *
 * A sliding-window layer (`ModelShape.slidingWindow`) keeps a ring instead: position p lives at
 * index p % ring, ring = min(capacity, slidingCacheCapacity(window)), and the graph takes each
 * index's position (`ring_positions`) to mask keys outside each query's window. Graphs of models
 * without such layers have no `ring_positions` input.
 */
import type { GraphIo, ModelShape } from "./manifest.js";

export const TEXT_GRAPH = {
  /** int64 [batch, seq]: new token ids. */
  inputIds: "input_ids",
  /** int64 [batch, seq]: their positions. */
  positionIds: "position_ids",
  /** float32 [batch, 1, 1, past]: 0 for cached positions a row may see, -inf for the rest. */
  pastMask: "past_mask",
  /** float32 [1, 1, group * seq, seq]: causal mask among the new tokens. */
  newMask: "new_mask",
  /**
   * int64 [1]: the first new position whose logits are returned: -1 for the last only (sampling),
   * 0 for every position (prompt scoring). The LM head costs as much as a few layers per position.
   */
  logitsFrom: "logits_from",
  /**
   * int64 [batch, ring]: the position each ring index of the sliding-window layers' caches holds
   * ({@link NO_POSITION} for none yet). Only in graphs with sliding-window layers.
   */
  ringPositions: "ring_positions",
  /** float32 [batch, kv_heads, head_dim, past] (past = ring on sliding-window layers): one layer's cached keys, transposed. */
  pastKey: (layer: number) => `past_key_t.${layer}`,
  /** float32 [batch, kv_heads, past, head_dim]: one layer's cached values. */
  pastValue: (layer: number) => `past_value.${layer}`,
  /** float32 [batch, positions, vocab]: the logits of the positions from `logits_from` on. */
  logits: "logits",
  /**
   * float32 [batch, seq, hidden]: the final norm's output at every new position, before the LM head:
   * what embeddings pool (llama.cpp's embeddings read the same tensor).
   */
  hidden: "hidden",
  /** float32 [batch, kv_heads, seq, head_dim]: one layer's new keys. */
  presentKey: (layer: number) => `present_key.${layer}`,
  /** float32 [batch, kv_heads, seq, head_dim]: one layer's new values. */
  presentValue: (layer: number) => `present_value.${layer}`,
} as const;

/** The input and output names of a text graph with `layers` layers (`sliding`: some of them slide), in declaration order. */
export function textGraphIo(layers: number, sliding = false): GraphIo {
  const g = TEXT_GRAPH;
  const inputs: string[] = [g.inputIds, g.positionIds, g.pastMask, g.newMask, g.logitsFrom];
  if (sliding) inputs.push(g.ringPositions);
  const outputs: string[] = [g.logits, g.hidden];
  for (let l = 0; l < layers; l++) inputs.push(g.pastKey(l), g.pastValue(l));
  for (let l = 0; l < layers; l++) outputs.push(g.presentKey(l), g.presentValue(l));
  return { inputs, outputs };
}

/** Throws when recorded graph names are not the ones this runtime feeds and fetches. */
export function checkTextGraphIo(io: GraphIo, layers: number, where: string, sliding = false): void {
  const want = textGraphIo(layers, sliding);
  const same = (a: readonly string[], b: readonly string[]) => a.length === b.length && a.every((x, i) => x === b[i]);
  if (!same(io.inputs, want.inputs) || !same(io.outputs, want.outputs)) {
    throw new Error(
      `${where} has graph inputs/outputs this runtime does not know (compiled by another kiln version?): recompile it with \`kiln compile --force\``,
    );
  }
}

/** Positions a KV slot's capacity grows by (the cache is read up to capacity every step). */
export const KV_GROWTH_POSITIONS = 128;

/**
 * A ring index's position when it holds none: so far below any query that every window hides it
 * (query - NO_POSITION stays within int64).
 */
export const NO_POSITION = -(2 ** 50);

/**
 * Positions the KV ring of a sliding-window layer holds: the `window - 1` earlier positions the
 * next query sees, plus a sixteenth of the window (at least 1) that a cached prefix may be cut back
 * by and still be reused (prefix reuse, `KvPool.truncate`); cutting further back recomputes.
 * For Gemma 2's 4096: 4351 positions, where an 8k context keeps 8192.
 */
export function slidingCacheCapacity(window: number): number {
  return window - 1 + Math.max(1, Math.ceil(window / 16));
}

/** Bytes one cached position takes in one slot: keys and values of every layer, float32 (sliding-window layers included: see {@link kvBytesPerSlot}). */
export function kvBytesPerPosition(shape: Pick<ModelShape, "layers" | "kvHeads" | "headDim">): number {
  return 2 * shape.layers * shape.kvHeads * shape.headDim * Float32Array.BYTES_PER_ELEMENT;
}

/**
 * Bytes one slot's KV cache takes to hold `positions` positions: keys and values of every layer,
 * float32, where a sliding-window layer's ring holds at most {@link slidingCacheCapacity}(window) of
 * them. Without sliding-window layers, `positions` x {@link kvBytesPerPosition}.
 */
export function kvBytesPerSlot(shape: Pick<ModelShape, "layers" | "kvHeads" | "headDim" | "slidingWindow">, positions: number): number {
  const perLayer = kvBytesPerPosition({ ...shape, layers: 1 });
  const sw = shape.slidingWindow;
  if (!sw) return shape.layers * perLayer * positions;
  const ring = Math.min(positions, slidingCacheCapacity(sw.window));
  return perLayer * ((shape.layers - sw.layers.length) * positions + sw.layers.length * ring);
}

/** The most whole growth steps of positions, at most `limit` positions' worth rounded up, whose bytes for every one of `slots` slots fit `bytes`. */
function growthStepsThatFit(shape: Pick<ModelShape, "layers" | "kvHeads" | "headDim" | "slidingWindow">, slots: number, bytes: number, limit: number): number {
  const most = Math.ceil(limit / KV_GROWTH_POSITIONS);
  let steps = 0;
  while (steps < most && slots * kvBytesPerSlot(shape, (steps + 1) * KV_GROWTH_POSITIONS) <= bytes) steps++;
  return steps;
}

/**
 * The context each sequence may use so that `slots` slots fit `kvMemoryBytes` (every slot holds as
 * many positions as the longest one): rounded down to the growth step, at most the model's own.
 * Default (no budget): the model's context.
 */
export function servedContextLength(
  shape: Pick<ModelShape, "layers" | "kvHeads" | "headDim" | "contextLength" | "slidingWindow">,
  slots: number,
  kvMemoryBytes?: number,
): number {
  if (kvMemoryBytes === undefined) return shape.contextLength;
  const fits = growthStepsThatFit(shape, slots, kvMemoryBytes, shape.contextLength) * KV_GROWTH_POSITIONS;
  if (fits < KV_GROWTH_POSITIONS)
    throw new RangeError(`a KV budget of ${kvMemoryBytes} bytes does not hold ${KV_GROWTH_POSITIONS} positions for ${slots} slots`);
  return Math.min(shape.contextLength, fits);
}

/** Memory figures the default KV budget is sized from, in bytes. */
export interface MemoryAvailability {
  /** Memory the process could still take now: MemAvailable (`os.freemem()`), or what its cgroup leaves, whichever is less. */
  availableBytes: number;
  /** The machine's memory, or the process's cgroup limit where that is lower. */
  totalBytes: number;
}

/** Share of the available memory the default KV budget takes: a quarter. */
export const DEFAULT_KV_AVAILABLE_SHARE = 1 / 4;
/** Share of the total memory the default KV budget never exceeds, however idle the machine is at start: an eighth. */
export const DEFAULT_KV_TOTAL_SHARE = 1 / 8;

/**
 * The default KV cache budget of a served model, in bytes, all `slots` together: what `kiln serve`
 * uses without `--kv-memory-mb` (an explicit budget always wins). It is the least of
 * - a quarter of the memory available once the model's weights are loaded ({@link DEFAULT_KV_AVAILABLE_SHARE}),
 *   leaving the rest to the runtime's own buffers, other models and other programs;
 * - an eighth of the total memory ({@link DEFAULT_KV_TOTAL_SHARE}): free memory at start is a snapshot,
 *   and an idle machine at start is no promise that nothing else will want it later;
 * - what every slot needs for the model's native context (reserving more buys nothing);
 * rounded down to whole growth steps of every slot (so the budget is exactly what the KV pool can
 * reach), and never less than one growth step ({@link KV_GROWTH_POSITIONS} positions) per slot, the
 * smallest pool that can serve at all. {@link servedContextLength} then gives the context per sequence.
 */
export function defaultKvMemoryBytes(
  shape: Pick<ModelShape, "layers" | "kvHeads" | "headDim" | "contextLength" | "slidingWindow">,
  slots: number,
  memory: MemoryAvailability,
): number {
  const available = Math.max(0, Math.min(memory.availableBytes, memory.totalBytes));
  const share = Math.min(available * DEFAULT_KV_AVAILABLE_SHARE, Math.max(0, memory.totalBytes) * DEFAULT_KV_TOTAL_SHARE);
  const steps = Math.max(1, growthStepsThatFit(shape, slots, share, shape.contextLength));
  return slots * kvBytesPerSlot(shape, steps * KV_GROWTH_POSITIONS);
}
