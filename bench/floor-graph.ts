/**
 * The weight-product floor of a decode step: a graph holding only a model's weight products, built
 * by the compiler's own blocks with the same weights and options as its real graph (per layer the
 * fused QKV MatMulNBits, attn_output, gate|up, down, then the LM head; layers chained through the
 * products' outputs, no norms, rotary, attention or KV cache). `bench floor` and `bench gpu` time it.
 */
import { writeFileSync } from "node:fs";
import { DEFAULT_COMPILE_OPTIONS, type CompileOptions } from "../src/compiler/compile.js";
import { resolveArchitecture } from "../src/compiler/graph/architectures.js";
import { qkvProjection } from "../src/compiler/graph/blocks/attention.js";
import { blockContext } from "../src/compiler/graph/blocks/context.js";
import { lmHead } from "../src/compiler/graph/blocks/decoder.js";
import { project } from "../src/compiler/graph/blocks/linear.js";
import { gatedMlp } from "../src/compiler/graph/blocks/mlp.js";
import { readGguf } from "../src/compiler/gguf/reader.js";
import { GgufWeights } from "../src/compiler/gguf-weights.js";
import { GraphBuilder } from "../src/compiler/onnx/graph-builder.js";
import { DataType, type Dim } from "../src/compiler/onnx/onnx-proto.js";

/**
 * Writes the floor graph of `ggufPath` to `path` (weights beside it, `<path>.data`): input `x`
 * [rows, 1, hidden] (`rows` a number, or a name for any count), output the LM head's logits [rows, 1, vocab], or with `tinyOutput` their
 * maximum alone, [1, 1, 1] (a device's floor then reads one float back per step, not the logits).
 * Returns the model's hidden width and vocabulary.
 */
export async function buildFloorGraph(
  ggufPath: string,
  path: string,
  options: CompileOptions = {},
  rows: Dim = 1,
  tinyOutput = false,
): Promise<{ hidden: number; vocab: number }> {
  const file = await readGguf(ggufPath);
  const weights = new GgufWeights(file);
  const { hyper: h } = resolveArchitecture(file, weights);
  if (!("ffn" in h) || !weights.has("blk.0.ffn_gate.weight"))
    throw new Error(`the floor graph covers the Llama family's gated MLP; ${h.architecture} is not one`);
  const g = new GraphBuilder(`${path}.data`);
  const ctx = blockContext(g, weights, { ...DEFAULT_COMPILE_OPTIONS, ...options });
  g.input("x", DataType.FLOAT, [rows, 1, h.hidden]);
  let x = "x";
  for (let layer = 0; layer < h.layers; layer++) {
    const { q } = await qkvProjection(ctx, layer, x, h, 1);
    const attn = await project(ctx, q, `blk.${layer}.attn_output.weight`, `blk.${layer}.attn_output`);
    x = await gatedMlp(ctx, layer, attn, (h as { ffn: number }).ffn);
  }
  const logits = await lmHead(ctx, x);
  if (tinyOutput) g.output(g.op("ReduceMax", [logits]), DataType.FLOAT, [1, 1, 1]);
  else g.output(logits, DataType.FLOAT, [rows, 1, h.vocab]);
  writeFileSync(path, g.finish("floor", "bench", {}));
  return { hidden: h.hidden, vocab: h.vocab };
}
