import { DataType } from "../../onnx/onnx-proto.js";
import type { LinearWeight } from "../../quant/linear-weight.js";
import { type BlockContext, emulatesLlamaCpp, f16, type RoundedActivation, roundTo, scalar } from "./context.js";

/**
 * llama.cpp's quantize_row_q8_1 (AVX2): per 32-block, q = round_half_even(x * 127/amax), d = fp16(amax/127),
 * s = fp16(d * sum(q)). Returns the dequantized activation q*d and the block sums s.
 */
function quantizeQ8_1(ctx: BlockContext, x: string, k: number): RoundedActivation {
  const key = `${x}|q8_1`;
  const cached = ctx.rounded.get(key);
  if (cached) return cached;
  const g = ctx.g;
  const blocks = g.op("Reshape", [x, g.int64s([0, 0, k / 32, 32])]);
  // Axes counted from the front: onnxruntime 1.30 ignores a negative axis when the input is empty (an expert no row chose).
  const amax = g.op("ReduceMax", [g.op("Abs", [blocks]), g.int64s([3])], { attributes: { keepdims: 1 } });
  const inv = g.op("Div", [scalar(ctx, 127), g.op("Max", [amax, scalar(ctx, 1e-30)])]);
  const q = g.op("Round", [g.op("Mul", [blocks, inv])]);
  const d = g.op("Div", [amax, scalar(ctx, 127)]);
  const xq = g.op("Reshape", [g.op("Mul", [q, f16(ctx, d)]), g.int64s([0, 0, k])]);
  const sumQ = g.op("ReduceSum", [q, g.int64s([3])], { attributes: { keepdims: 1 } });
  const sums = g.op("Reshape", [f16(ctx, g.op("Mul", [sumQ, d])), g.int64s([0, 0, k / 32])]);
  const out = { xq, sums };
  ctx.rounded.set(key, out);
  return out;
}

/**
 * llama.cpp's quantize_row_q8_K, the activation type of every K-quant dot product: per 256-block,
 * iscale = 127/amax and d = 1/iscale in float32 (no fp16 scale), q = round_half_even(x * iscale).
 * Returns q*d and its sums per 32-block (for Q4_K's mins, as the dot product's integer bsums).
 */
function quantizeQ8_K(ctx: BlockContext, x: string, k: number): RoundedActivation {
  const key = `${x}|q8_K`;
  const cached = ctx.rounded.get(key);
  if (cached) return cached;
  const g = ctx.g;
  const blocks = g.op("Reshape", [x, g.int64s([0, 0, k / 256, 256])]);
  const amax = g.op("ReduceMax", [g.op("Abs", [blocks]), g.int64s([3])], { attributes: { keepdims: 1 } });
  const iscale = g.op("Div", [scalar(ctx, 127), g.op("Max", [amax, scalar(ctx, 1e-30)])]);
  const q = g.op("Round", [g.op("Mul", [blocks, iscale])]);
  const d = g.op("Div", [scalar(ctx, 1), iscale]);
  const xq = g.op("Reshape", [g.op("Mul", [q, d]), g.int64s([0, 0, k])]);
  const sumQ = g.op("ReduceSum", [g.op("Reshape", [q, g.int64s([0, 0, k / 256, 8, 32])]), g.int64s([4])], { attributes: { keepdims: 0 } });
  const sums = g.op("Reshape", [g.op("Mul", [sumQ, d]), g.int64s([0, 0, k / 32])]);
  const out = { xq, sums };
  ctx.rounded.set(key, out);
  return out;
}

/** The activation rounding llama.cpp applies before this weight's matmul, in "llama.cpp" numerics; null otherwise. */
export function emulatedActivation(ctx: BlockContext, x: string, weight: LinearWeight): RoundedActivation | null {
  if (!emulatesLlamaCpp(ctx)) return null;
  if (weight.activation === "q8_K") return quantizeQ8_K(ctx, x, weight.k);
  if (weight.activation === "f16") return { xq: roundTo(ctx, x, DataType.FLOAT16), sums: null };
  if (weight.activation === "bf16") return { xq: roundTo(ctx, x, DataType.BFLOAT16), sums: null };
  if (weight.kind === "nbits" && weight.blockSize === 32) return quantizeQ8_1(ctx, x, weight.k);
  return null;
}
