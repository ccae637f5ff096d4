// foldMinsToBlockMeans (minFold "block-means"): block minimums folded at the source's code width, the
// codes read against the operator's default zero point, and each block's offset carried by extra weight
// columns over the input's appended block means (16x and 1x for two 4-bit digits). Checked
// against ggml's dequantization of the GGUF bytes, in plain arithmetic (MatMulNBits semantics written
// here, independently of the fold) and through linear() in onnxruntime.

import * as ort from "onnxruntime-node";
import { describe, expect, it } from "vitest";
import { dequantize } from "../../../src/compiler/gguf/dequant.js";
import { f32ToF16 } from "../../../src/compiler/gguf/fp16.js";
import { GgmlType } from "../../../src/compiler/gguf/types.js";
import { blockContext } from "../../../src/compiler/graph/blocks/context.js";
import { linear } from "../../../src/compiler/graph/blocks/linear.js";
import type { WeightSource } from "../../../src/compiler/graph/weights.js";
import { DataType } from "../../../src/compiler/onnx/onnx-proto.js";
import { type BlockMeansReport, foldMinsToBlockMeans } from "../../../src/compiler/quant/fold-mins.js";
import type { NbitsWeight } from "../../../src/compiler/quant/linear-weight.js";
import { repackQ4_1, repackQ4_K } from "../../../src/compiler/quant/repack.js";
import { encodeTensor } from "../../fixtures/synthetic/quantize.js";
import { Random } from "../../fixtures/synthetic/tiny-model.js";
import { buildAndRun, floatTensor, tempDir } from "./support.js";

const dir = tempDir("kiln-block-means-");

/** Q4_1 bytes of `values` ([n, k] row-major) as ggml's reference quantizer writes them: d = (max - min)/15, m = min. */
function encodeQ4_1(values: Float32Array): Uint8Array {
  const blocks = values.length / 32;
  const raw = new Uint8Array(blocks * 20);
  for (let b = 0; b < blocks; b++) {
    const v = values.subarray(b * 32, (b + 1) * 32);
    const lo = Math.min(...v);
    const hi = Math.max(...v);
    const d = (hi - lo) / 15;
    const [dh, mh] = [f32ToF16(d), f32ToF16(lo)];
    raw.set([dh & 0xff, dh >> 8, mh & 0xff, mh >> 8], b * 20);
    const q = (j: number) => (d === 0 ? 0 : Math.min(15, Math.max(0, Math.round((v[j] - lo) / d))));
    for (let j = 0; j < 16; j++) raw[b * 20 + 4 + j] = q(j) | (q(j + 16) << 4);
  }
  return raw;
}

/**
 * The folded weight's effective [n, k - appended] matrix, from MatMulNBits semantics: every column
 * dequantized as (q - zp) * scale (zp the operator's default when there is no zero-point input);
 * the appended column for factor f and block c holds f * mean(input block c), so its weight adds
 * f * weight / blockSize to each element of block c.
 */
function effective(w: NbitsWeight): Float32Array {
  const { blocks: means, factors } = w.blockMeans!;
  const inputs = w.k - means * factors.length;
  const blocks = Math.ceil(w.k / w.blockSize);
  const blob = (w.blockSize * w.bits) / 8;
  const zpRow = Math.ceil((blocks * w.bits) / 8);
  expect(w.packed.length).toBe(w.n * blocks * blob);
  expect(w.scales.length).toBe(w.n * blocks);
  const weightAt = (r: number, c: number) => {
    const b = Math.floor(c / w.blockSize);
    const j = c % w.blockSize;
    let zp = w.bits === 4 ? 8 : 128;
    if (w.zeroPoints) zp = w.bits === 4 ? (w.zeroPoints[r * zpRow + (b >> 1)] >> (4 * (b & 1))) & 0x0f : w.zeroPoints[r * zpRow + b];
    const at = (r * blocks + b) * blob;
    const q = w.bits === 4 ? (w.packed[at + (j >> 1)] >> (4 * (j & 1))) & 0x0f : w.packed[at + j];
    return (q - zp) * w.scales[r * blocks + b];
  };
  const out = new Float32Array(w.n * inputs);
  for (let r = 0; r < w.n; r++) {
    for (let c = 0; c < inputs; c++) {
      let v = weightAt(r, c);
      const block = Math.floor(c / w.blockSize);
      factors.forEach((f, i) => (v += (f * weightAt(r, inputs + i * means + block)) / w.blockSize));
      out[r * inputs + c] = v;
    }
  }
  return out;
}

/** Largest |a - b| in units of each source block's step `steps[r * kBlocks + b]`. */
function worstInSteps(a: Float32Array, b: Float32Array, steps: Float32Array, k: number, blockSize: number): number {
  let worst = 0;
  for (let i = 0; i < a.length; i++) {
    const step = Math.abs(steps[Math.floor(i / blockSize)]);
    if (step > 0) worst = Math.max(worst, Math.abs(a[i] - b[i]) / step);
  }
  return worst;
}

const N = 48;
const K = 1536; // 48 blocks: the remainders span a whole extra block and part of a second (K not a multiple of 32)
const normals = Float32Array.from(new Random(9100).normals(N * K, 0.004, 0.05));

const SOURCES = [
  { name: "Q4_1", type: GgmlType.Q4_1, raw: encodeQ4_1(normals), repack: repackQ4_1 },
  { name: "Q4_K", type: GgmlType.Q4_K, raw: encodeTensor(GgmlType.Q4_K, normals), repack: repackQ4_K },
];

describe("foldMinsToBlockMeans", () => {
  it.each(SOURCES)(
    "$name: 4-bit codes kept, no zero points or minimums, K + 2K/32 inputs, every weight within the reported fraction of its block's step",
    ({ type, raw, repack }) => {
      const source = repack(raw, N, K) as NbitsWeight;
      const report: BlockMeansReport = { worstStepFraction: 0 };
      const folded = foldMinsToBlockMeans(source, report);
      expect(folded).toMatchObject({
        bits: 4,
        blockSize: 32,
        zeroPoints: null,
        mins: null,
        exact: false,
        k: K + (2 * K) / 32,
        blockMeans: { blocks: K / 32, factors: [16, 1] },
      });
      const dense = dequantize(type, raw, N * K);
      const worst = worstInSteps(effective(folded), dense, source.scales, K, 32);
      expect(worst).toBeLessThanOrEqual(report.worstStepFraction + 1e-3);
      // Offsets of a few steps at 8 bits of resolution: a small fraction of a step.
      expect(report.worstStepFraction).toBeGreaterThan(0);
      expect(report.worstStepFraction).toBeLessThan(0.1);
    },
  );

  it("a block far from symmetric (all weights positive) is carried whole by its offset, at the row's resolution", () => {
    const values = Float32Array.from(normals.subarray(0, 2 * K));
    for (let i = 0; i < 32; i++) values[i] = 0.5 + 0.01 * i; // row 0, block 0: minimum 0.5, step 0.0207
    const raw = encodeQ4_1(values);
    const folded = foldMinsToBlockMeans(repackQ4_1(raw, 2, K) as NbitsWeight);
    const got = effective(folded);
    const dense = dequantize(GgmlType.Q4_1, raw, 2 * K);
    // That row's offsets reach 0.5 + 8 steps: 8 bits resolve them to about a 256th of that.
    for (let i = 0; i < 32; i++) expect(Math.abs(got[i] - dense[i])).toBeLessThanOrEqual(0.67 / 238 + 1e-6);
    // The other blocks of that row are no worse than that either.
    for (let i = 32; i < K; i++) expect(Math.abs(got[i] - dense[i])).toBeLessThanOrEqual(0.67 / 238 + 1e-6);
  });

  it("leaves a weight without minimums alone", () => {
    const w = { ...(repackQ4_1(encodeQ4_1(normals), N, K) as NbitsWeight), mins: null };
    expect(foldMinsToBlockMeans(w)).toBe(w);
  });
});

describe('linear() with minFold "block-means" in onnxruntime', () => {
  const raw = encodeQ4_1(normals);
  const rows = 3;
  const x = Float32Array.from(new Random(9200).normals(rows * K, 0, 1));
  const weights: WeightSource = {
    has: () => true,
    dims: () => [K, N],
    floats: async () => dequantize(GgmlType.Q4_1, raw, N * K),
    linear: async () => repackQ4_1(raw, N, K),
  };

  /** Two linears of the same input (as Q|K|V or gate and up read it) at `accuracyLevel`: outputs and the graph's ops. */
  async function run(accuracyLevel: number): Promise<{ y: Float32Array[]; ops: string[] }> {
    let ops: string[] = [];
    const { outputs } = await buildAndRun(
      dir,
      `block-means-${accuracyLevel}`,
      (g) => {
        const ctx = blockContext(g, weights, { accuracyLevel, numerics: "fast", minFold: "block-means" });
        const input = g.input("x", DataType.FLOAT, [1, "rows", K]);
        for (const name of ["a", "b"]) {
          g.op("Identity", [linear(ctx, input, repackQ4_1(raw, N, K), name)], { names: [name] });
          g.output(name, DataType.FLOAT, [1, "rows", N]);
        }
        ops = g.nodes.map((n) => n.op);
      },
      { x: floatTensor(x, [1, rows, K]) },
    );
    return { y: ["a", "b"].map((n) => (outputs[n] as ort.Tensor).data as Float32Array), ops };
  }

  /** Largest |y - x @ w^T| over max |x @ w^T|, w [N, K] row-major. */
  function relativeError(y: Float32Array, w: Float32Array): number {
    let maxRef = 0;
    let maxErr = 0;
    for (let r = 0; r < rows; r++) {
      for (let n = 0; n < N; n++) {
        let ref = 0;
        for (let c = 0; c < K; c++) ref += x[r * K + c] * w[n * K + c];
        maxRef = Math.max(maxRef, Math.abs(ref));
        maxErr = Math.max(maxErr, Math.abs(y[r * N + n] - ref));
      }
    }
    expect(maxRef).toBeGreaterThan(0.1);
    return maxErr / maxRef;
  }

  it("float activations: exactly the folded matrix, within the fold's error of the source; one MatMulNBits per linear, the means built once", async () => {
    const { y, ops } = await run(0);
    const folded = effective(foldMinsToBlockMeans(repackQ4_1(raw, N, K) as NbitsWeight));
    expect(relativeError(y[0], folded)).toBeLessThan(1e-5);
    expect(relativeError(y[0], dequantize(GgmlType.Q4_1, raw, N * K))).toBeLessThan(0.01);
    expect(y[1]).toEqual(y[0]);
    expect(ops.filter((op) => op === "MatMulNBits")).toHaveLength(2);
    expect(ops.filter((op) => op === "Concat" || op === "ReduceMean" || op === "Mul")).toEqual(["ReduceMean", "Mul", "Concat"]);
    expect(ops).not.toContain("MatMul");
  });

  it("int8 activations (the fast path): within a percent of the source", async () => {
    const { y } = await run(4);
    expect(relativeError(y[0], dequantize(GgmlType.Q4_1, raw, N * K))).toBeLessThan(0.01);
  });
});
