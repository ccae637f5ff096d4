import { DataType } from "../../onnx/onnx-proto.js";
import { type BlockContext, MS } from "./context.js";

/** RMS norm over the last axis: x / sqrt(mean(x^2) + eps) * gamma; `name` is the GGUF tensor of gamma. */
export function rmsNorm(ctx: BlockContext, x: string, name: string, gamma: Float32Array, eps: number): string {
  const g = ctx.g;
  return g.op("SimplifiedLayerNormalization", [x, g.weight(name, DataType.FLOAT, [gamma.length], gamma)], {
    attributes: { axis: -1, epsilon: { float: eps }, stash_type: 1 },
  });
}

/** norm(x + residual) as one fused op: returns [normalized, x + residual] (the new residual stream). */
export function skipRmsNorm(ctx: BlockContext, x: string, residual: string, name: string, gamma: Float32Array, eps: number): [string, string] {
  const g = ctx.g;
  const gammaName = g.weight(name, DataType.FLOAT, [gamma.length], gamma);
  const outs = g.node("SkipSimplifiedLayerNormalization", [x, residual, gammaName], {
    domain: MS,
    names: [`${name}.out`, "", "", `${name}.residual`],
    attributes: { epsilon: { float: eps } },
  });
  return [outs[0], outs[3]];
}

/**
 * RMS norm of each head's vector on its own (Qwen3's and Gemma 3's q_norm/k_norm): x [B, S, heads*headDim]
 * is normalized per [headDim] slice with one shared gamma of headDim, and keeps its shape.
 */
export function headRmsNorm(ctx: BlockContext, x: string, heads: number, name: string, gamma: Float32Array, eps: number): string {
  const g = ctx.g;
  const perHead = g.op("Reshape", [x, g.int64s([0, 0, heads, gamma.length])]);
  return g.op("Reshape", [rmsNorm(ctx, perHead, name, gamma, eps), g.int64s([0, 0, heads * gamma.length])]);
}
