/**
 * The decoder's self-attention cache on a GPU: per layer a key pool and a value pool [slots, heads,
 * capacity, head_dim] kept on the device at the decoder's whole text context, so no decoder call
 * sends its rows' past from JavaScript (round-tripping a KV cache through JavaScript made WebGPU
 * 3-7x slower than the CPU). Only each call's new positions cross, from the decoder to the write
 * graph, every layer's in one tensor (the decoder's `presents`): onnxruntime-node 1.30 keeps one output binding per session that puts any output at
 * gpu-buffer, and an output fetched by one call but not the next (the decoder's alignment weights,
 * its logits or its top tokens) stays bound with the earlier call's shape, which fails the run
 * ("Tensor size mismatch"); a session with every output on the CPU runs without that binding.
 * Three small graphs, built here, run on the device around each decoder call:
 * - rows' past: the call's slots sliced from the pools to the past span, keys transposed as the
 *   decoder reads them, left on the device as its inputs;
 * - write: the decoder's presents (the new positions) written into the pools at each row's
 *   positions (ScatterND), in place: the pools are the run's pre-allocated outputs, so a call
 *   neither allocates nor copies a pool;
 * - moves: slots set to other slots' caches (beams reordered and forked), one run for all moves,
 *   each reading the pools as they were (the Gather copies the sources before the ScatterND).
 * Only the lengths live in JavaScript.
 */
import * as ort from "onnxruntime-node";
import { type ModelShape, presentEntry, SPEECH_GRAPH } from "../artifact/index.js";
import { DeviceZeros, type ZerosType } from "../device/device-zeros.js";
import { executionProvidersFor, SESSION_LOG_SEVERITY } from "../device/execution-providers.js";
import type { ComputeDevice } from "../device/index.js";
import { ElementType, type SmallNode, smallGraphBytes, type SmallValue } from "../onnx/small-graph.js";
import type { DecoderCache, PastFeeds, SlotMove } from "./decoder-cache.js";

const D = SPEECH_GRAPH.decoder;

/** The helper graphs' own names: the pools and the positions they read and write. */
const G = {
  keyPool: (l: number) => `key_pool.${l}`,
  valuePool: (l: number) => `value_pool.${l}`,
  keyPoolOut: (l: number) => `key_pool_out.${l}`,
  valuePoolOut: (l: number) => `value_pool_out.${l}`,
  /** Slice bounds of the rows' past: [first slot, 0] to [first slot + rows, span], on axes [0, 2]. */
  starts: "starts",
  ends: "ends",
  axes: "axes",
  /** [1, rows, heads, seq, 3]: the (slot, head, position) each new key and value goes to. */
  writeAt: "write_at",
  /** Entry `i` of the decoder's presents (see presentEntry), [1, rows, heads, seq, head_dim]. */
  presentPart: (i: number) => `present_part.${i}`,
  /** [moves] source slots and [moves, 1] destination slots. */
  from: "from",
  to: "to",
} as const;

type Shape = Pick<ModelShape, "layers" | "kvHeads" | "headDim">;

export class DeviceDecoderCache implements DecoderCache {
  readonly lengths: Int32Array;

  private constructor(
    private readonly shape: Shape,
    readonly slots: number,
    /** Positions a slot holds: the text context, plus one position where rows not kept write theirs. */
    readonly capacity: number,
    private readonly graphs: { past: ort.InferenceSession; write: ort.InferenceSession; moves: ort.InferenceSession },
    private readonly zerosMaker: DeviceZeros,
    private readonly keys: ort.Tensor[],
    private readonly values: ort.Tensor[],
  ) {
    this.lengths = new Int32Array(slots);
  }

  /**
   * A cache of `slots` slots of `textContext` positions each, zeros made on `device` (the CPU too, to
   * test it without one), its keys and values of `type` (the decoder's: float16 on a half-precision
   * artifact).
   */
  static async create(shape: Shape, slots: number, textContext: number, device: ComputeDevice, type: ZerosType = "float32"): Promise<DeviceDecoderCache> {
    if (slots < 1 || textContext < 1) throw new RangeError(`a decoder cache needs at least one slot and one position (asked ${slots} x ${textContext})`);
    const capacity = textContext + 1;
    const location = device === "cpu" ? "cpu" : "gpu-buffer";
    const session = async (bytes: Uint8Array, outputs: Record<string, ort.Tensor.DataLocation>) =>
      ort.InferenceSession.create(bytes, {
        executionProviders: executionProvidersFor(device),
        logSeverityLevel: SESSION_LOG_SEVERITY,
        preferredOutputLocation: outputs,
      });
    const layers = [...Array(shape.layers).keys()];
    // Pools written in place are declared "cpu": onnxruntime-node writes a pre-allocated device output only where the output is not put at gpu-buffer.
    const poolOutputs = Object.fromEntries(layers.flatMap((l) => [G.keyPoolOut(l), G.valuePoolOut(l)]).map((n) => [n, "cpu" as const]));
    const element = type === "float16" ? ElementType.float16 : ElementType.float;
    const graphs = {
      past: await session(pastGraph(shape, element), Object.fromEntries(layers.flatMap((l) => [D.pastKey(l), D.pastValue(l)]).map((n) => [n, location]))),
      write: await session(writeGraph(shape, element), poolOutputs),
      moves: await session(movesGraph(shape, element), poolOutputs),
    };
    // The maker lives as long as the pools: a session released while its device output is in use crashes the process.
    const maker = await DeviceZeros.open(device, type);
    const dims = [slots, shape.kvHeads, capacity, shape.headDim];
    const keys: ort.Tensor[] = [];
    const values: ort.Tensor[] = [];
    for (let l = 0; l < shape.layers; l++) {
      keys.push(await maker.make(dims));
      values.push(await maker.make(dims));
    }
    return new DeviceDecoderCache(shape, slots, capacity, graphs, maker, keys, values);
  }

  async copyPrefixes(moves: readonly SlotMove[]): Promise<void> {
    for (const m of moves) {
      for (const slot of [m.from, m.to]) if (!(slot >= 0 && slot < this.slots)) throw new RangeError(`slot ${slot} is not among the cache's ${this.slots}`);
      if (m.length > this.lengths[m.from]) throw new RangeError(`slot ${m.from} holds ${this.lengths[m.from]} positions, not ${m.length}`);
    }
    const copies = moves.filter((m) => m.from !== m.to && m.length > 0);
    if (copies.length > 0) {
      const feeds: Record<string, ort.Tensor> = {
        [G.from]: new ort.Tensor(
          "int64",
          BigInt64Array.from(copies, (m) => BigInt(m.from)),
          [copies.length],
        ),
        [G.to]: new ort.Tensor(
          "int64",
          BigInt64Array.from(copies, (m) => BigInt(m.to)),
          [copies.length, 1],
        ),
      };
      await this.runInPlace(this.graphs.moves, feeds);
    }
    for (const m of moves) this.lengths[m.to] = m.length;
  }

  /** `reach` is not needed: the pools hold the whole text context, and rows not kept write theirs past it. */
  async pastFeeds(firstSlot: number, rows: number): Promise<PastFeeds> {
    let longest = 0;
    for (let r = 0; r < rows; r++) longest = Math.max(longest, this.lengths[firstSlot + r]);
    const positions = decoderPastSpan(longest, this.capacity);
    const feeds: Record<string, ort.Tensor> = {
      [G.starts]: new ort.Tensor("int64", BigInt64Array.of(BigInt(firstSlot), 0n), [2]),
      [G.ends]: new ort.Tensor("int64", BigInt64Array.of(BigInt(firstSlot + rows), BigInt(positions)), [2]),
      [G.axes]: new ort.Tensor("int64", BigInt64Array.of(0n, 2n), [2]),
    };
    this.bindPools(feeds);
    const out = await this.graphs.past.run(feeds);
    const tensors: Record<string, ort.Tensor> = {};
    for (let l = 0; l < this.shape.layers; l++) {
      tensors[D.pastKey(l)] = out[D.pastKey(l)];
      tensors[D.pastValue(l)] = out[D.pastValue(l)];
    }
    return { tensors, positions, release: () => Object.values(tensors).forEach(releaseDeviceTensor) };
  }

  async write(firstSlot: number, keep: readonly boolean[], tokensPerRow: number, out: ort.InferenceSession.ReturnType): Promise<void> {
    const rows = keep.length;
    const { kvHeads } = this.shape;
    // Rows not kept (gap fillers) write theirs at the last position, past the text context, which no row ever reads.
    const scratch = this.capacity - 1;
    const at = new BigInt64Array(rows * kvHeads * tokensPerRow * 3);
    for (let r = 0; r < rows; r++)
      for (let h = 0; h < kvHeads; h++)
        for (let s = 0; s < tokensPerRow; s++) {
          const i = ((r * kvHeads + h) * tokensPerRow + s) * 3;
          const position = keep[r] ? this.lengths[firstSlot + r] + s : scratch;
          if (position > scratch || (keep[r] && position === scratch))
            throw new RangeError(`slot ${firstSlot + r} would reach position ${position}, past the cache's ${scratch}`);
          at[i] = BigInt(firstSlot + r);
          at[i + 1] = BigInt(h);
          at[i + 2] = BigInt(position);
        }
    // A leading axis of 1, as each layer's part of the presents has.
    const feeds: Record<string, ort.Tensor> = { [G.writeAt]: new ort.Tensor("int64", at, [1, rows, kvHeads, tokensPerRow, 3]), [D.presents]: out[D.presents] };
    await this.runInPlace(this.graphs.write, feeds);
    for (let r = 0; r < rows; r++) if (keep[r]) this.lengths[firstSlot + r] += tokensPerRow;
  }

  /** Bytes the pools hold on the device (4 an element, 2 in float16). */
  bytes(): number {
    const element = this.zerosMaker.type === "float16" ? 2 : 4;
    return 2 * this.shape.layers * this.slots * this.capacity * this.shape.kvHeads * this.shape.headDim * element;
  }

  async dispose(): Promise<void> {
    for (const t of [...this.keys, ...this.values]) releaseDeviceTensor(t);
    for (const s of Object.values(this.graphs)) await s.release();
    await this.zerosMaker.release();
  }

  private bindPools(feeds: Record<string, ort.Tensor>, fetches?: Record<string, ort.Tensor | null>): void {
    for (let l = 0; l < this.shape.layers; l++) {
      feeds[G.keyPool(l)] = this.keys[l];
      feeds[G.valuePool(l)] = this.values[l];
      if (fetches) {
        fetches[G.keyPoolOut(l)] = this.keys[l];
        fetches[G.valuePoolOut(l)] = this.values[l];
      }
    }
  }

  /** Runs a graph that writes the pools, given as its inputs and as its outputs, in place. */
  private async runInPlace(session: ort.InferenceSession, feeds: Record<string, ort.Tensor>): Promise<void> {
    const fetches: Record<string, ort.Tensor | null> = {};
    this.bindPools(feeds, fetches);
    const out = await session.run(feeds, fetches);
    // The run returns second handles on the pools' own buffers: the pools' tensors stay the cache's.
    for (let l = 0; l < this.shape.layers; l++) {
      const key = out[G.keyPoolOut(l)];
      const value = out[G.valuePoolOut(l)];
      if (key !== this.keys[l]) releaseDeviceTensor(key);
      if (value !== this.values[l]) releaseDeviceTensor(value);
    }
  }
}

/** Positions a decoder call's past spans, in steps of this many. */
const PAST_STEP = 64;

/**
 * How many of each slot's first positions a call whose longest row holds `longest` reads: the next
 * multiple of PAST_STEP (at least one step: a zero-length input crashes the WebGPU provider), at
 * most the capacity. Whisper's text context is short (448 positions), so steps of 64 keep the
 * shapes few (seven) while attending at most 63 positions more than the rows hold.
 */
export function decoderPastSpan(longest: number, capacity: number): number {
  return Math.min(capacity, Math.max(1, Math.ceil(longest / PAST_STEP)) * PAST_STEP);
}

const layersOf = (shape: Shape) => [...Array(shape.layers).keys()];

/** A float element type of the small graphs: the pools' and the decoder's keys and values. */
type FloatElement = typeof ElementType.float | typeof ElementType.float16;

function poolValues(shape: Shape, name: (l: number) => string, element: FloatElement): SmallValue[] {
  return layersOf(shape).map((l) => ({ name: name(l), type: element, dims: ["slots", shape.kvHeads, "capacity", shape.headDim] }));
}

/** Pools in -> each layer's rows' past: Slice on slots and positions, keys transposed to [rows, heads, head_dim, span]. */
function pastGraph(shape: Shape, element: FloatElement): Uint8Array {
  const slice = (pool: string, out: string): SmallNode => ({ op: "Slice", inputs: [pool, G.starts, G.ends, G.axes], outputs: [out] });
  const nodes = layersOf(shape).flatMap((l): SmallNode[] => [
    slice(G.keyPool(l), `rows_key.${l}`),
    { op: "Transpose", inputs: [`rows_key.${l}`], outputs: [D.pastKey(l)], attributes: { perm: [0, 1, 3, 2] } },
    slice(G.valuePool(l), D.pastValue(l)),
  ]);
  return smallGraphBytes({
    name: "decoder_cache_past",
    nodes,
    inputs: [
      ...poolValues(shape, G.keyPool, element),
      ...poolValues(shape, G.valuePool, element),
      ...[G.starts, G.ends, G.axes].map((name) => ({ name, type: ElementType.int64, dims: [2] })),
    ],
    outputs: layersOf(shape).flatMap((l) => [
      { name: D.pastKey(l), type: element, dims: ["rows", shape.kvHeads, shape.headDim, "span"] },
      { name: D.pastValue(l), type: element, dims: ["rows", shape.kvHeads, "span", shape.headDim] },
    ]),
  });
}

/**
 * Pools and the decoder's presents in -> pools out, each new key and value written at its (slot,
 * head, position): the presents split into their layers' keys and values ([1, rows, heads, seq,
 * head_dim] each, written through indices with the same leading axis).
 */
function writeGraph(shape: Shape, element: FloatElement): Uint8Array {
  const entries = 2 * shape.layers;
  const part = (l: number, kind: "key" | "value") => G.presentPart(presentEntry(l, kind));
  return smallGraphBytes({
    name: "decoder_cache_write",
    nodes: [
      { op: "Split", inputs: [D.presents], outputs: Array.from({ length: entries }, (_, i) => G.presentPart(i)), attributes: { axis: 0 } },
      ...layersOf(shape).flatMap((l): SmallNode[] => [
        { op: "ScatterND", inputs: [G.keyPool(l), G.writeAt, part(l, "key")], outputs: [G.keyPoolOut(l)] },
        { op: "ScatterND", inputs: [G.valuePool(l), G.writeAt, part(l, "value")], outputs: [G.valuePoolOut(l)] },
      ]),
    ],
    inputs: [
      ...poolValues(shape, G.keyPool, element),
      ...poolValues(shape, G.valuePool, element),
      { name: D.presents, type: element, dims: [entries, "rows", shape.kvHeads, "seq", shape.headDim] },
      { name: G.writeAt, type: ElementType.int64, dims: [1, "rows", shape.kvHeads, "seq", 3] },
    ],
    outputs: [...poolValues(shape, G.keyPoolOut, element), ...poolValues(shape, G.valuePoolOut, element)],
  });
}

/** Pools in -> pools out with slots `to` set to slots `from` (all read before any is written). */
function movesGraph(shape: Shape, element: FloatElement): Uint8Array {
  const move = (pool: string, out: string, l: number, kind: string): SmallNode[] => [
    { op: "Gather", inputs: [pool, G.from], outputs: [`moved_${kind}.${l}`] },
    { op: "ScatterND", inputs: [pool, G.to, `moved_${kind}.${l}`], outputs: [out] },
  ];
  return smallGraphBytes({
    name: "decoder_cache_moves",
    nodes: layersOf(shape).flatMap((l) => [...move(G.keyPool(l), G.keyPoolOut(l), l, "key"), ...move(G.valuePool(l), G.valuePoolOut(l), l, "value")]),
    inputs: [
      ...poolValues(shape, G.keyPool, element),
      ...poolValues(shape, G.valuePool, element),
      { name: G.from, type: ElementType.int64, dims: ["moves"] },
      { name: G.to, type: ElementType.int64, dims: ["moves", 1] },
    ],
    outputs: [...poolValues(shape, G.keyPoolOut, element), ...poolValues(shape, G.valuePoolOut, element)],
  });
}

/** Disposes a tensor the device holds; a CPU tensor is left to the garbage collector. */
function releaseDeviceTensor(t: ort.Tensor): void {
  if (t.location === "gpu-buffer") t.dispose();
}
