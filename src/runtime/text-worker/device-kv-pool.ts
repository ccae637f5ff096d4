import * as ort from "onnxruntime-node";
import { DEVICE_GRAPH, devicePoolDims, type ModelShape, SLOT_COPY_GRAPH, slidingCacheCapacity } from "../artifact/index.js";
import { DeviceZeros, type ZerosType } from "../device/device-zeros.js";
import type { ComputeDevice } from "../device/index.js";
import { pastSpan } from "../device/past-span.js";

/**
 * How a device step's graph writes the KV pools it returns:
 * - "inplace" (the default): the pools a step reads are also given to its run as the outputs its
 *   pool writes go to, so each layer's ScatterND writes only the step's new positions into them
 *   (onnxruntime's WebGPU ScatterND copies its input to its output only when they are different
 *   buffers). A step neither allocates nor copies a pool. Reading them first is safe: a layer's
 *   ScatterND takes its updates from what attention made of that layer's slice of the pools, so the
 *   slice is taken before; and a step writes only past each row's cached positions, which no
 *   attention of the step reads from the pools anyway (the past mask hides them).
 * - "fresh": each step's graph allocates the pools it returns, copies of those it read with the new
 *   positions written, and the ones it read are released. The provider's buffer cache keeps at most
 *   six released buffers of each large size, so a step then allocates pool-sized buffers on the
 *   device anew, and copies the whole pool. Kept to measure the difference.
 */
export type DevicePoolWrites = "inplace" | "fresh";

/** The pool type's shape facts: a sliding-window layer's pools are rings (see {@link DeviceKvPool.layerPositions}). */
type PoolShape = Pick<ModelShape, "layers" | "kvHeads" | "headDim" | "slidingWindow">;

/**
 * The KV cache of a GPU session, resident on the device: per layer one key pool and one value pool
 * [slots, kv_heads, positions, head_dim] (devicePoolDims) at a fixed capacity; a sliding-window
 * layer's pools are rings of at most slidingCacheCapacity(window) positions, position p at index
 * p mod ring, which the step graph reads and writes so (compiler's device-io.ts). Each step's graph
 * writes the new positions (see DevicePoolWrites), so the cache never crosses to JavaScript. Only
 * the lengths live here.
 *
 * Every pool starts as zeros made on the device (never uploaded: see DeviceZeros), each its own
 * buffer: positions no row has cached are masked, but a NaN there would still reach the softmax's
 * sum, and no two outputs of a graph may share a buffer.
 */
export class DeviceKvPool {
  readonly lengths: Int32Array;

  private constructor(
    readonly shape: PoolShape,
    readonly slots: number,
    /** Positions each slot holds, fixed. */
    readonly capacity: number,
    readonly writes: DevicePoolWrites,
    private readonly slotCopy: ort.InferenceSession,
    private readonly zerosMaker: DeviceZeros,
    /** Per layer, the key pool and the value pool. */
    private readonly keys: ort.Tensor[],
    private readonly values: ort.Tensor[],
  ) {
    this.lengths = new Int32Array(slots);
  }

  /** A pool of `slots` x `capacity` positions, all zero, made on `device` (the slot-copy graph's). */
  static async create(
    shape: PoolShape,
    slots: number,
    capacity: number,
    slotCopy: ort.InferenceSession,
    device: ComputeDevice,
    /** The pools' element type: the graph's (float16 on a half-precision artifact). */
    type: ZerosType = "float32",
    writes: DevicePoolWrites = "inplace",
  ): Promise<DeviceKvPool> {
    if (slots < 1 || capacity < 1) throw new RangeError(`a device KV pool needs at least one slot and one position (asked ${slots} x ${capacity})`);
    // The maker lives as long as the pool: a session released while its device output is in use crashes the process.
    const maker = await DeviceZeros.open(device, type);
    const keys: ort.Tensor[] = [];
    const values: ort.Tensor[] = [];
    for (let l = 0; l < shape.layers; l++) {
      const dims = devicePoolDims(slots, layerPositions(shape, capacity, l), shape);
      keys.push(await maker.make(dims));
      values.push(await maker.make(dims));
    }
    return new DeviceKvPool(shape, slots, capacity, writes, slotCopy, maker, keys, values);
  }

  /** Adds every layer's pools to a graph's feeds and, written in place, to its fetches as the outputs its pool writes go to. */
  bindPools(feeds: Record<string, ort.Tensor>, fetches: Record<string, ort.Tensor | null>): void {
    const inplace = this.writes === "inplace";
    for (let l = 0; l < this.shape.layers; l++) {
      feeds[DEVICE_GRAPH.keyPool(l)] = this.keys[l];
      feeds[DEVICE_GRAPH.valuePool(l)] = this.values[l];
      fetches[DEVICE_GRAPH.keyPoolOut(l)] = inplace ? this.keys[l] : null;
      fetches[DEVICE_GRAPH.valuePoolOut(l)] = inplace ? this.values[l] : null;
    }
  }

  /** Takes a graph's output pools as the cache, after a run bound with bindPools. */
  replacePools(out: ort.InferenceSession.OnnxValueMapType): void {
    for (let l = 0; l < this.shape.layers; l++) {
      const key = out[DEVICE_GRAPH.keyPoolOut(l)] as ort.Tensor;
      const value = out[DEVICE_GRAPH.valuePoolOut(l)] as ort.Tensor;
      if (this.writes === "inplace") {
        // Second handles on the pools' own buffers, which the graph wrote: the pools' tensors stay the cache's.
        if (key !== this.keys[l]) releaseDeviceTensor(key);
        if (value !== this.values[l]) releaseDeviceTensor(value);
        continue;
      }
      releaseDeviceTensor(this.keys[l]);
      releaseDeviceTensor(this.values[l]);
      this.keys[l] = key;
      this.values[l] = value;
    }
  }

  /** How many of each slot's first positions a step reaching `longest` positions reads (see pastSpan). */
  pastSpan(longest: number): number {
    return pastSpan(longest, this.capacity);
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
      const fetches: Record<string, ort.Tensor | null> = {};
      this.bindPools(feeds, fetches);
      this.replacePools(await this.slotCopy.run(feeds, fetches));
    }
    this.lengths[to] = length;
  }

  /** Positions a slot of layer `layer`'s pools holds: the capacity, or a sliding-window layer's ring. */
  layerPositions(layer: number): number {
    return layerPositions(this.shape, this.capacity, layer);
  }

  /** Bytes the pools hold on the device (keys and values of every layer, 4 bytes an element, or 2 in float16). */
  bytes(): number {
    const element = this.zerosMaker.type === "float16" ? 2 : 4;
    let positions = 0;
    for (let l = 0; l < this.shape.layers; l++) positions += this.layerPositions(l);
    return 2 * this.slots * positions * this.shape.kvHeads * this.shape.headDim * element;
  }

  /** Frees the device pools. */
  async dispose(): Promise<void> {
    for (const t of [...this.keys, ...this.values]) releaseDeviceTensor(t);
    await this.zerosMaker.release();
  }
}

/** Positions a slot of layer `layer` holds in pools of `capacity`: a sliding-window layer's ring is at most slidingCacheCapacity(window). */
function layerPositions(shape: PoolShape, capacity: number, layer: number): number {
  const sw = shape.slidingWindow;
  return sw?.layers.includes(layer) ? Math.min(capacity, slidingCacheCapacity(sw.window)) : capacity;
}

/** Disposes a tensor the device holds; a CPU tensor (zeros made for the CPU provider) is left to the garbage collector. */
function releaseDeviceTensor(t: ort.Tensor): void {
  if (t.location === "gpu-buffer") t.dispose();
}
