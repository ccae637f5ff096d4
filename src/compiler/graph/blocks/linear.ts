import { DataType } from "../../onnx/onnx-proto.js";
import { foldMinsTo8Bit, foldMinsToBlockMeans } from "../../quant/fold-mins.js";
import { concatRows, fusable, type LinearWeight } from "../../quant/linear-weight.js";
import { dequantizeToFloat, requantize } from "../../quant/requantize.js";
import { emulatedActivation } from "./activation.js";
import { type BlockContext, type DeviceWeights, emulatesLlamaCpp, MS } from "./context.js";
import { deviceWeightForm } from "./device-io.js";

/** x @ W^T for one weight, as MatMulNBits (plus the block-minimum term) or a float MatMul; `name` prefixes its initializers. */
export function linear(ctx: BlockContext, x: string, weight: LinearWeight, name: string): string {
  const g = ctx.g;
  // Before the minimum folds: a re-quantized weight has zero points and no minimums to fold.
  weight = inWeightForm(weight, deviceWeightForm(ctx));
  // Folded per linear, after fusion, so a fused QKV or gate|up is folded once.
  if (weight.kind === "nbits" && weight.mins && !emulatesLlamaCpp(ctx)) {
    if (ctx.options.minFold === "8bit") weight = foldMinsTo8Bit(weight);
    else if (ctx.options.minFold === "block-means") weight = foldMinsToBlockMeans(weight);
  }
  if (weight.kind === "nbits" && weight.blockMeans) x = withBlockMeans(ctx, x, weight.blockMeans.blocks, weight.blockMeans.factors, weight.blockSize);
  const act = emulatedActivation(ctx, x, weight);
  if (act) x = act.xq;
  if (weight.kind === "float") {
    return g.op("MatMul", [x, g.weight(`${name}.wT`, DataType.FLOAT, [weight.k, weight.n], weight.weightT)]);
  }
  const kBlocks = Math.ceil(weight.k / weight.blockSize);
  const blob = (weight.blockSize * weight.bits) / 8;
  const inputs = [
    x,
    g.weight(`${name}.qweight`, DataType.UINT8, [weight.n, kBlocks, blob], weight.packed),
    g.weight(`${name}.scales`, DataType.FLOAT, [weight.n, kBlocks], weight.scales),
  ];
  if (weight.zeroPoints) inputs.push(g.weight(`${name}.zp`, DataType.UINT8, [weight.zeroPoints.length], weight.zeroPoints));
  let y = g.op("MatMulNBits", inputs, {
    domain: MS,
    attributes: {
      K: weight.k,
      N: weight.n,
      bits: weight.bits,
      block_size: weight.blockSize,
      accuracy_level: emulatesLlamaCpp(ctx) ? 0 : ctx.options.accuracyLevel,
    },
  });
  if (weight.mins) {
    const sums = act?.sums
      ? act.sums
      : // Axis 3, not -1: onnxruntime 1.30 ignores a negative axis when the input is empty (an expert no row chose).
        g.op("ReduceSum", [g.op("Reshape", [x, g.int64s([0, 0, kBlocks, weight.blockSize])]), g.int64s([3])], { attributes: { keepdims: 0 } });
    const mins = g.weight(`${name}.mins`, DataType.FLOAT, [kBlocks, weight.n], weight.mins);
    y = g.op("Add", [y, g.op("MatMul", [sums, mins])]);
  }
  return y;
}

/** A weight in the GPU target's weight form (`BuildOptions.deviceWeights`); unchanged for "source" and where it is stored so. */
export function inWeightForm(weight: LinearWeight, form: DeviceWeights): LinearWeight {
  if (form === "source") return weight;
  if (form.bits === 16) return dequantizeToFloat(weight);
  return requantize(weight, form);
}

/** Inputs already given their block means, per graph, by input and block size: gate and up, or Q, K and V, read the same. */
const withMeans = new WeakMap<BlockContext, Map<string, string>>();

/**
 * [B, S, K] x followed by the means of its `blocks` blocks of `blockSize` times each of `factors`:
 * [B, S, K + blocks * factors.length], the input of a weight folded by foldMinsToBlockMeans.
 */
function withBlockMeans(ctx: BlockContext, x: string, blocks: number, factors: number[], blockSize: number): string {
  let done = withMeans.get(ctx);
  if (!done) withMeans.set(ctx, (done = new Map()));
  const key = `${x}/${blocks}x${blockSize}/${factors.join(",")}`;
  const cached = done.get(key);
  if (cached) return cached;
  const g = ctx.g;
  // Axis 3 and explicit sizes, as for the ReduceSum above: an expert no row chose has an empty input.
  // (AveragePool would be one node, but onnxruntime 1.30 rejects it on a [B, 0, K] input.)
  const means = g.op("ReduceMean", [g.op("Reshape", [x, g.int64s([0, 0, blocks, blockSize])]), g.int64s([3])], { attributes: { keepdims: 0 } });
  const scaled = factors.map((f) => (f === 1 ? means : g.op("Mul", [means, g.constant(DataType.FLOAT, [], new Float32Array([f]), "f32")])));
  const out = g.op("Concat", [x, ...scaled], { attributes: { axis: -1 } });
  done.set(key, out);
  return out;
}

/** x @ W^T for the GGUF tensor `tensor`, its initializers named after `label`. */
export async function project(ctx: BlockContext, x: string, tensor: string, label: string): Promise<string> {
  return linear(ctx, x, await ctx.w.linear(tensor), label);
}

/**
 * x times several weights at once, their outputs concatenated in order (Q|K|V, gate|up): one fused
 * matmul when their encodings allow, else one matmul each and a Concat (recorded as a choice).
 */
export function fusedLinear(ctx: BlockContext, x: string, ws: LinearWeight[], label: string): string {
  // In the GPU target's weight form first: weights stored in different blocks may fuse once re-quantized alike.
  const form = deviceWeightForm(ctx);
  ws = ws.map((wt) => inWeightForm(wt, form));
  // One fused matmul gets one activation rounding, so in "llama.cpp" numerics fuse only like with like.
  const like = ws.every((wt) => fusable(ws[0], wt) && (!emulatesLlamaCpp(ctx) || wt.activation === ws[0].activation));
  if (like) return linear(ctx, x, ws.length === 1 ? ws[0] : concatRows(ws), label);
  ctx.choices.push({ what: label, choice: "separate matmuls + Concat", exact: true, why: "mixed block encodings cannot share one MatMulNBits" });
  return ctx.g.op(
    "Concat",
    ws.map((wt, i) => linear(ctx, x, wt, `${label}.${i}`)),
    { attributes: { axis: -1 } },
  );
}

/** Loads the named GGUF tensors (in parallel) for {@link fusedLinear}. */
export function loadLinears(ctx: BlockContext, tensors: string[]): Promise<LinearWeight[]> {
  return Promise.all(tensors.map((n) => ctx.w.linear(n)));
}
