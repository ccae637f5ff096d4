import * as ort from "onnxruntime-node";
import { DEVICE_GRAPH, type ModelShape, SLOT_COPY_GRAPH } from "../artifact/index.js";

/**
 * The KV cache of a GPU session, resident on the device: per layer one key pool and one value pool
 * [slots, capacity, kv_heads, head_dim] at a fixed capacity. Each step's graph returns the pools
 * with its new positions written; they replace the old ones (which are disposed), so the cache
 * never crosses to JavaScript. Only the lengths live here.
 *
 * Until the first step every pool is one shared zero array on the CPU, uploaded by that step; from
 * then on they are the device tensors the graphs returned (`gpu-buffer`), never read from here.
 */
export class DeviceKvPool {
  readonly lengths: Int32Array;
  private keys: ort.Tensor[];
  private values: ort.Tensor[];

  constructor(
    readonly shape: Pick<ModelShape, "layers" | "kvHeads" | "headDim">,
    readonly slots: number,
    /** Positions each slot holds, fixed. */
    readonly capacity: number,
    private readonly slotCopy: ort.InferenceSession,
  ) {
    if (slots < 1 || capacity < 1) throw new RangeError(`a device KV pool needs at least one slot and one position (asked ${slots} x ${capacity})`);
    this.lengths = new Int32Array(slots);
    const dims = [slots, capacity, shape.kvHeads, shape.headDim];
    const zeros = new ort.Tensor("float32", new Float32Array(slots * capacity * shape.kvHeads * shape.headDim), dims);
    this.keys = Array.from({ length: shape.layers }, () => zeros);
    this.values = Array.from({ length: shape.layers }, () => zeros);
  }

  /** Adds every layer's pools to a graph's feeds. */
  feedPools(feeds: Record<string, ort.Tensor>): void {
    for (let l = 0; l < this.shape.layers; l++) {
      feeds[DEVICE_GRAPH.keyPool(l)] = this.keys[l];
      feeds[DEVICE_GRAPH.valuePool(l)] = this.values[l];
    }
  }

  /** Takes a graph's output pools as the cache and disposes the ones they replace. */
  replacePools(out: ort.InferenceSession.OnnxValueMapType): void {
    for (let l = 0; l < this.shape.layers; l++) {
      const key = out[DEVICE_GRAPH.keyPoolOut(l)] as ort.Tensor;
      const value = out[DEVICE_GRAPH.valuePoolOut(l)] as ort.Tensor;
      releaseDeviceTensor(this.keys[l]);
      releaseDeviceTensor(this.values[l]);
      this.keys[l] = key;
      this.values[l] = value;
    }
  }

  /** Whether every slot can take `positions` positions. */
  fits(positions: number): boolean {
    return positions <= this.capacity;
  }

  advance(firstSlot: number, rows: number, tokensPerRow: number): void {
    for (let r = 0; r < rows; r++) this.lengths[firstSlot + r] += tokensPerRow;
  }

  /** Keeps the first `length` cached positions of a slot (prefix reuse); the rest is masked from then on. */
  truncate(slot: number, length: number): void {
    this.lengths[slot] = Math.min(this.lengths[slot], length);
  }

  /**
   * Sets slot `to` to hold the first `length` cached positions of slot `from`, on the device (the
   * slot-copy graph copies the whole slot; the positions past `length` are masked). `from === to`
   * just truncates.
   */
  async copyPrefix(from: number, to: number, length: number): Promise<void> {
    for (const slot of [from, to]) if (!(slot >= 0 && slot < this.slots)) throw new RangeError(`slot ${slot} is not among the pool's ${this.slots}`);
    if (length > this.lengths[from]) throw new RangeError(`slot ${from} holds ${this.lengths[from]} positions, not ${length}`);
    if (from !== to && length > 0) {
      const feeds: Record<string, ort.Tensor> = {
        [SLOT_COPY_GRAPH.from]: new ort.Tensor("int64", BigInt64Array.of(BigInt(from)), [1]),
        [SLOT_COPY_GRAPH.to]: new ort.Tensor("int64", BigInt64Array.of(BigInt(to)), [1]),
      };
      this.feedPools(feeds);
      this.replacePools(await this.slotCopy.run(feeds));
    }
    this.lengths[to] = length;
  }

  /** Bytes the pools hold on the device (float32 keys and values of every layer). */
  bytes(): number {
    return 2 * this.shape.layers * this.slots * this.capacity * this.shape.kvHeads * this.shape.headDim * Float32Array.BYTES_PER_ELEMENT;
  }

  /** Frees the device pools. */
  dispose(): void {
    for (let l = 0; l < this.shape.layers; l++) {
      releaseDeviceTensor(this.keys[l]);
      releaseDeviceTensor(this.values[l]);
    }
  }
}

/** Disposes a tensor the device holds; a CPU tensor (the initial zeros) is left to the garbage collector. */
function releaseDeviceTensor(t: ort.Tensor): void {
  if (t.location === "gpu-buffer") t.dispose();
}
