/**
 * The GPU compile target's graph ends (`runtime/artifact/device-graph.ts`): its inputs, the layers'
 * cached keys and values read from the device-resident pool, the pool writes, and a head that
 * returns each position's top candidates and log-normalizer instead of its logits row.
 */
import type { ModelShape } from "../../../runtime/artifact/index.js";
import {
  NO_POSITION,
  slidingCacheCapacity,
  DEVICE_GRAPH as D,
  devicePoolDims,
  deviceResultLayout,
  maskWords,
  MASK_WORD_BITS,
  TEXT_GRAPH as IO,
} from "../../../runtime/artifact/index.js";
import { DataType } from "../../onnx/onnx-proto.js";
import type { GraphBuilder } from "../../onnx/graph-builder.js";
import { type BlockContext, type DeviceWeights, emulatesLlamaCpp } from "./context.js";
import { topByBlocks } from "./top-k.js";

/** The float type the model's activations have: float16 where the GPU target computes in half precision. */
function activationType(ctx: BlockContext): DataType {
  return ctx.options.activations === "float16" ? DataType.FLOAT16 : DataType.FLOAT;
}

/** The final normalized hidden state of the computed positions, per graph (the `hidden` output's source). */
const normedHidden = new WeakMap<BlockContext, string>();

/** Records `normed` ([rows, positions, hidden], after the final norm) as what the GPU graph returns as `hidden`. */
export function deviceHidden(ctx: BlockContext, normed: string): string {
  normedHidden.set(ctx, normed);
  return normed;
}

/** Whether the graph is built for the GPU target. */
export function buildsForDevice(ctx: BlockContext): boolean {
  return ctx.options.device === "webgpu";
}

/** Device graphs whose model needs the explicit attention (see {@link explicitDeviceAttention}). */
const explicitOnly = new WeakSet<BlockContext>();

/**
 * Builds the explicit attention on every layer of this GPU graph, whatever `deviceAttention` asks,
 * for a model whose attention GroupQueryAttention does not compute as the CPU graph does (`why`,
 * recorded in the manifest when GroupQueryAttention was asked for). Called before the graph's inputs
 * are declared: the pools' keys are read transposed for it.
 */
export function explicitDeviceAttention(ctx: BlockContext, why: string): void {
  if (!deviceGqa(ctx)) return;
  explicitOnly.add(ctx);
  ctx.choices.push({ what: "device attention", choice: "explicit on every layer, GroupQueryAttention asked for", exact: true, why });
}

/** Whether the GPU target's attention is GroupQueryAttention (`BuildOptions.deviceAttention`, unless the model needs the explicit one). */
export function deviceGqa(ctx: BlockContext): boolean {
  return buildsForDevice(ctx) && ctx.options.deviceAttention !== "explicit" && !explicitOnly.has(ctx);
}

/** The form every linear weight takes in this graph (`BuildOptions.deviceWeights`): "source" on the CPU and in "llama.cpp" numerics. */
export function deviceWeightForm(ctx: BlockContext): DeviceWeights {
  if (!buildsForDevice(ctx) || emulatesLlamaCpp(ctx)) return "source";
  return ctx.options.deviceWeights ?? "source";
}

/** The manifest's words for a weight form other than "source". */
function describeWeightForm(form: Exclude<DeviceWeights, "source">, half: boolean): string {
  if (form.bits === 16) return `every linear weight dequantized to a dense ${half ? "float16" : "float32"} MatMul`;
  return `every linear weight re-quantized to MatMulNBits ${form.bits}-bit blocks of ${form.blockSize} with zero points (those stored so kept as they are)`;
}

/** Graphs whose layers' presents are the rows' whole past spans ([rows, kv_heads, past_span, head_dim]), not the new positions. */
const presentsAreRows = new WeakSet<BlockContext>();

/** Says that the attention blocks of `ctx` return the rows' whole past spans as presents (GroupQueryAttention applying its rotary), so the pools take their new positions from them. */
export function markPresentsAsRows(ctx: BlockContext): void {
  presentsAreRows.add(ctx);
}

/** GroupQueryAttention's `seqlens_k` and `total_sequence_length`, per graph. */
const gqaLengthsByGraph = new WeakMap<BlockContext, [string, string]>();

/**
 * GroupQueryAttention's lengths from the position ids: a row's last position is its total length
 * less one (`seqlens_k`, [rows] int32, as a row's positions are its cache indices from 0), and the
 * longest row's total is `total_sequence_length` (an int32 scalar). Built once per graph.
 * The total is taken over the int64 positions, which stay with the CPU provider as the position ids
 * do: GroupQueryAttention reads it on the CPU, and taken over the int32 lengths it would run on the
 * device and be copied back mid-step, a wait for everything queued before it.
 */
export function gqaLengths(ctx: BlockContext): [seqlensK: string, total: string] {
  const done = gqaLengthsByGraph.get(ctx);
  if (done) return done;
  const g = ctx.g;
  const last = g.op("Gather", [D.positionIds, g.constant(DataType.INT64, [], BigInt64Array.of(-1n), "i64")], { attributes: { axis: 1 } });
  const seqlens = g.op("Cast", [last], { attributes: { to: DataType.INT32 } });
  const longest = g.op("Add", [g.op("ReduceMax", [last], { attributes: { keepdims: 0 } }), g.constant(DataType.INT64, [], BigInt64Array.of(1n), "i64")]);
  const total = g.op("Cast", [longest], { attributes: { to: DataType.INT32 } });
  const lengths: [string, string] = [seqlens, total];
  gqaLengthsByGraph.set(ctx, lengths);
  return lengths;
}

/**
 * Declares the device graph's inputs and outputs, and names each layer's past keys (transposed,
 * [rows, kv_heads, head_dim, past_span], or as the values for GroupQueryAttention) and values
 * ([rows, kv_heads, past_span, head_dim]) as the CPU graph's `past_key_t.<l>` / `past_value.<l>`,
 * sliced from the pools, so the attention blocks build the same way for both targets. The past span
 * (`past_mask`'s last axis) is the first positions of each slot a step reads: what its rows hold,
 * not the pools' whole capacity, so a step copies and attends only those.
 */
export function declareDeviceIo(ctx: BlockContext, h: ModelShape): void {
  shapes.set(ctx, h);
  if (h.slidingWindow) {
    ctx.choices.push({
      what: "device sliding window",
      choice: `the ${h.slidingWindow.layers.length} sliding-window layers keep rings of ${slidingCacheCapacity(h.slidingWindow.window)} positions a slot (at most the pools' capacity), attended by the explicit attention masked to each query's last ${h.slidingWindow.window} positions`,
      exact: true,
      why: "a local layer holds its window, not the context: the adapter's memory goes to the global layers' positions; GroupQueryAttention reads its past in position order, which a ring is not",
    });
  }
  const form = deviceWeightForm(ctx);
  if (form !== "source") {
    ctx.choices.push({
      what: "device weights",
      choice: `${describeWeightForm(form, activationType(ctx) === DataType.FLOAT16)}; the embedding lookup keeps the GGUF's blocks`,
      exact: false,
      why: "the bytes a step reads per weight against its rounding, as the optimization track measures them",
    });
  }
  const g = ctx.g;
  g.input(D.inputIds, DataType.INT64, ["rows", "seq"]);
  g.input(D.positionIds, DataType.INT64, ["rows", "seq"]);
  // The masks are added to the attention scores, in the activations' type.
  const act = activationType(ctx);
  g.input(D.pastMask, act, ["rows", 1, 1, "past_span"]);
  g.input(D.newMask, act, [1, 1, "group_seq", "seq"]);
  g.input(D.logitsFrom, DataType.INT64, [1]);
  g.input(D.firstSlot, DataType.INT64, [1]);
  g.input(D.tokenMask, DataType.INT32, ["rows", maskWords(h.vocab)]);
  g.input(D.adjustIds, DataType.INT64, ["rows", "adjustments"]);
  g.input(D.adjustBias, DataType.FLOAT, ["rows", "adjustments"]);
  g.input(D.adjustRepetition, DataType.FLOAT, ["rows", "adjustments"]);
  g.input(D.adjustSubtract, DataType.FLOAT, ["rows", "adjustments"]);
  g.input(D.scoreTargets, DataType.INT64, ["rows", "positions"]);
  // The pools hold keys and values in the activations' type: a half-precision model's are float16 already.
  for (let l = 0; l < h.layers; l++) {
    g.input(D.keyPool(l), act, devicePoolDims("slots", poolPositions(h, l), h));
    g.input(D.valuePool(l), act, devicePoolDims("slots", poolPositions(h, l), h));
  }
  g.output(D.results, DataType.FLOAT, ["rows", "positions", deviceResultLayout(h.vocab).width]);
  g.output(D.hidden, DataType.FLOAT, ["rows", "positions", h.hidden]);
  for (let l = 0; l < h.layers; l++) {
    g.output(D.keyPoolOut(l), act, devicePoolDims("slots", poolPositions(h, l), h));
    g.output(D.valuePoolOut(l), act, devicePoolDims("slots", poolPositions(h, l), h));
  }
  const [start, end] = slotRange(g);
  const concat = (a: string, b: string) => g.op("Concat", [a, b], { attributes: { axis: 0 } });
  const from = concat(start, g.int64s([0]));
  const to = concat(end, pastSpan(g));
  const axes = g.int64s([0, 2]);
  const sliding = new Set(h.slidingWindow?.layers ?? []);
  // A ring is read whole once the past span reaches its size: [first_slot, 0] to [first_slot + rows, min(past_span, ring)].
  const ringTo = sliding.size > 0 ? concat(end, ringSpan(ctx, h)) : "";
  for (let l = 0; l < h.layers; l++) {
    const rowsOf = (pool: string) => g.op("Slice", [pool, from, sliding.has(l) ? ringTo : to, axes]);
    // The pools are in the layout GroupQueryAttention reads, [rows, kv_heads, capacity, head_dim]; the explicit attention's keys transposed.
    if (deviceGqa(ctx) && !sliding.has(l)) g.node("Identity", [rowsOf(D.keyPool(l))], { names: [IO.pastKey(l)] });
    else g.node("Transpose", [rowsOf(D.keyPool(l))], { attributes: { perm: [0, 1, 3, 2] }, names: [IO.pastKey(l)] });
    g.node("Identity", [rowsOf(D.valuePool(l))], { names: [IO.pastValue(l)] });
  }
}

/** The positions axis of layer `l`'s pools: "ring" for a sliding-window layer (at most slidingCacheCapacity(window), at most the capacity), else "capacity". */
function poolPositions(h: ModelShape, l: number): string {
  return h.slidingWindow?.layers.includes(l) ? "ring" : "capacity";
}

/** [ring]: the positions a slot's ring holds, read from the first sliding-window layer's pool. */
function ringSize(ctx: BlockContext, h: ModelShape): string {
  return ctx.g.op("Shape", [D.keyPool(h.slidingWindow!.layers[0])], { attributes: { start: 2, end: 3 } });
}

/** [ring span]: the ring positions a step reads, min(past_span, ring): a ring holds index i = position i until it wraps. */
function ringSpan(ctx: BlockContext, h: ModelShape): string {
  return ctx.g.op("Min", [pastSpan(ctx.g), ringSize(ctx, h)]);
}

/**
 * The position each ring index a step reads holds for each row, int64 [rows, 1, ring span]: the
 * latest position p before the row's first new one (its cached length L) with p mod ring = i, that
 * is L - 1 - ((L - 1 - i) mod ring); far in the past (so that any window hides it) where the row has
 * not cached that index yet (i >= L). An index a shorter cut-back left stale reads as a position
 * below the row's window (the scheduler reuses a prefix only while its ring holds that window).
 */
export function deviceRingPositions(ctx: BlockContext): string {
  const g = ctx.g;
  const h = shapes.get(ctx);
  if (!h?.slidingWindow) throw new Error("deviceRingPositions needs a declared device graph with sliding-window layers");
  const int64 = (v: bigint) => g.constant(DataType.INT64, [], BigInt64Array.of(v), "i64");
  const ring = g.op("Squeeze", [ringSize(ctx, h), g.int64s([0])]);
  const indices = g.op("Unsqueeze", [g.op("Range", [int64(0n), g.op("Squeeze", [ringSpan(ctx, h), g.int64s([0])]), int64(1n)]), g.int64s([0])]); // [1, ring span]
  const last = g.op("Sub", [g.op("Slice", [D.positionIds, g.int64s([0]), g.int64s([1]), g.int64s([1])]), int64(1n)]); // [rows, 1]: L - 1
  const back = g.op("Sub", [last, indices]); // [rows, ring span]: L - 1 - i
  const held = g.op("Sub", [last, g.op("Mod", [back, ring])]);
  const cached = g.op("GreaterOrEqual", [back, int64(0n)]);
  return g.op("Unsqueeze", [g.op("Where", [cached, held, int64(BigInt(NO_POSITION))]), g.int64s([1])]);
}

/** The shape each device graph was declared with, for its outputs. */
const shapes = new WeakMap<BlockContext, ModelShape>();

/** [past_span]: the positions of each slot the step reads (`past_mask`'s last axis). */
function pastSpan(g: GraphBuilder): string {
  return g.op("Shape", [D.pastMask], { attributes: { start: 3, end: 4 } });
}

/** [first_slot], [first_slot + rows]: the pool slots this step computes. */
function slotRange(g: GraphBuilder): [string, string] {
  const rows = g.op("Shape", [D.inputIds], { attributes: { start: 0, end: 1 } });
  return [D.firstSlot, g.op("Add", [D.firstSlot, rows])];
}

/**
 * `indices` made to depend on layer `l`'s past slice (plus a zero computed from its shape): written in
 * place, a ring's ScatterND overwrites positions that a chunk's first queries may still read from
 * that slice, and the explicit attention's new keys (its updates) do not depend on the slice, so
 * nothing else orders the read before the write. A pool that is not a ring is written only past each
 * row's cached positions, which the step's attention never reads.
 */
function afterRead(ctx: BlockContext, indices: string, l: number): string {
  const g = ctx.g;
  const span = g.op("Shape", [IO.pastValue(l)], { attributes: { start: 2, end: 3 } });
  return g.op("Add", [indices, g.op("Sub", [span, span])]);
}

/**
 * The device graph's outputs from the logits [rows, positions, vocab]: the constraint mask and the
 * logit adjustments applied before the top candidates, and the pools with each layer's new keys
 * and values (the attention blocks' `present_key.<l>` / `present_value.<l>`, [rows, kv_heads,
 * seq, head_dim]) written at their positions.
 */
export function emitDeviceOutputs(ctx: BlockContext, logits: string): void {
  const g = ctx.g;
  const h = shapes.get(ctx);
  if (!h) throw new Error("emitDeviceOutputs before declareDeviceIo");
  // The head runs in float32 whatever the activations: log-normalizers and log-probabilities need its precision.
  g.halfFloats = false;
  const half = activationType(ctx) === DataType.FLOAT16;
  const masked = maskedLogits(ctx, half ? g.op("Cast", [logits], { attributes: { to: DataType.FLOAT } }) : logits, h.vocab);
  const lastAxis = g.int64s([-1]);
  const logNormalizer = g.op("ReduceLogSumExp", [masked, lastAxis], { attributes: { keepdims: 1 } });
  const { adjusted, ids: adjustIds } = adjustedLogits(ctx, masked);
  const { candidates: k, top } = deviceResultLayout(h.vocab);
  const [rawIds, rawValues] = rawTop(ctx, masked, adjustIds, k, h.vocab);
  const topLogits = g.op("Slice", [rawValues, g.int64s([0]), g.int64s([top]), lastAxis]);
  const topIds = g.op("Slice", [rawIds, g.int64s([0]), g.int64s([top]), lastAxis]);
  const candidates = candidatesAmong(ctx, adjusted, rawIds, adjustIds, k);
  const candidateRaw = g.op("GatherElements", [masked, g.op("Cast", [candidates.ids], { attributes: { to: DataType.INT64 } })], { attributes: { axis: -1 } });
  const targetLogit = g.op("GatherElements", [masked, g.op("Unsqueeze", [D.scoreTargets, g.int64s([2])])], { attributes: { axis: -1 } });
  // In deviceResultLayout's order: one tensor comes back from the device.
  g.node("Concat", [candidates.logits, candidates.ids, candidateRaw, topLogits, topIds, logNormalizer, targetLogit], {
    attributes: { axis: -1 },
    names: [D.results],
  });
  const hidden = normedHidden.get(ctx);
  if (!hidden) throw new Error("emitDeviceOutputs before the final norm (deviceHidden)");
  g.node(half ? "Cast" : "Identity", [hidden], { ...(half ? { attributes: { to: DataType.FLOAT } } : {}), names: [D.hidden] });
  writePools(ctx, h);
  ctx.choices.push({
    what: "device head",
    choice: `${half ? "float16" : "float32"} activations; float32 head: top ${k} candidates after the constraint bitset and logit adjustments, top ${top} masked logits and the log-normalizer per position`,
    exact: true,
    why: "only these small tensors leave the device; sampling draws among the candidates (the mass beyond them is left out)",
  });
}

/** The logits with tokens whose `token_mask` bit is clear at -inf, [rows, positions, vocab]. */
function maskedLogits(ctx: BlockContext, logits: string, vocab: number): string {
  const g = ctx.g;
  // Bit j of a word is floor(word / 2^j) mod 2 on its unsigned value: plain uint32 division and
  // multiplication, which the WebGPU provider runs. The bits are sliced to the vocabulary as floats:
  // the provider slices no uint32, and a Slice on the CPU provider would copy the bits back mid-step.
  const words = g.op("Unsqueeze", [g.op("Cast", [D.tokenMask], { attributes: { to: DataType.UINT32 } }), g.int64s([2])]);
  const powers = new Uint32Array(MASK_WORD_BITS).map((_, j) => 2 ** j);
  const shifted = g.op("Div", [words, g.constant(DataType.UINT32, [MASK_WORD_BITS], powers, "u32")]);
  const two = g.constant(DataType.UINT32, [], Uint32Array.of(2), "u32");
  const bits = g.op("Sub", [shifted, g.op("Mul", [g.op("Div", [shifted, two]), two])]);
  const flat = g.op("Cast", [g.op("Reshape", [bits, g.int64s([0, -1])])], { attributes: { to: DataType.FLOAT } });
  const perToken = g.op("Slice", [flat, g.int64s([0]), g.int64s([vocab]), g.int64s([1])]);
  const allowed = g.op("Unsqueeze", [g.op("Greater", [perToken, g.constant(DataType.FLOAT, [], Float32Array.of(0.5), "f32")]), g.int64s([1])]);
  return g.op("Where", [allowed, logits, g.constant(DataType.FLOAT, [], Float32Array.of(-Infinity), "f32")]);
}

/**
 * Adjustment entries a row is assumed to carry when the graph decides how many block stages its sort
 * takes (see topByBlocks). More still sort exactly; a stage may then take many dispatches.
 */
const ASSUMED_ADJUSTMENTS = 64;

/**
 * The highest masked logits before adjustments, [rows, positions, k + n] ids and values (n: the
 * adjustments per row, so at most the whole vocabulary), sorted descending, lowest id first on
 * ties, taken by blocks (topByBlocks: SmolLM2's 49,152 tokens take 3 sorts of one dispatch each
 * instead of one of 138, and less work; Llama 3's 128,256 take 3 as well). Entries past the finite
 * ones (masked tokens) have id -1 and value -inf.
 */
function rawTop(ctx: BlockContext, masked: string, adjustIds: string, k: number, vocab: number): [ids: string, values: string] {
  const g = ctx.g;
  const n = g.op("Shape", [adjustIds], { attributes: { start: 2, end: 3 } });
  const count = g.op("Min", [g.op("Add", [n, g.int64s([k])]), g.int64s([vocab])]);
  return topByBlocks(g, masked, { count, width: vocab, widestCount: k + ASSUMED_ADJUSTMENTS });
}

/**
 * The top `k` ids after adjustments (as floats) and their adjusted logits, sorted by adjusted logit descending, without a second sort of
 * the vocabulary: an id outside the raw top k + n that is not adjusted has at least k + n raw
 * logits above it, of which at most n moved below it, so it is not in the adjusted top k. So the
 * adjusted top k is the top k of the raw top k + n and the adjusted ids. An adjusted id already
 * among the raw ones, or repeated (the runtime pads a row's entries by repeating its first), is
 * kept once: its other copies are set to -inf (they can only come after every finite candidate).
 */
function candidatesAmong(ctx: BlockContext, adjusted: string, rawIds: string, adjustIds: string, k: number): { logits: string; ids: string } {
  const g = ctx.g;
  const f32 = (v: number) => g.constant(DataType.FLOAT, [], Float32Array.of(v), "f32");
  const axis = (x: string, at: number) => g.op("Unsqueeze", [x, g.int64s([at])]);
  // Compared as int32 and counted as floats: the forms the WebGPU provider runs these operators in.
  const int32 = (x: string) => g.op("Cast", [x], { attributes: { to: DataType.INT32 } });
  const asFloat = (x: string) => g.op("Cast", [x], { attributes: { to: DataType.FLOAT } });
  const adjust32 = int32(adjustIds);
  const raw32 = int32(rawIds);
  // [rows, positions, n, k + n]: entry j of the adjusted ids against the raw ids.
  const inRaw = asFloat(g.op("Equal", [axis(adjust32, 3), axis(raw32, 2)]));
  // [rows, positions, n, n]: entry j against an earlier entry i of the same row.
  const n = g.op("Squeeze", [g.op("Shape", [adjustIds], { attributes: { start: 2, end: 3 } }), g.int64s([0])]);
  const entries = g.op("Range", [g.constant(DataType.INT64, [], BigInt64Array.of(0n), "i64"), n, g.constant(DataType.INT64, [], BigInt64Array.of(1n), "i64")]);
  const earlier = asFloat(g.op("Less", [axis(int32(entries), 0), axis(int32(entries), 1)])); // [n, n]: 1 where i < j, at [j, i]
  const repeated = g.op("Mul", [asFloat(g.op("Equal", [axis(adjust32, 3), axis(adjust32, 2)])), earlier]);
  const count = (x: string) => g.op("ReduceMax", [x, g.int64s([-1])], { attributes: { keepdims: 0 } });
  const dropped = g.op("Greater", [g.op("Add", [count(inRaw), count(repeated)]), f32(0)]);
  const adjustedAt = (ids: string) => g.op("GatherElements", [adjusted, ids], { attributes: { axis: -1 } });
  // A raw entry that is no token (id -1) stays -inf, whatever the id -1 gathers.
  const noToken = g.op("Less", [raw32, g.constant(DataType.INT32, [], Int32Array.of(0), "i32")]);
  const rawAdjusted = g.op("Where", [noToken, f32(-Infinity), adjustedAt(g.op("Max", [raw32, g.constant(DataType.INT32, [], Int32Array.of(0), "i32")]))]);
  const values = g.op("Concat", [rawAdjusted, g.op("Where", [dropped, f32(-Infinity), adjustedAt(adjustIds)])], { attributes: { axis: -1 } });
  // Ids gathered as floats (exact below 2^24): int64 ones would be gathered on the CPU, a transfer mid-step.
  const ids = g.op("Concat", [rawIds, asFloat(adjustIds)], { attributes: { axis: -1 } });
  const [logits, at] = g.node("TopK", [values, g.int64s([k])], { outputs: 2, attributes: { axis: -1, largest: 1, sorted: 1 } });
  return { logits, ids: g.op("GatherElements", [ids, at], { attributes: { axis: -1 } }) };
}

/**
 * The masked logits with each row's adjustments applied at their ids, in the CPU sampler's order:
 * bias added, repetition_penalty, then presence and frequency subtracted. A masked token stays -inf.
 * Also returns the ids, [rows, positions, n].
 */
function adjustedLogits(ctx: BlockContext, masked: string): { adjusted: string; ids: string } {
  const g = ctx.g;
  // [rows, n] -> [rows, positions, n]: the same adjustments at every computed position.
  const positions = g.op("Shape", [masked], { attributes: { start: 1, end: 2 } });
  const along = g.op("Concat", [g.int64s([1]), positions, g.int64s([1])], { attributes: { axis: 0 } });
  const perPosition = (x: string) => g.op("Expand", [g.op("Unsqueeze", [x, g.int64s([1])]), along]);
  const ids = perPosition(D.adjustIds);
  const biased = g.op("Add", [g.op("GatherElements", [masked, ids], { attributes: { axis: -1 } }), perPosition(D.adjustBias)]);
  const repetition = perPosition(D.adjustRepetition);
  const zero = g.constant(DataType.FLOAT, [], Float32Array.of(0), "f32");
  const repeated = g.op("Where", [g.op("Greater", [biased, zero]), g.op("Div", [biased, repetition]), g.op("Mul", [biased, repetition])]);
  const value = g.op("Sub", [repeated, perPosition(D.adjustSubtract)]);
  return { adjusted: g.op("ScatterElements", [masked, ids, value], { attributes: { axis: -1 } }), ids };
}

/** Each layer's pools with the step's new keys and values written at [slot, position] (ScatterND). */
function writePools(ctx: BlockContext, h: ModelShape): void {
  const g = ctx.g;
  const [start] = slotRange(g);
  const rows = g.op("Shape", [D.inputIds], { attributes: { start: 0, end: 1 } });
  const int64 = (v: bigint) => g.constant(DataType.INT64, [], BigInt64Array.of(v), "i64");
  const count = (n: string) => g.op("Squeeze", [n, g.int64s([0])]);
  const slots = g.op("Add", [g.op("Range", [int64(0n), count(rows), int64(1n)]), start]);
  if (presentsAreRows.has(ctx)) {
    if (h.slidingWindow) throw new Error("the webgpu target writes no ring from GroupQueryAttention's presents");
    // The presents are the rows' whole past spans, [rows, kv_heads, past_span, head_dim]: their new
    // positions are gathered (the presents seen as one row of head_dim per (row, head, position))
    // and written at (slot, head, position), so a step writes only what it computed.
    const heads = g.op("Range", [int64(0n), int64(BigInt(h.kvHeads)), int64(1n)]);
    const rowIds = g.op("Unsqueeze", [g.op("Range", [int64(0n), count(rows), int64(1n)]), g.int64s([1, 2])]);
    const headIds = g.op("Unsqueeze", [heads, g.int64s([0, 2])]);
    const positions = g.op("Unsqueeze", [D.positionIds, g.int64s([1])]);
    const span = pastSpan(g);
    // [rows, kv_heads, seq]: ((row * kv_heads + head) * past_span + position).
    const flat = g.op("Add", [g.op("Mul", [g.op("Add", [g.op("Mul", [rowIds, int64(BigInt(h.kvHeads))]), headIds]), span]), positions]);
    const grid = g.op("Shape", [flat]);
    const along = (x: string) => g.op("Unsqueeze", [g.op("Expand", [x, grid]), g.int64s([3])]);
    const slotIds = g.op("Unsqueeze", [slots, g.int64s([1, 2])]);
    const at = g.op("Concat", [along(slotIds), along(headIds), along(positions)], { attributes: { axis: 3 } });
    const byPosition = g.int64s([-1, h.headDim]);
    const newOf = (present: string) => g.op("Gather", [g.op("Reshape", [present, byPosition]), flat], { attributes: { axis: 0 } });
    for (let l = 0; l < h.layers; l++) {
      g.node("ScatterND", [D.keyPool(l), at, newOf(IO.presentKey(l))], { names: [D.keyPoolOut(l)] });
      g.node("ScatterND", [D.valuePool(l), at, newOf(IO.presentValue(l))], { names: [D.valuePoolOut(l)] });
    }
    return;
  }
  // Each new key's index into the pool, (slot, kv head, position), in the order [rows, seq, kv_heads, 3]
  // of the keys before the attention blocks transposed them: the transpose back cancels theirs.
  const heads = g.op("Range", [int64(0n), int64(BigInt(h.kvHeads)), int64(1n)]);
  const indicesAt = (positions: string) => {
    const seq = g.op("Shape", [positions], { attributes: { start: 1, end: 2 } });
    const grid = g.op("Concat", [rows, seq, g.int64s([h.kvHeads])], { attributes: { axis: 0 } });
    const along = (x: string, axes: number[]) => g.op("Unsqueeze", [g.op("Expand", [g.op("Unsqueeze", [x, g.int64s(axes)]), grid]), g.int64s([3])]);
    return g.op("Concat", [along(slots, [1, 2]), along(heads, [0, 1]), along(positions, [2])], { attributes: { axis: 3 } });
  };
  const indices = indicesAt(D.positionIds);
  // A ring takes the last min(seq, ring) new positions at position mod ring: earlier ones of a longer chunk would share their indices.
  const sliding = new Set(h.slidingWindow?.layers ?? []);
  let ring: { indices: string; keep: (present: string) => string } | null = null;
  if (sliding.size > 0) {
    const size = ringSize(ctx, h);
    const seq = g.op("Shape", [D.positionIds], { attributes: { start: 1, end: 2 } });
    const first = g.op("Max", [g.op("Sub", [seq, size]), g.int64s([0])]);
    const tail = (x: string, axis: number) => g.op("Slice", [x, first, g.int64s([Number.MAX_SAFE_INTEGER]), g.int64s([axis])]);
    ring = { indices: indicesAt(g.op("Mod", [tail(D.positionIds, 1), size])), keep: (present) => tail(present, 2) };
  }
  for (let l = 0; l < h.layers; l++) {
    // The attention blocks' presents are [rows, kv_heads, seq, head_dim], in the pools' type; the pool takes them per position.
    const perPosition = (x: string) => g.op("Transpose", [sliding.has(l) ? ring!.keep(x) : x], { attributes: { perm: [0, 2, 1, 3] } });
    const at = sliding.has(l) ? afterRead(ctx, ring!.indices, l) : indices;
    g.node("ScatterND", [D.keyPool(l), at, perPosition(IO.presentKey(l))], { names: [D.keyPoolOut(l)] });
    g.node("ScatterND", [D.valuePool(l), at, perPosition(IO.presentValue(l))], { names: [D.valuePoolOut(l)] });
  }
}
