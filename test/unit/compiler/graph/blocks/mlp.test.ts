// The gated MLP's two layouts of gate and up (BuildOptions.gateUp) run in onnxruntime on random Q4_K
// gate/up and Q8_0 down weights: "separate" (a MatMulNBits each) must give bitwise the output of
// "fused" (one MatMulNBits and a Split), at the int8-activation fast path the track measures, and
// both must match a float64 SwiGLU of ggml's dequantized weights.

import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import * as ort from "onnxruntime-node";
import { describe, expect, it } from "vitest";
import { dequantize } from "../../../../../src/compiler/gguf/dequant.js";
import { GgmlType } from "../../../../../src/compiler/gguf/types.js";
import { blockContext, type GateUpLayout } from "../../../../../src/compiler/graph/blocks/context.js";
import { gatedMlp } from "../../../../../src/compiler/graph/blocks/mlp.js";
import type { WeightSource } from "../../../../../src/compiler/graph/weights.js";
import { GraphBuilder } from "../../../../../src/compiler/onnx/graph-builder.js";
import { DataType } from "../../../../../src/compiler/onnx/onnx-proto.js";
import { repackQ4_K, repackQ8_0 } from "../../../../../src/compiler/quant/repack.js";
import { encodeTensor } from "../../../../fixtures/synthetic/quantize.js";
import { Random } from "../../../../fixtures/synthetic/tiny-model.js";
import { floatTensor, tempDir } from "../../support.js";

const dir = tempDir("kiln-mlp-");
const HIDDEN = 256;
const FFN = 256;
const ROWS = 3;
const rnd = new Random(8100);
const tensors = new Map([
  ["blk.0.ffn_gate.weight", { type: GgmlType.Q4_K, n: FFN, k: HIDDEN, raw: encodeTensor(GgmlType.Q4_K, rnd.normals(FFN * HIDDEN, 0, 0.08)) }],
  ["blk.0.ffn_up.weight", { type: GgmlType.Q4_K, n: FFN, k: HIDDEN, raw: encodeTensor(GgmlType.Q4_K, rnd.normals(FFN * HIDDEN, 0, 0.08)) }],
  ["blk.0.ffn_down.weight", { type: GgmlType.Q8_0, n: HIDDEN, k: FFN, raw: encodeTensor(GgmlType.Q8_0, rnd.normals(HIDDEN * FFN, 0, 0.08)) }],
]);
const x = Float32Array.from(new Random(8200).normals(ROWS * HIDDEN, 0, 1));

const weights: WeightSource = {
  has: (name) => tensors.has(name),
  dims: (name) => [tensors.get(name)!.k, tensors.get(name)!.n],
  floats: async (name) => {
    const t = tensors.get(name)!;
    return dequantize(t.type, t.raw, t.n * t.k);
  },
  linear: async (name) => {
    const t = tensors.get(name)!;
    return t.type === GgmlType.Q4_K ? repackQ4_K(t.raw, t.n, t.k) : repackQ8_0(t.raw, t.n, t.k);
  },
};

/** gatedMlp alone (x -> y) with `gateUp`, run once: its output and the graph's op types. */
async function runMlp(gateUp: GateUpLayout): Promise<{ y: Float32Array; ops: string[] }> {
  const folder = join(dir, gateUp);
  mkdirSync(folder, { recursive: true });
  const g = new GraphBuilder(join(folder, "model.onnx.data"));
  const ctx = blockContext(g, weights, { accuracyLevel: 4, numerics: "fast", gateUp });
  const input = g.input("x", DataType.FLOAT, [1, "rows", HIDDEN]);
  g.op("Identity", [await gatedMlp(ctx, 0, input, FFN)], { names: ["y"] });
  g.output("y", DataType.FLOAT, [1, "rows", HIDDEN]);
  writeFileSync(join(folder, "model.onnx"), g.finish(gateUp, "test", {}));
  const session = await ort.InferenceSession.create(join(folder, "model.onnx"));
  try {
    const y = (await session.run({ x: floatTensor(x, [1, ROWS, HIDDEN]) })).y as ort.Tensor;
    return { y: y.data as Float32Array, ops: g.nodes.map((n) => n.op) };
  } finally {
    await session.release();
  }
}

/** down(silu(gate x) * up x) in float64 from the dequantized weights ([n, k] row-major). */
function reference(): Float64Array {
  const w = (name: string) => {
    const t = tensors.get(name)!;
    return dequantize(t.type, t.raw, t.n * t.k);
  };
  const [gate, up, down] = [w("blk.0.ffn_gate.weight"), w("blk.0.ffn_up.weight"), w("blk.0.ffn_down.weight")];
  const out = new Float64Array(ROWS * HIDDEN);
  for (let r = 0; r < ROWS; r++) {
    const h = new Float64Array(FFN);
    for (let j = 0; j < FFN; j++) {
      let gs = 0;
      let us = 0;
      for (let i = 0; i < HIDDEN; i++) {
        gs += x[r * HIDDEN + i] * gate[j * HIDDEN + i];
        us += x[r * HIDDEN + i] * up[j * HIDDEN + i];
      }
      h[j] = (gs / (1 + Math.exp(-gs))) * us;
    }
    for (let o = 0; o < HIDDEN; o++) {
      let s = 0;
      for (let j = 0; j < FFN; j++) s += h[j] * down[o * FFN + j];
      out[r * HIDDEN + o] = s;
    }
  }
  return out;
}

describe("gatedMlp: gate and up fused or separate", () => {
  it("separate matmuls give bitwise the fused matmul's output, without its Split, and both match a float64 SwiGLU", async () => {
    const [fused, separate] = [await runMlp("fused"), await runMlp("separate")];
    expect(fused.ops).toContain("Split");
    expect(separate.ops).not.toContain("Split");
    expect(separate.ops.filter((op) => op === "MatMulNBits").length).toBe(fused.ops.filter((op) => op === "MatMulNBits").length + 1);
    expect(Array.from(separate.y)).toEqual(Array.from(fused.y));
    const want = reference();
    let err = 0;
    let scale = 0;
    for (let i = 0; i < want.length; i++) {
      err = Math.max(err, Math.abs(fused.y[i] - want[i]));
      scale = Math.max(scale, Math.abs(want[i]));
    }
    // int8 activations at accuracy level 4: a few percent of the largest output at most.
    expect(err / scale).toBeLessThan(0.05);
  });
});
