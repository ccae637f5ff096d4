// The mixture-of-experts block run in onnxruntime against a plain per-token reference written here:
// softmax over the router logits, top k, renormalized weights, the chosen experts' SwiGLU MLPs summed.
// The weights come from a fake WeightSource (random blocks encoded as the real files store experts:
// Q4_K gate/up, Q6_K down, F32 router), so the per-expert slicing of stacked tensors is exercised.

import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import * as ort from "onnxruntime-node";
import { describe, expect, it } from "vitest";
import { dequantize } from "../../../../../src/compiler/gguf/dequant.js";
import { GgmlType } from "../../../../../src/compiler/gguf/types.js";
import { blockContext, type BuildOptions } from "../../../../../src/compiler/graph/blocks/context.js";
import { type MoeSpec, moeFeedForward } from "../../../../../src/compiler/graph/blocks/moe.js";
import type { WeightSource } from "../../../../../src/compiler/graph/weights.js";
import { GraphBuilder } from "../../../../../src/compiler/onnx/graph-builder.js";
import { DataType } from "../../../../../src/compiler/onnx/onnx-proto.js";
import { floatLinear, repackQ4_K, repackQ6_K } from "../../../../../src/compiler/quant/repack.js";
import { encodeTensor } from "../../../../fixtures/synthetic/quantize.js";
import { Random } from "../../../../fixtures/synthetic/tiny-model.js";
import { floatTensor, tempDir } from "../../support.js";

const dir = tempDir("kiln-moe-");
const HIDDEN = 256;
const SPEC: MoeSpec = { experts: 4, expertsUsed: 2, ffn: 256, weightsScale: 1 };

interface Stored {
  type: GgmlType.F32 | GgmlType.Q4_K | GgmlType.Q6_K;
  /** ggml dims: [K, N, experts]. */
  dims: number[];
  bytes: Uint8Array;
}

/** Random weights of one MoE layer, stored as a GGUF would hold them. */
function layerTensors(seed: number): Map<string, Stored> {
  const rnd = new Random(seed);
  const make = (type: Stored["type"], dims: number[], std: number): Stored => {
    const values = rnd.normals(
      dims.reduce((a, b) => a * b, 1),
      0,
      std,
    );
    return { type, dims, bytes: encodeTensor(type, values) };
  };
  const { experts, ffn } = SPEC;
  return new Map([
    ["blk.0.ffn_gate_inp.weight", make(GgmlType.F32, [HIDDEN, experts], 0.1)],
    ["blk.0.ffn_gate_exps.weight", make(GgmlType.Q4_K, [HIDDEN, ffn, experts], 0.06)],
    ["blk.0.ffn_up_exps.weight", make(GgmlType.Q4_K, [HIDDEN, ffn, experts], 0.06)],
    ["blk.0.ffn_down_exps.weight", make(GgmlType.Q6_K, [ffn, HIDDEN, experts], 0.06)],
  ]);
}

/** A WeightSource over `tensors`, mapping them as GgufWeights does (stacked experts as experts x N rows). */
function fakeWeights(tensors: Map<string, Stored>): WeightSource {
  const get = (name: string) => {
    const t = tensors.get(name);
    if (!t) throw new Error(`no tensor ${name}`);
    return t;
  };
  return {
    has: (name) => tensors.has(name),
    dims: (name) => get(name).dims,
    floats: async (name) => {
      const t = get(name);
      return dequantize(
        t.type,
        t.bytes,
        t.dims.reduce((a, b) => a * b, 1),
      );
    },
    linear: async (name) => {
      const t = get(name);
      const k = t.dims[0];
      const n = t.dims.reduce((a, b) => a * b, 1) / k;
      if (t.type === GgmlType.Q4_K) return repackQ4_K(t.bytes, n, k);
      if (t.type === GgmlType.Q6_K) return repackQ6_K(t.bytes, n, k);
      return floatLinear(dequantize(t.type, t.bytes, n * k), n, k, "F32");
    },
  };
}

/** Options of the reference, to show what a broken routing would give. */
interface Routing {
  used: number;
  renormalize: boolean;
}

/** The MoE output of one token, in float64, from the dequantized weights ([N, K] row-major per expert). */
function referenceToken(x: Float32Array, w: Record<string, Float32Array>, routing: Routing): Float64Array {
  const { experts, ffn } = SPEC;
  const logits = Array.from({ length: experts }, (_, e) => dot(x, w.router, e * HIDDEN));
  const max = Math.max(...logits);
  const exps = logits.map((l) => Math.exp(l - max));
  const total = exps.reduce((a, b) => a + b, 0);
  const probs = exps.map((v) => v / total);
  const order = probs
    .map((p, e) => [p, e])
    .sort((a, b) => b[0] - a[0])
    .slice(0, routing.used);
  const chosenSum = order.reduce((s, [p]) => s + p, 0);
  const out = new Float64Array(HIDDEN);
  for (const [p, e] of order) {
    const weight = routing.renormalize ? p / chosenSum : p;
    const act = new Float32Array(ffn);
    for (let f = 0; f < ffn; f++) {
      const gate = dot(x, w.gate, (e * ffn + f) * HIDDEN);
      const up = dot(x, w.up, (e * ffn + f) * HIDDEN);
      act[f] = (gate / (1 + Math.exp(-gate))) * up;
    }
    for (let h = 0; h < HIDDEN; h++) out[h] += weight * dot(act, w.down, (e * HIDDEN + h) * ffn);
  }
  return out;
}

function dot(x: Float32Array, m: Float32Array, at: number): number {
  let s = 0;
  for (let i = 0; i < x.length; i++) s += x[i] * m[at + i];
  return s;
}

/** Builds the block alone into a graph x -> y, runs it once in onnxruntime, returns y and the recorded choices. */
async function runBlock(
  tensors: Map<string, Stored>,
  x: Float32Array,
  dims: number[],
  label: string,
  options: BuildOptions = { accuracyLevel: 0, numerics: "fast" },
): Promise<{ y: Float32Array; choices: string[] }> {
  const folder = join(dir, label);
  mkdirSync(folder, { recursive: true });
  const g = new GraphBuilder(join(folder, "model.onnx.data"));
  const ctx = blockContext(g, fakeWeights(tensors), options);
  const input = g.input("x", DataType.FLOAT, ["batch", "seq", HIDDEN]);
  g.op("Identity", [await moeFeedForward(ctx, 0, input, SPEC)], { names: ["y"] });
  g.output("y", DataType.FLOAT, ["batch", "seq", HIDDEN]);
  writeFileSync(join(folder, "model.onnx"), g.finish(label, "test", {}));
  const session = await ort.InferenceSession.create(join(folder, "model.onnx"));
  try {
    const y = (await session.run({ x: floatTensor(x, dims) })).y as ort.Tensor;
    expect(y.dims).toEqual(dims);
    return { y: y.data as Float32Array, choices: ctx.choices.map((c) => `${c.what}: ${c.choice}`) };
  } finally {
    await session.release();
  }
}

/** Largest |a - b| relative to max |b|. */
function relativeError(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let err = 0;
  let scale = 0;
  for (let i = 0; i < b.length; i++) {
    err = Math.max(err, Math.abs(a[i] - b[i]));
    scale = Math.max(scale, Math.abs(b[i]));
  }
  return err / scale;
}

describe("moeFeedForward (top-2 of 4 experts, Q4_K gate/up, Q6_K down, F32 router)", () => {
  const tensors = layerTensors(31);
  const dense = async (name: string) => fakeWeights(tensors).floats(name);
  const tokens = 12;
  const x = new Random(32).normals(tokens * HIDDEN, 0, 1);
  const row = (t: number) => x.subarray(t * HIDDEN, (t + 1) * HIDDEN);

  async function reference(routing: Routing, from = 0, count = tokens): Promise<Float64Array> {
    const w = {
      router: await dense("blk.0.ffn_gate_inp.weight"),
      gate: await dense("blk.0.ffn_gate_exps.weight"),
      up: await dense("blk.0.ffn_up_exps.weight"),
      down: await dense("blk.0.ffn_down_exps.weight"),
    };
    const out = new Float64Array(count * HIDDEN);
    for (let t = 0; t < count; t++) out.set(referenceToken(row(from + t), w, routing), t * HIDDEN);
    return out;
  }

  it("routes a batch of 2 x 6 tokens in one run as the per-token reference does", async () => {
    const { y, choices } = await runBlock(tensors, x, [2, 6, HIDDEN], "batch");
    expect(relativeError(y, await reference({ used: 2, renormalize: true }))).toBeLessThan(1e-4);
    expect(choices.join("\n")).toContain("mixture of 4 experts, top 2");
  });

  it("runs one token (experts no token chose get zero rows)", async () => {
    const { y } = await runBlock(tensors, row(5).slice(), [1, 1, HIDDEN], "one");
    expect(relativeError(y, await reference({ used: 2, renormalize: true }, 5, 1))).toBeLessThan(1e-4);
  });

  it("runs one token with llama.cpp's activation rounding and with int8 activations (empty experts included)", async () => {
    const expected = await reference({ used: 2, renormalize: true }, 5, 1);
    for (const options of [
      { accuracyLevel: 0, numerics: "llama.cpp" },
      { accuracyLevel: 4, numerics: "fast" },
    ] as const) {
      const { y } = await runBlock(tensors, row(5).slice(), [1, 1, HIDDEN], `one-${options.numerics}-${options.accuracyLevel}`, options);
      expect(relativeError(y, expected)).toBeLessThan(0.03);
    }
  });

  it("is far from what a broken routing gives (top-1, or no renormalization)", async () => {
    const { y } = await runBlock(tensors, x, [1, tokens, HIDDEN], "broken");
    expect(relativeError(y, await reference({ used: 1, renormalize: true }))).toBeGreaterThan(0.1);
    expect(relativeError(y, await reference({ used: 2, renormalize: false }))).toBeGreaterThan(0.1);
  });

  it("spreads the tokens over every expert (so the batch test covers them all)", async () => {
    const router = await dense("blk.0.ffn_gate_inp.weight");
    const used = new Set<number>();
    for (let t = 0; t < tokens; t++) {
      const logits = Array.from({ length: SPEC.experts }, (_, e) => dot(row(t), router, e * HIDDEN));
      const order = logits.map((l, e) => [l, e]).sort((a, b) => b[0] - a[0]);
      used.add(order[0][1]).add(order[1][1]);
    }
    expect(used.size).toBe(SPEC.experts);
  });
});
