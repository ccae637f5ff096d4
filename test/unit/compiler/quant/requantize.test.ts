/**
 * The re-quantizer (src/compiler/quant/requantize.ts) at every GPU weight form: 8 bits far closer
 * than 4, blocks of 128 coarser than 32, a weight already in the asked form kept as it is, K that
 * is not a multiple of the block padded as onnxruntime's MatMulNBits reads it, and the dense form
 * equal to the dequantized values.
 */
import * as ort from "onnxruntime-node";
import { describe, expect, it } from "vitest";
import { DataType } from "../../../../src/compiler/onnx/onnx-proto.js";
import { type LinearWeight, type NbitsWeight } from "../../../../src/compiler/quant/linear-weight.js";
import { floatLinear, repackQ4_0, repackQ8_0 } from "../../../../src/compiler/quant/repack.js";
import { dequantizeToFloat, type RequantReport, requantize, type RequantTarget } from "../../../../src/compiler/quant/requantize.js";
import { quantizeQ4_0, quantizeQ8_0 } from "../../../fixtures/synthetic/quantize.js";
import { buildAndRun, floatTensor, randomFloats, rng, tempDir } from "../support.js";

const dir = tempDir("kiln-requantize-");

/** Roughly normal weights (the sum of four uniforms), as a trained matrix's are. */
function weights(count: number, seed: number): Float32Array {
  const random = rng(seed);
  return Float32Array.from({ length: count }, () => (random() + random() + random() + random() - 2) * 0.05);
}

function asNbits(w: LinearWeight): NbitsWeight {
  if (w.kind !== "nbits") throw new Error("expected an nbits weight");
  return w;
}

/** The [N, K] values MatMulNBits computes with, read independently of the compiler's own reader (padding dropped). */
function valuesOf(w: NbitsWeight): Float32Array {
  const { n, k, bits, blockSize } = w;
  const kBlocks = Math.ceil(k / blockSize);
  const zpRow = bits === 4 ? Math.ceil(kBlocks / 2) : kBlocks;
  expect(w.packed.length).toBe((n * kBlocks * blockSize * bits) / 8);
  const out = new Float32Array(n * k);
  for (let r = 0; r < n; r++) {
    for (let b = 0; b < kBlocks; b++) {
      const blk = r * kBlocks + b;
      const zp = !w.zeroPoints ? 2 ** (bits - 1) : bits === 4 ? (w.zeroPoints[r * zpRow + (b >> 1)] >> (4 * (b & 1))) & 0x0f : w.zeroPoints[r * zpRow + b];
      for (let j = 0; j < blockSize && b * blockSize + j < k; j++) {
        const q = bits === 4 ? (w.packed[(blk * blockSize) / 2 + (j >> 1)] >> (4 * (j & 1))) & 0x0f : w.packed[blk * blockSize + j];
        out[r * k + b * blockSize + j] = (q - zp) * w.scales[blk] + (w.mins ? w.mins[b * n + r] : 0);
      }
    }
  }
  return out;
}

function relativeRms(got: Float32Array, want: Float32Array): number {
  let err = 0;
  let norm = 0;
  want.forEach((v, i) => {
    err += (got[i] - v) ** 2;
    norm += v * v;
  });
  return Math.sqrt(err / norm);
}

const N = 24;
const K = 512;

describe("requantize (a weight as MatMulNBits blocks of 4 or 8 bits and 32, 64 or 128 weights)", () => {
  const dense = weights(N * K, 7100);
  const errors = new Map<string, number>();
  for (const bits of [4, 8] as const) {
    for (const blockSize of [32, 64, 128]) {
      it(`${bits} bits, blocks of ${blockSize}: codes and zero points in range, the report's error the values' own`, () => {
        const report: RequantReport = { relativeRmsError: 0 };
        const w = asNbits(requantize(floatLinear(dense, N, K, "F32"), { bits, blockSize }, report));
        expect(w).toMatchObject({ bits, blockSize, mins: null, exact: false });
        expect(w.mapping).toBe(`F32 -> re-quantized to MatMulNBits ${bits}-bit block ${blockSize} with zero points`);
        const error = relativeRms(valuesOf(w), dense);
        expect(report.relativeRmsError).toBeCloseTo(error, 5);
        errors.set(`${bits}/${blockSize}`, error);
      });
    }
  }

  it("8 bits err far less than 4 (over 10x at every block size), and larger blocks more than smaller", () => {
    // Measured on these weights: 4 bits 0.075 / 0.083 / 0.089, 8 bits 0.0046 / 0.0050 / 0.0055 at 32 / 64 / 128 (16x apart).
    for (const blockSize of [32, 64, 128]) expect(errors.get(`8/${blockSize}`)!).toBeLessThan(errors.get(`4/${blockSize}`)! / 10);
    for (const bits of [4, 8]) {
      expect(errors.get(`${bits}/32`)!).toBeLessThan(errors.get(`${bits}/64`)!);
      expect(errors.get(`${bits}/64`)!).toBeLessThan(errors.get(`${bits}/128`)!);
    }
    expect(errors.get("4/32")!).toBeLessThan(0.09);
    expect(errors.get("8/128")!).toBeLessThan(0.01);
  });

  it("keeps a weight already stored at the asked bits and block size as it is (no second rounding)", () => {
    const q8 = repackQ8_0(quantizeQ8_0(dense), N, K);
    const q4 = repackQ4_0(quantizeQ4_0(dense), N, K);
    expect(requantize(q8, { bits: 8, blockSize: 32 })).toBe(q8);
    expect(requantize(q4, { bits: 4, blockSize: 32 })).toBe(q4);
    // Another block size is a new rounding of the stored values: of Q8_0's, small at 8 bits.
    const report: RequantReport = { relativeRmsError: 0 };
    const wider = asNbits(requantize(q8, { bits: 8, blockSize: 64 }, report));
    expect(wider.mapping).toBe("Q8_0 -> re-quantized to MatMulNBits 8-bit block 64 with zero points");
    expect(report.relativeRmsError).toBeLessThan(0.01);
    expect(relativeRms(valuesOf(wider), valuesOf(asNbits(q8)))).toBeCloseTo(report.relativeRmsError, 5);
  });

  it("pads K that is not a multiple of the block, and onnxruntime's MatMulNBits computes x @ W^T with it", async () => {
    const k = 96;
    const values = weights(N * k, 7200);
    const targets: RequantTarget[] = [
      { bits: 8, blockSize: 64 },
      { bits: 4, blockSize: 128 },
    ];
    for (const target of targets) {
      const w = asNbits(requantize(floatLinear(values, N, k, "F32"), target));
      expect(w.scales.length).toBe(N * Math.ceil(k / target.blockSize));
      const x = randomFloats(2 * k, rng(7300));
      const { outputs } = await buildAndRun(
        dir,
        `padded-${target.bits}-${target.blockSize}`,
        (g) => {
          const input = g.input("x", DataType.FLOAT, [1, 2, k]);
          const kBlocks = Math.ceil(k / w.blockSize);
          const inputs = [
            input,
            g.weight("w.qweight", DataType.UINT8, [N, kBlocks, (w.blockSize * w.bits) / 8], w.packed),
            g.weight("w.scales", DataType.FLOAT, [N, kBlocks], w.scales),
            g.weight("w.zp", DataType.UINT8, [w.zeroPoints!.length], w.zeroPoints!),
          ];
          const y = g.op("MatMulNBits", inputs, { domain: "com.microsoft", attributes: { K: k, N, bits: w.bits, block_size: w.blockSize, accuracy_level: 0 } });
          g.op("Identity", [y], { names: ["y"] });
          g.output("y", DataType.FLOAT, [1, 2, N]);
        },
        { x: floatTensor(x, [1, 2, k]) },
      );
      const got = (outputs.y as ort.Tensor).data as Float32Array;
      const exact = valuesOf(w);
      for (let m = 0; m < 2; m++) {
        for (let r = 0; r < N; r++) {
          let want = 0;
          for (let c = 0; c < k; c++) want += x[m * k + c] * exact[r * k + c];
          expect(got[m * N + r]).toBeCloseTo(want, 4);
        }
      }
    }
  });
});

describe("dequantizeToFloat (the 16-bit form: a dense MatMul weight)", () => {
  it("holds the stored weight's values, transposed to [K, N]; a float weight is kept", () => {
    const q4 = asNbits(repackQ4_0(quantizeQ4_0(weights(N * K, 7400)), N, K));
    const dense = dequantizeToFloat(q4);
    if (dense.kind !== "float") throw new Error("expected a float weight");
    const values = valuesOf(q4);
    for (let r = 0; r < N; r++) for (let c = 0; c < K; c++) expect(dense.weightT[c * N + r]).toBe(Math.fround(values[r * K + c]));
    expect(dequantizeToFloat(dense)).toBe(dense);
  });
});
