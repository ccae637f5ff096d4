/**
 * The highest entries of a long row without a global sort on the GPU: onnxruntime's WebGPU TopK sorts
 * a row of up to {@link ONE_DISPATCH_SORT} entries in one dispatch (a bitonic sort in workgroup
 * memory) and a longer one in global memory, in about log2(n)^2 / 2 dispatches whatever k: 136 over
 * SmolLM2's 49,152 tokens, 138 over Whisper's 51,865.
 */
import { DataType } from "../../onnx/onnx-proto.js";
import type { GraphBuilder } from "../../onnx/graph-builder.js";

/** Entries the provider's TopK sorts in one dispatch. */
export const ONE_DISPATCH_SORT = 2048;

/** Options of {@link topByBlocks}. */
export interface TopByBlocksOptions {
  /** int64 [1]: how many entries to return (at most `width`). */
  count: string;
  /** The row's length (the last axis of the values). */
  width: number;
  /**
   * The largest `count` the graph is shaped for: each stage's blocks keep this many, so that the last
   * sort takes one dispatch. A larger count still sorts exactly, its stages then in many dispatches.
   */
  widestCount: number;
}

/**
 * The `count` highest of `values` ([a, b, width] floats) along the last axis, [a, b, count] values
 * and their indices as floats (exact below 2^24), sorted descending, the lower index first on ties,
 * as one TopK over the whole row returns them. A row wider than one dispatch's sort is taken in
 * blocks of ONE_DISPATCH_SORT: the top `count` of each block, then of those, and so on until one sort
 * takes the rest (exact: each of the row's top `count` is among its block's). Indices are floats taken
 * from an iota by the sorts' indices, since the provider casts no int64 tensor and int64 ones would
 * be computed on the CPU mid-run. Entries past the finite ones (-inf, the sort's padding) have index
 * -1 and value -inf.
 */
export function topByBlocks(g: GraphBuilder, values: string, options: TopByBlocksOptions): [ids: string, values: string] {
  const { count, width: rowWidth, widestCount } = options;
  const f32 = (v: number) => g.constant(DataType.FLOAT, [], Float32Array.of(v), "f32");
  const sorted = { outputs: 2, attributes: { axis: -1, largest: 1, sorted: 1 } };
  const gather = (data: string, at: string) => g.op("GatherElements", [data, at], { attributes: { axis: -1 } });
  // The first stage's ids: an iota over the row padded to whole blocks, broadcast to the rows.
  const blocks = Math.ceil(rowWidth / ONE_DISPATCH_SORT);
  const iotaLength = blocks > 1 ? blocks * ONE_DISPATCH_SORT : rowWidth;
  const iota = g.constant(
    DataType.FLOAT,
    [iotaLength],
    Float32Array.from({ length: iotaLength }, (_, i) => i),
    "f32",
  );
  const iotaLike = (x: string, dims: number[]) => g.op("Expand", [g.op("Reshape", [iota, g.int64s(dims)]), g.op("Shape", [x])]);
  let top = values;
  let ids: string | null = null;
  let width = rowWidth;
  while (width > ONE_DISPATCH_SORT) {
    // Padded to whole blocks: -inf values, id -1. The first stage's width is known here; later ones follow the count.
    const length = g.op("Shape", [top], { attributes: { start: -1 } });
    const block = g.int64s([ONE_DISPATCH_SORT]);
    const pad =
      ids === null
        ? g.int64s([(ONE_DISPATCH_SORT - (rowWidth % ONE_DISPATCH_SORT)) % ONE_DISPATCH_SORT])
        : g.op("Mod", [g.op("Sub", [block, g.op("Mod", [length, block])]), block]);
    const pads = g.op("Concat", [g.int64s([0, 0, 0, 0, 0]), pad], { attributes: { axis: 0 } });
    const byBlock = g.op("Reshape", [g.op("Pad", [top, pads, f32(-Infinity)]), g.int64s([0, 0, -1, ONE_DISPATCH_SORT])]);
    const [blockValues, at] = g.node("TopK", [byBlock, g.op("Min", [count, block])], sorted);
    const blockIds: string =
      ids === null
        ? gather(iotaLike(byBlock, [blocks, ONE_DISPATCH_SORT]), at)
        : gather(g.op("Reshape", [g.op("Pad", [ids, pads, f32(-1)]), g.int64s([0, 0, -1, ONE_DISPATCH_SORT])]), at);
    const flat = (x: string) => g.op("Reshape", [x, g.int64s([0, 0, -1])]);
    [top, ids] = [flat(blockValues), flat(blockIds)];
    width = Math.ceil(width / ONE_DISPATCH_SORT) * Math.min(widestCount, ONE_DISPATCH_SORT);
  }
  const [best, at] = g.node("TopK", [top, count], sorted);
  const bestIds = gather(ids ?? iotaLike(values, [rowWidth]), at);
  // -inf (masked) and the sort's padding (-FLT_MAX, index -1): no entry.
  const none = g.op("Less", [best, f32(-3.4e38)]);
  return [g.op("Where", [none, f32(-1), bestIds]), g.op("Where", [none, f32(-Infinity), best])];
}
