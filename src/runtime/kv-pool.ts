import { KV_GROWTH_POSITIONS, kvBytesPerPosition, type ModelShape } from "./artifact/index.js";

/**
 * KV cache memory for a fixed number of sequence slots, owned by the worker and fed to the graph
 * without copies. Per layer: keys transposed [slots, kv_heads, head_dim, capacity] and values
 * [slots, kv_heads, capacity, head_dim]. Rows of a batch must be consecutive slots, so a batch's
 * cache is one contiguous view.
 *
 * Capacity grows in chunks: the graph reads every position up to capacity (masked), so capacity
 * tracks the longest live sequence instead of the context length.
 */
export class KvPool {
  readonly keys: Float32Array[] = [];
  readonly values: Float32Array[] = [];
  readonly lengths: Int32Array;
  private cap = 0;

  constructor(
    readonly shape: Pick<ModelShape, "layers" | "kvHeads" | "headDim" | "contextLength">,
    readonly slots: number,
    /** Capacity grows in multiples of this many positions. Default {@link KV_GROWTH_POSITIONS}. */
    readonly chunk = KV_GROWTH_POSITIONS,
  ) {
    this.lengths = new Int32Array(slots);
    this.resize(chunk);
  }

  get capacity(): number {
    return this.cap;
  }

  /** Floats one slot occupies in one layer's key (or value) array. */
  get slotStride(): number {
    return this.shape.kvHeads * this.shape.headDim * this.cap;
  }

  /** Makes room for `positions` tokens in every slot. */
  ensure(positions: number): void {
    if (positions <= this.cap) return;
    const wanted = Math.min(Math.ceil(positions / this.chunk) * this.chunk, Math.max(this.shape.contextLength, positions));
    this.resize(wanted);
  }

  private resize(newCap: number): void {
    const { layers, kvHeads, headDim } = this.shape;
    const oldCap = this.cap;
    for (let l = 0; l < layers; l++) {
      const k = new Float32Array(this.slots * kvHeads * headDim * newCap);
      const v = new Float32Array(this.slots * kvHeads * newCap * headDim);
      if (oldCap > 0) {
        const oldK = this.keys[l];
        const oldV = this.values[l];
        for (let sh = 0; sh < this.slots * kvHeads; sh++) {
          for (let d = 0; d < headDim; d++) {
            k.set(oldK.subarray((sh * headDim + d) * oldCap, (sh * headDim + d + 1) * oldCap), (sh * headDim + d) * newCap);
          }
          v.set(oldV.subarray(sh * oldCap * headDim, (sh + 1) * oldCap * headDim), sh * newCap * headDim);
        }
      }
      this.keys[l] = k;
      this.values[l] = v;
    }
    this.cap = newCap;
  }

  /**
   * Writes a step's new keys and values ([rows, kv_heads, S, head_dim]) for consecutive slots
   * starting at `firstSlot`, at each slot's current length, then advances the lengths.
   */
  append(layer: number, firstSlot: number, rows: number, seq: number, newK: Float32Array, newV: Float32Array): void {
    const { kvHeads, headDim } = this.shape;
    const cap = this.cap;
    const keys = this.keys[layer];
    const values = this.values[layer];
    for (let r = 0; r < rows; r++) {
      const slot = firstSlot + r;
      const start = this.lengths[slot];
      for (let h = 0; h < kvHeads; h++) {
        const sh = slot * kvHeads + h;
        for (let s = 0; s < seq; s++) {
          const src = ((r * kvHeads + h) * seq + s) * headDim;
          values.set(newV.subarray(src, src + headDim), (sh * cap + start + s) * headDim);
          const kBase = sh * headDim * cap + start + s;
          for (let d = 0; d < headDim; d++) keys[kBase + d * cap] = newK[src + d];
        }
      }
    }
  }

  advance(firstSlot: number, rows: number, seq: number): void {
    for (let r = 0; r < rows; r++) this.lengths[firstSlot + r] += seq;
  }

  /** Forgets every slot and shrinks back to one chunk of capacity (frees what a long sequence grew). */
  reset(): void {
    this.lengths.fill(0);
    this.cap = 0;
    this.keys.length = 0;
    this.values.length = 0;
    this.resize(this.chunk);
  }

  /** Keeps the first `length` cached positions of a slot (prefix reuse) and forgets the rest. */
  truncate(slot: number, length: number): void {
    this.lengths[slot] = Math.min(this.lengths[slot], length);
  }

  /**
   * Sets slot `to` to hold the first `length` cached positions of slot `from`, copying only those
   * positions (moving a sequence to keep running slots consecutive, or sharing a prompt prefix).
   * `from === to` just truncates.
   */
  copyPrefix(from: number, to: number, length: number): void {
    if (length > this.lengths[from]) throw new RangeError(`slot ${from} holds ${this.lengths[from]} positions, not ${length}`);
    if (from !== to && length > 0) {
      const { layers, kvHeads, headDim } = this.shape;
      const cap = this.cap;
      const stride = this.slotStride;
      for (let l = 0; l < layers; l++) {
        const keys = this.keys[l];
        const values = this.values[l];
        for (let h = 0; h < kvHeads; h++) {
          for (let d = 0; d < headDim; d++) {
            const at = (h * headDim + d) * cap;
            keys.copyWithin(to * stride + at, from * stride + at, from * stride + at + length);
          }
          const at = h * cap * headDim;
          values.copyWithin(to * stride + at, from * stride + at, from * stride + at + length * headDim);
        }
      }
    }
    this.lengths[to] = length;
  }

  /** Copies one slot's whole cache into another. */
  copySlot(from: number, to: number): void {
    this.copyPrefix(from, to, this.lengths[from]);
  }

  /** Bytes the pool holds now (every slot at the current capacity). */
  bytes(): number {
    return kvBytesPerPosition(this.shape) * this.slots * this.cap;
  }
}
