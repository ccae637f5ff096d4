import { KV_GROWTH_POSITIONS, type ModelShape, NO_POSITION, slidingCacheCapacity } from "./artifact/index.js";

/**
 * KV cache memory for a fixed number of sequence slots, owned by the worker and fed to the graph
 * without copies. Per layer: keys transposed [slots, kv_heads, head_dim, capacity] and values
 * [slots, kv_heads, capacity, head_dim]. Rows of a batch must be consecutive slots, so a batch's
 * cache is one contiguous view.
 *
 * Capacity grows in chunks: the graph reads every position up to capacity (masked), so capacity
 * tracks the longest live sequence instead of the context length.
 *
 * Sliding-window layers (`shape.slidingWindow`) keep a ring of at most
 * {@link slidingCacheCapacity}(window) positions: position p at index p % {@link ringCapacity}.
 * Until capacity reaches the ring's size the ring is capacity long and never wraps (index = position).
 */
/** One slot's cache set aside while a cycle of moves overwrites it. */
interface SavedSlot {
  keys: Float32Array[];
  values: Float32Array[];
  length: number;
  intactFrom: number;
}

export class KvPool {
  readonly keys: Float32Array[] = [];
  readonly values: Float32Array[] = [];
  readonly lengths: Int32Array;
  /**
   * Per slot, the first position from which the sliding-window layers' rings still hold every
   * cached position (later writes overwrite the oldest); 0 without such layers.
   */
  private readonly intactFrom: Int32Array;
  private readonly sliding: boolean[];
  /** The most positions a ring holds (Infinity without sliding-window layers). */
  private readonly ringLimit: number;
  private cap = 0;

  constructor(
    readonly shape: Pick<ModelShape, "layers" | "kvHeads" | "headDim" | "contextLength" | "slidingWindow">,
    readonly slots: number,
    /** Capacity grows in multiples of this many positions. Default {@link KV_GROWTH_POSITIONS}. */
    readonly chunk = KV_GROWTH_POSITIONS,
  ) {
    this.lengths = new Int32Array(slots);
    this.intactFrom = new Int32Array(slots);
    const sw = shape.slidingWindow;
    this.sliding = Array.from({ length: shape.layers }, (_, l) => sw?.layers.includes(l) ?? false);
    this.ringLimit = sw ? slidingCacheCapacity(sw.window) : Infinity;
    this.resize(chunk);
  }

  get capacity(): number {
    return this.cap;
  }

  /** Positions each sliding-window layer's ring holds now: min(capacity, its full size). */
  get ringCapacity(): number {
    return Math.min(this.cap, this.ringLimit);
  }

  /** Positions layer `layer` holds per slot now: the ring's for a sliding-window layer, else the capacity. */
  layerCapacity(layer: number): number {
    return this.sliding[layer] ? this.ringCapacity : this.cap;
  }

  /** Floats one slot occupies in a full-cache layer's key (or value) array. */
  get slotStride(): number {
    return this.shape.kvHeads * this.shape.headDim * this.cap;
  }

  /** Floats one slot occupies in layer `layer`'s key (or value) array. */
  layerStride(layer: number): number {
    return this.shape.kvHeads * this.shape.headDim * this.layerCapacity(layer);
  }

  /**
   * Fills `out` [rows, ringCapacity] with the position each ring index holds for slots
   * firstSlot.. ({@link NO_POSITION} where none): the last ringCapacity positions of each slot.
   */
  ringPositions(firstSlot: number, rows: number, out: BigInt64Array): void {
    const ring = this.ringCapacity;
    out.fill(BigInt(NO_POSITION), 0, rows * ring);
    for (let r = 0; r < rows; r++) {
      const length = this.lengths[firstSlot + r];
      for (let p = Math.max(0, length - ring); p < length; p++) out[r * ring + (p % ring)] = BigInt(p);
    }
  }

  /** Makes room for `positions` tokens in every slot. */
  ensure(positions: number): void {
    if (positions <= this.cap) return;
    const wanted = Math.min(Math.ceil(positions / this.chunk) * this.chunk, Math.max(this.shape.contextLength, positions));
    this.resize(wanted);
  }

  private resize(newCap: number): void {
    const oldCap = this.cap;
    const oldRing = this.ringCapacity;
    this.cap = newCap;
    for (let l = 0; l < this.shape.layers; l++) {
      const from = this.sliding[l] ? oldRing : oldCap;
      const to = this.layerCapacity(l);
      if (from !== to || !this.keys[l]) this.regrow(l, from, to);
    }
  }

  /**
   * Reallocates one layer from `from` to `to` positions per slot, keeping indices: a ring grows only
   * while it has never wrapped (every index below `from` is its position).
   */
  private regrow(layer: number, from: number, to: number): void {
    const { kvHeads, headDim } = this.shape;
    const k = new Float32Array(this.slots * kvHeads * headDim * to);
    const v = new Float32Array(this.slots * kvHeads * to * headDim);
    if (from > 0) {
      const oldK = this.keys[layer];
      const oldV = this.values[layer];
      for (let sh = 0; sh < this.slots * kvHeads; sh++) {
        for (let d = 0; d < headDim; d++) {
          k.set(oldK.subarray((sh * headDim + d) * from, (sh * headDim + d + 1) * from), (sh * headDim + d) * to);
        }
        v.set(oldV.subarray(sh * from * headDim, (sh + 1) * from * headDim), sh * to * headDim);
      }
    }
    this.keys[layer] = k;
    this.values[layer] = v;
  }

  /**
   * Writes a step's new keys and values ([rows, kv_heads, S, head_dim]) for consecutive slots
   * starting at `firstSlot`, at each slot's current length, then advances the lengths.
   */
  append(layer: number, firstSlot: number, rows: number, tokensPerRow: number, newK: Float32Array, newV: Float32Array): void {
    const { kvHeads, headDim } = this.shape;
    const cap = this.layerCapacity(layer);
    const keys = this.keys[layer];
    const values = this.values[layer];
    for (let r = 0; r < rows; r++) {
      const slot = firstSlot + r;
      const start = this.lengths[slot];
      // A ring keeps only the last `cap` of the new positions (when one step brings more than it holds).
      const first = Math.max(0, tokensPerRow - cap);
      for (let h = 0; h < kvHeads; h++) {
        const sh = slot * kvHeads + h;
        for (let s = first; s < tokensPerRow; s++) {
          const src = ((r * kvHeads + h) * tokensPerRow + s) * headDim;
          const at = (start + s) % cap;
          values.set(newV.subarray(src, src + headDim), (sh * cap + at) * headDim);
          const kBase = sh * headDim * cap + at;
          for (let d = 0; d < headDim; d++) keys[kBase + d * cap] = newK[src + d];
        }
      }
    }
  }

  advance(firstSlot: number, rows: number, tokensPerRow: number): void {
    const ring = this.ringCapacity;
    for (let r = 0; r < rows; r++) {
      const slot = firstSlot + r;
      this.lengths[slot] += tokensPerRow;
      this.intactFrom[slot] = Math.max(this.intactFrom[slot], this.lengths[slot] - ring);
    }
  }

  /** Forgets every slot and shrinks back to one chunk of capacity (frees what a long sequence grew). */
  reset(): void {
    this.lengths.fill(0);
    this.intactFrom.fill(0);
    this.cap = 0;
    this.keys.length = 0;
    this.values.length = 0;
    this.resize(this.chunk);
  }

  /**
   * Whether slot `slot`'s cache can be cut back to its first `length` positions: always without
   * sliding-window layers; with them, only while their rings still hold the window before `length`
   * (see {@link slidingCacheCapacity}); the scheduler's slot table (`KvSlots`) mirrors this rule.
   */
  canKeep(slot: number, length: number): boolean {
    if (length > this.lengths[slot]) return false;
    const window = this.shape.slidingWindow?.window;
    return length === 0 || window === undefined || this.intactFrom[slot] <= Math.max(0, length - window + 1);
  }

  /**
   * Keeps the first `length` cached positions of a slot (prefix reuse) and forgets the rest. Throws
   * where the sliding-window rings no longer hold what `length` positions need ({@link canKeep}).
   */
  truncate(slot: number, length: number): void {
    this.copyPrefix(slot, slot, Math.min(this.lengths[slot], length));
  }

  /**
   * Sets slot `to` to hold the first `length` cached positions of slot `from`, copying only those
   * positions (moving a sequence to keep running slots consecutive, or sharing a prompt prefix);
   * a sliding-window layer's ring is copied whole. `from === to` just truncates. Throws where
   * `from` does not hold them ({@link canKeep}).
   */
  copyPrefix(from: number, to: number, length: number): void {
    if (length > this.lengths[from]) throw new RangeError(`slot ${from} holds ${this.lengths[from]} positions, not ${length}`);
    if (!this.canKeep(from, length)) {
      throw new RangeError(`slot ${from} cannot be cut back to ${length} positions: its sliding-window layers keep positions from ${this.intactFrom[from]} on`);
    }
    if (from !== to && length > 0) {
      const { layers, kvHeads, headDim } = this.shape;
      for (let l = 0; l < layers; l++) {
        const cap = this.layerCapacity(l);
        const stride = this.layerStride(l);
        const keys = this.keys[l];
        const values = this.values[l];
        if (this.sliding[l]) {
          keys.copyWithin(to * stride, from * stride, (from + 1) * stride);
          values.copyWithin(to * stride, from * stride, (from + 1) * stride);
          continue;
        }
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
    this.intactFrom[to] = length === 0 ? 0 : this.intactFrom[from];
    this.lengths[to] = length;
  }

  /**
   * Applies several {@link copyPrefix} moves as if at once: each `to` gets what its `from` held
   * before any of them (beams taking over each other's caches, a permutation included).
   */
  copyPrefixes(moves: ReadonlyArray<{ from: number; to: number; length: number }>): void {
    const pending: Array<{ from: number | SavedSlot; to: number; length: number }> = moves.filter((m) => m.from !== m.to);
    // A slot is overwritten only once no other move still reads it; a cycle of moves sets one slot aside first.
    while (pending.length > 0) {
      let at = pending.findIndex((m) => !pending.some((o) => o !== m && o.from === m.to));
      if (at < 0) {
        const saved = this.save(pending[0].to);
        for (const o of pending) if (o.from === pending[0].to) o.from = saved;
        at = 0;
      }
      const [m] = pending.splice(at, 1);
      if (typeof m.from === "number") this.copyPrefix(m.from, m.to, m.length);
      else this.restore(m.from, m.to, m.length);
    }
    for (const m of moves) if (m.from === m.to) this.truncate(m.to, m.length);
  }

  private save(slot: number): SavedSlot {
    return {
      keys: this.keys.map((k, l) => k.slice(slot * this.layerStride(l), (slot + 1) * this.layerStride(l))),
      values: this.values.map((v, l) => v.slice(slot * this.layerStride(l), (slot + 1) * this.layerStride(l))),
      length: this.lengths[slot],
      intactFrom: this.intactFrom[slot],
    };
  }

  private restore(saved: SavedSlot, to: number, length: number): void {
    if (length > saved.length) throw new RangeError(`the slot set aside holds ${saved.length} positions, not ${length}`);
    for (let l = 0; l < this.shape.layers; l++) {
      this.keys[l].set(saved.keys[l], to * this.layerStride(l));
      this.values[l].set(saved.values[l], to * this.layerStride(l));
    }
    this.intactFrom[to] = length === 0 ? 0 : saved.intactFrom;
    this.lengths[to] = length;
  }

  /** Copies one slot's whole cache into another. */
  copySlot(from: number, to: number): void {
    this.copyPrefix(from, to, this.lengths[from]);
  }

  /** Bytes the pool holds now (every slot at the current capacity; rings at theirs). */
  bytes(): number {
    let floats = 0;
    for (let l = 0; l < this.shape.layers; l++) floats += 2 * this.slots * this.layerStride(l);
    return floats * Float32Array.BYTES_PER_ELEMENT;
  }
}
