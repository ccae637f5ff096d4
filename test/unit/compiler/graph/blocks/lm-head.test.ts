// The LM head's three forms run in onnxruntime on a random Q8_0 head tied to the embedding: "source"
// (the GGUF's blocks), "4bit" (re-quantized) and "4bit-rescored" (the 4-bit logits with each
// position's top LM_HEAD_RESCORED_TOP recomputed from the source blocks). Float activations
// (accuracy level 0), so the rescored logits can be checked against plain dot products with ggml's
// dequantized rows, computed here.

import { mkdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import * as ort from "onnxruntime-node";
import { describe, expect, it } from "vitest";
import { dequantize } from "../../../../../src/compiler/gguf/dequant.js";
import { GgmlType } from "../../../../../src/compiler/gguf/types.js";
import { blockContext, type BuildOptions, type LmHeadWeight } from "../../../../../src/compiler/graph/blocks/context.js";
import { LM_HEAD_RESCORED_TOP, lmHead, tokenEmbedding } from "../../../../../src/compiler/graph/blocks/decoder.js";
import type { WeightSource } from "../../../../../src/compiler/graph/weights.js";
import { GraphBuilder } from "../../../../../src/compiler/onnx/graph-builder.js";
import { DataType } from "../../../../../src/compiler/onnx/onnx-proto.js";
import { repackQ8_0 } from "../../../../../src/compiler/quant/repack.js";
import { TEXT_GRAPH as IO, type ModelShape } from "../../../../../src/runtime/artifact/index.js";
import { encodeTensor } from "../../../../fixtures/synthetic/quantize.js";
import { Random } from "../../../../fixtures/synthetic/tiny-model.js";
import { floatTensor, tempDir } from "../../support.js";

const dir = tempDir("kiln-lm-head-");
const VOCAB = 512;
const HIDDEN = 64;
const POSITIONS = 3;
const raw = encodeTensor(GgmlType.Q8_0, new Random(7100).normals(VOCAB * HIDDEN, 0, 0.05));
const dense = dequantize(GgmlType.Q8_0, raw, VOCAB * HIDDEN); // [VOCAB, HIDDEN]
const x = Float32Array.from(new Random(7200).normals(POSITIONS * HIDDEN, 0, 1));

const tiedHead: WeightSource = {
  has: (name) => name === "token_embd.weight",
  dims: () => [HIDDEN, VOCAB],
  floats: async () => dense,
  linear: async () => repackQ8_0(raw, VOCAB, HIDDEN),
};

/** lmHead alone (x -> logits) in `mode`, run once; returns the logits [POSITIONS, VOCAB] and the head's recorded choice. */
async function runHead(mode: LmHeadWeight): Promise<{ logits: Float32Array; choice: string }> {
  const folder = join(dir, mode);
  mkdirSync(folder, { recursive: true });
  const g = new GraphBuilder(join(folder, "model.onnx.data"));
  const options: BuildOptions = { accuracyLevel: 0, numerics: "fast", lmHead: mode };
  const ctx = blockContext(g, tiedHead, options);
  const input = g.input("x", DataType.FLOAT, [1, "positions", HIDDEN]);
  g.op("Identity", [await lmHead(ctx, input)], { names: ["logits"] });
  g.output("logits", DataType.FLOAT, [1, "positions", VOCAB]);
  writeFileSync(join(folder, "model.onnx"), g.finish(mode, "test", {}));
  const session = await ort.InferenceSession.create(join(folder, "model.onnx"));
  try {
    const out = (await session.run({ x: floatTensor(x, [1, POSITIONS, HIDDEN]) })).logits as ort.Tensor;
    expect(out.dims).toEqual([1, POSITIONS, VOCAB]);
    return { logits: out.data as Float32Array, choice: ctx.choices.find((c) => c.what === "lm head")!.choice };
  } finally {
    await session.release();
  }
}

/** x[p] . row r of the dequantized head, in float64. */
function exactLogit(p: number, r: number): number {
  let s = 0;
  for (let i = 0; i < HIDDEN; i++) s += x[p * HIDDEN + i] * dense[r * HIDDEN + i];
  return s;
}

/** The `count` largest entries' indices of one row. */
function topIndices(row: Float32Array, count: number): Set<number> {
  return new Set(
    Array.from(row.keys())
      .sort((a, b) => row[b] - row[a])
      .slice(0, count),
  );
}

describe("lmHead: 4-bit head with the top logits rescored from the source blocks", () => {
  it("each position's top LM_HEAD_RESCORED_TOP logits of the 4-bit head become the source head's; the rest stay the 4-bit head's", async () => {
    expect(LM_HEAD_RESCORED_TOP).toBeLessThan(VOCAB);
    const [source, approx, rescored] = await Promise.all([runHead("source"), runHead("4bit"), runHead("4bit-rescored")]);
    expect(rescored.choice).toContain(`top ${LM_HEAD_RESCORED_TOP} logits per position recomputed`);
    for (let p = 0; p < POSITIONS; p++) {
      const row = (a: Float32Array) => a.subarray(p * VOCAB, (p + 1) * VOCAB);
      const top = topIndices(row(approx.logits), LM_HEAD_RESCORED_TOP);
      let rescoredCount = 0;
      for (let r = 0; r < VOCAB; r++) {
        const got = row(rescored.logits)[r];
        if (top.has(r)) {
          expect(Math.abs(got - exactLogit(p, r))).toBeLessThan(1e-4);
          expect(Math.abs(got - row(source.logits)[r])).toBeLessThan(1e-4);
          rescoredCount++;
        } else {
          expect(got).toBe(row(approx.logits)[r]);
        }
      }
      expect(rescoredCount).toBe(LM_HEAD_RESCORED_TOP);
      // The 4-bit head really differs from the source (or the test could not tell the forms apart).
      const diff = Math.max(...Array.from(top, (r) => Math.abs(row(approx.logits)[r] - exactLogit(p, r))));
      expect(diff).toBeGreaterThan(1e-3);
    }
  });

  it("a tied head shares the embedding's blocks: one copy of the table in the graph, and both lookups run", async () => {
    const folder = join(dir, "tied");
    mkdirSync(folder, { recursive: true });
    const g = new GraphBuilder(join(folder, "model.onnx.data"));
    const ctx = blockContext(g, tiedHead, { accuracyLevel: 0, numerics: "fast", lmHead: "4bit-rescored", embedding: "quantized" });
    g.input(IO.inputIds, DataType.INT64, [1, "seq"]);
    const shape = { vocab: VOCAB, hidden: HIDDEN } as ModelShape;
    g.op("Identity", [await lmHead(ctx, await tokenEmbedding(ctx, shape))], { names: ["logits"] });
    g.output("logits", DataType.FLOAT, [1, "seq", VOCAB]);
    writeFileSync(join(folder, "model.onnx"), g.finish("tied", "test", {}));
    const session = await ort.InferenceSession.create(join(folder, "model.onnx"));
    try {
      const ids = BigInt64Array.of(3n, 400n);
      const logits = ((await session.run({ [IO.inputIds]: new ort.Tensor("int64", ids, [1, 2]) })).logits as ort.Tensor).data as Float32Array;
      // Each token's embedding is its own row, so its own logit is the row's squared norm: the largest, and rescored.
      for (const [p, id] of [3, 400].entries()) {
        let norm = 0;
        for (let i = 0; i < HIDDEN; i++) norm += dense[id * HIDDEN + i] ** 2;
        expect(Math.abs(logits[p * VOCAB + id] - norm)).toBeLessThan(1e-4);
      }
    } finally {
      await session.release();
    }
    expect(ctx.choices.map((c) => c.what)).toEqual(["token embedding", "lm head"]);
    // One copy of the 8-bit table (32 KB) + its scales (4 KB) + the 4-bit head (21 KB); a second table would pass 64 KB.
    expect(statSync(join(folder, "model.onnx.data")).size).toBeLessThan(2 * VOCAB * HIDDEN);
  });
});
