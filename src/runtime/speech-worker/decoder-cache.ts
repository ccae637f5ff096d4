/**
 * Where a speech session keeps its decoder's self-attention KV cache, and how a decoder call gets
 * its rows' past and gives back their new positions. The decoder graph takes each row's past as an
 * input and returns only the new positions, every layer's keys and values in one tensor (`presents`,
 * [2 * layers, rows, heads, seq, head_dim]), which comes back to JavaScript. On the CPU the cache is a {@link KvPool} in
 * JavaScript memory and a call's past is a view of it; on a GPU it stays on the device
 * ({@link DeviceDecoderCache}), never read by JavaScript.
 */
import * as ort from "onnxruntime-node";
import { KV_GROWTH_POSITIONS, type ModelShape, presentEntry, SPEECH_GRAPH } from "../artifact/index.js";
import { KvPool } from "../kv-pool.js";

const D = SPEECH_GRAPH.decoder;

/** A slot set to the first `length` cached positions of slot `from`. */
export interface SlotMove {
  from: number;
  to: number;
  length: number;
}

/** A decoder call's past inputs (`past_key.<l>`, keys transposed, and `past_value.<l>`), the positions they span, and what to free once the call has run. */
export interface PastFeeds {
  tensors: Record<string, ort.Tensor>;
  /** The past inputs' length: `past_mask`'s last axis. */
  positions: number;
  release(): void;
}

export interface DecoderCache {
  readonly slots: number;
  /** Positions each slot holds. */
  readonly lengths: Int32Array;
  /** Sets each move's slot `to` to the first `length` positions of its slot `from`, every move reading the cache as it was before the call (a permutation of beams included). */
  copyPrefixes(moves: readonly SlotMove[]): Promise<void>;
  /** The past of slots `firstSlot .. firstSlot + rows - 1`, spanning at least their longest length; `reach` is the furthest position the call's rows write. */
  pastFeeds(firstSlot: number, rows: number, reach: number): Promise<PastFeeds>;
  /**
   * Writes each row's `tokensPerRow` new positions (the decoder's presents in `out`) after its cached
   * ones, and advances the rows kept; a row not kept ends with the positions it had.
   */
  write(firstSlot: number, keep: readonly boolean[], tokensPerRow: number, out: ort.InferenceSession.ReturnType): Promise<void>;
  dispose(): Promise<void>;
}

/** [rows, heads, head_dim, positions] keys (transposed) and [rows, heads, positions, head_dim] values: the decoder's past inputs. */
export function pastDims(shape: Pick<ModelShape, "kvHeads" | "headDim">, rows: number, positions: number): { key: number[]; value: number[] } {
  return { key: [rows, shape.kvHeads, shape.headDim, positions], value: [rows, shape.kvHeads, positions, shape.headDim] };
}

/** The cache in JavaScript memory: a KV pool whose capacity grows as the rows need, a call's past a view of the pool, no copy. */
export class HostDecoderCache implements DecoderCache {
  private readonly pool: KvPool;

  constructor(
    private readonly shape: KvPool["shape"],
    slots: number,
  ) {
    this.pool = new KvPool(shape, slots, KV_GROWTH_POSITIONS);
  }

  get slots(): number {
    return this.pool.slots;
  }

  get lengths(): Int32Array {
    return this.pool.lengths;
  }

  async copyPrefixes(moves: readonly SlotMove[]): Promise<void> {
    this.pool.copyPrefixes(moves);
  }

  async pastFeeds(firstSlot: number, rows: number, reach: number): Promise<PastFeeds> {
    const pool = this.pool;
    pool.ensure(reach);
    const positions = pool.capacity;
    const dims = pastDims(this.shape, rows, positions);
    const stride = pool.slotStride;
    const view = (data: Float32Array) => data.subarray(firstSlot * stride, (firstSlot + rows) * stride);
    const tensors: Record<string, ort.Tensor> = {};
    for (let l = 0; l < this.shape.layers; l++) {
      tensors[D.pastKey(l)] = new ort.Tensor("float32", view(pool.keys[l]), dims.key);
      tensors[D.pastValue(l)] = new ort.Tensor("float32", view(pool.values[l]), dims.value);
    }
    return { tensors, positions, release: () => {} };
  }

  async write(firstSlot: number, keep: readonly boolean[], tokensPerRow: number, out: ort.InferenceSession.ReturnType): Promise<void> {
    const rows = keep.length;
    const before = Array.from(this.pool.lengths.subarray(firstSlot, firstSlot + rows));
    this.pool.ensure(Math.max(...before) + tokensPerRow);
    const presents = out[D.presents].data as Float32Array;
    const entry = presents.length / (2 * this.shape.layers);
    const part = (layer: number, kind: "key" | "value") => presents.subarray(presentEntry(layer, kind) * entry, (presentEntry(layer, kind) + 1) * entry);
    for (let l = 0; l < this.shape.layers; l++) this.pool.append(l, firstSlot, rows, tokensPerRow, part(l, "key"), part(l, "value"));
    this.pool.advance(firstSlot, rows, tokensPerRow);
    for (let r = 0; r < rows; r++) if (!keep[r]) this.pool.truncate(firstSlot + r, before[r]);
  }

  async dispose(): Promise<void> {}
}
