// GGUF quantized blocks -> com.microsoft MatMulNBits operands.
//
// (a) Dequantizing the operands per the MatMulNBits definition must give exactly (bit for bit)
//     what ggml's dequantize_row_* gives for the original bytes (src/compiler/gguf/dequant.ts).
// (b) A real onnxruntime graph, wired like graph/llama.ts's linear(), must compute x @ W^T.

import * as ort from "onnxruntime-node";
import { describe, expect, it } from "vitest";
import { dequantize } from "../../../src/compiler/gguf/dequant.js";
import { f32ToF16 } from "../../../src/compiler/gguf/fp16.js";
import { GgmlType } from "../../../src/compiler/gguf/types.js";
import type { GraphBuilder } from "../../../src/compiler/onnx/graph-builder.js";
import { DataType } from "../../../src/compiler/onnx/onnx-proto.js";
import { concatRows, fusable, type LinearWeight, scaleRows } from "../../../src/compiler/quant/linear-weight.js";
import { type FoldReport, foldMinsTo8Bit } from "../../../src/compiler/quant/fold-mins.js";
import { quantizeBlock, type RequantReport, requantizeTo4Bit } from "../../../src/compiler/quant/requantize.js";
import { floatLinear, repackQ4_0, repackQ4_1, repackQ4_K, repackQ5_0, repackQ5_K, repackQ6_K, repackQ8_0 } from "../../../src/compiler/quant/repack.js";
import { buildAndRun, floatTensor, randomBytes, randomFloats, rng, tempDir } from "./support.js";

type NBits = Extract<LinearWeight, { kind: "nbits" }>;

const dir = tempDir("kiln-repack-");

// ---------------------------------------------------------------------------------------------
// Random GGUF tensors

interface Format {
  type: GgmlType;
  name: string;
  elementsPerBlock: number;
  bytesPerBlock: number;
  /** Byte offsets of the block's fp16 fields (d, and m/dmin where present). */
  halfs: number[];
  repack: (raw: Uint8Array, n: number, k: number) => LinearWeight;
}

const FORMATS: Record<"Q4_0" | "Q4_1" | "Q5_0" | "Q8_0" | "Q4_K" | "Q5_K" | "Q6_K", Format> = {
  Q4_0: { type: GgmlType.Q4_0, name: "Q4_0", elementsPerBlock: 32, bytesPerBlock: 18, halfs: [0], repack: repackQ4_0 },
  Q4_1: { type: GgmlType.Q4_1, name: "Q4_1", elementsPerBlock: 32, bytesPerBlock: 20, halfs: [0, 2], repack: repackQ4_1 },
  Q5_0: { type: GgmlType.Q5_0, name: "Q5_0", elementsPerBlock: 32, bytesPerBlock: 22, halfs: [0], repack: repackQ5_0 },
  Q8_0: { type: GgmlType.Q8_0, name: "Q8_0", elementsPerBlock: 32, bytesPerBlock: 34, halfs: [0], repack: repackQ8_0 },
  Q4_K: { type: GgmlType.Q4_K, name: "Q4_K", elementsPerBlock: 256, bytesPerBlock: 144, halfs: [0, 2], repack: repackQ4_K },
  Q5_K: { type: GgmlType.Q5_K, name: "Q5_K", elementsPerBlock: 256, bytesPerBlock: 176, halfs: [0, 2], repack: repackQ5_K },
  Q6_K: { type: GgmlType.Q6_K, name: "Q6_K", elementsPerBlock: 256, bytesPerBlock: 210, halfs: [208], repack: repackQ6_K },
};

/** Random blocks: random quant bytes, fp16 scales/mins of magnitude 0.01..0.1 with random sign. */
function randomTensor(format: Format, n: number, k: number, seed: number): Uint8Array {
  const random = rng(seed);
  const blocks = (n * k) / format.elementsPerBlock;
  const raw = randomBytes(blocks * format.bytesPerBlock, random);
  for (let b = 0; b < blocks; b++) {
    for (const at of format.halfs) {
      const sign = random() < 0.5 ? -1 : 1;
      const h = f32ToF16(sign * (0.01 + 0.09 * random()));
      raw[b * format.bytesPerBlock + at] = h & 0xff;
      raw[b * format.bytesPerBlock + at + 1] = h >> 8;
    }
  }
  return raw;
}

/** The reference: ggml's dequantization of the GGUF bytes, [n, k] row-major. */
function reference(format: Format, raw: Uint8Array, n: number, k: number): Float32Array {
  return dequantize(format.type, raw, n * k);
}

// ---------------------------------------------------------------------------------------------
// MatMulNBits semantics, written independently of repack.ts

/**
 * W[n, k] as MatMulNBits defines it: (q - zero_point) * scale, with q element 2i in the low nibble
 * of byte i (4 bits) or one byte per element (8 bits); zero points default to 8 / 128, and packed
 * 4-bit zero points hold block 2j in the low nibble, each row padded to whole bytes. kiln's `mins`
 * ([K/block, N]) add mins[b*N + n] to every element of block b of row n.
 */
function dequantOperands(w: NBits): Float32Array {
  const { n, k, bits, blockSize } = w;
  const kBlocks = k / blockSize;
  const blob = (blockSize * bits) / 8;
  const zpRow = Math.ceil((kBlocks * bits) / 8);
  expect(w.packed.length).toBe(n * kBlocks * blob);
  expect(w.scales.length).toBe(n * kBlocks);
  if (w.zeroPoints) expect(w.zeroPoints.length).toBe(n * zpRow);
  if (w.mins) expect(w.mins.length).toBe(kBlocks * n);

  const out = new Float32Array(n * k);
  for (let r = 0; r < n; r++) {
    for (let b = 0; b < kBlocks; b++) {
      const blk = r * kBlocks + b;
      let zp = bits === 4 ? 8 : 128;
      if (w.zeroPoints) {
        zp = bits === 4 ? (w.zeroPoints[r * zpRow + (b >> 1)] >> (4 * (b & 1))) & 0x0f : w.zeroPoints[r * zpRow + b];
      }
      for (let j = 0; j < blockSize; j++) {
        const q = bits === 4 ? (w.packed[blk * blob + (j >> 1)] >> (4 * (j & 1))) & 0x0f : w.packed[blk * blob + j];
        let v = Math.fround((q - zp) * w.scales[blk]);
        if (w.mins) v = Math.fround(v + w.mins[b * n + r]);
        out[r * k + b * blockSize + j] = v;
      }
    }
  }
  return out;
}

/** Indexes where two float32 arrays differ bit for bit (so +0 vs -0 counts). */
function bitMismatches(actual: Float32Array, expected: Float32Array): number[] {
  expect(actual.length).toBe(expected.length);
  const a = new Uint32Array(actual.buffer, actual.byteOffset, actual.length);
  const e = new Uint32Array(expected.buffer, expected.byteOffset, expected.length);
  const bad: number[] = [];
  for (let i = 0; i < e.length; i++) if (a[i] !== e[i]) bad.push(i);
  return bad;
}

function asNBits(w: LinearWeight): NBits {
  if (w.kind !== "nbits") throw new Error("expected an nbits weight");
  return w;
}

function concatF32(parts: Float32Array[]): Float32Array {
  const out = new Float32Array(parts.reduce((s, p) => s + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The ORT graph: the same ops as LlamaGraph.linear() with accuracy_level 0

function emitLinear(g: GraphBuilder, x: string, w: NBits, name: string): string {
  const kBlocks = w.k / w.blockSize;
  const blob = (w.blockSize * w.bits) / 8;
  const inputs = [
    x,
    g.weight(`${name}.qweight`, DataType.UINT8, [w.n, kBlocks, blob], w.packed),
    g.weight(`${name}.scales`, DataType.FLOAT, [w.n, kBlocks], w.scales),
  ];
  if (w.zeroPoints) inputs.push(g.weight(`${name}.zp`, DataType.UINT8, [w.zeroPoints.length], w.zeroPoints));
  let y = g.op("MatMulNBits", inputs, {
    domain: "com.microsoft",
    attributes: { K: w.k, N: w.n, bits: w.bits, block_size: w.blockSize, accuracy_level: 0 },
  });
  if (w.mins) {
    const sums = g.op("ReduceSum", [g.op("Reshape", [x, g.int64s([0, 0, kBlocks, w.blockSize])]), g.int64s([-1])], {
      attributes: { keepdims: 0 },
    });
    const mins = g.weight(`${name}.mins`, DataType.FLOAT, [kBlocks, w.n], w.mins);
    y = g.op("Add", [y, g.op("MatMul", [sums, mins])]);
  }
  return y;
}

const M = 3;

/** Runs y = linear(x) in ORT for random x [1, M, K]; returns the largest error relative to max |y|. */
async function ortRelativeError(label: string, w: NBits, dense: Float32Array, seed: number): Promise<number> {
  const x = randomFloats(M * w.k, rng(seed));
  const { outputs } = await buildAndRun(
    dir,
    label,
    (g) => {
      const input = g.input("x", DataType.FLOAT, [1, M, w.k]);
      g.op("Identity", [emitLinear(g, input, w, "w")], { names: ["y"] });
      g.output("y", DataType.FLOAT, [1, M, w.n]);
    },
    { x: floatTensor(x, [1, M, w.k]) },
  );
  const y = outputs.y as ort.Tensor;
  expect(y.dims).toEqual([1, M, w.n]);
  const got = y.data as Float32Array;
  let maxRef = 0;
  let maxErr = 0;
  for (let m = 0; m < M; m++) {
    for (let r = 0; r < w.n; r++) {
      let ref = 0;
      for (let c = 0; c < w.k; c++) ref += x[m * w.k + c] * dense[r * w.k + c];
      maxRef = Math.max(maxRef, Math.abs(ref));
      maxErr = Math.max(maxErr, Math.abs(got[m * w.n + r] - ref));
    }
  }
  expect(maxRef).toBeGreaterThan(0.1); // the comparison is not vacuous
  return maxErr / maxRef;
}

// ---------------------------------------------------------------------------------------------

const CASES: Array<{ format: Format; n: number; k: number; expect: Partial<NBits> }> = [
  { format: FORMATS.Q4_0, n: 16, k: 512, expect: { bits: 4, blockSize: 32, zeroPoints: null, mins: null } },
  { format: FORMATS.Q4_0, n: 8, k: 96, expect: { bits: 4, blockSize: 32, zeroPoints: null, mins: null } },
  { format: FORMATS.Q4_1, n: 16, k: 512, expect: { bits: 4, blockSize: 32 } },
  { format: FORMATS.Q4_1, n: 8, k: 96, expect: { bits: 4, blockSize: 32 } }, // odd block count: padded zero points
  { format: FORMATS.Q8_0, n: 16, k: 512, expect: { bits: 8, blockSize: 32, zeroPoints: null, mins: null } },
  { format: FORMATS.Q4_K, n: 16, k: 512, expect: { bits: 4, blockSize: 32 } },
  { format: FORMATS.Q4_K, n: 4, k: 256, expect: { bits: 4, blockSize: 32 } },
  { format: FORMATS.Q6_K, n: 16, k: 512, expect: { bits: 8, blockSize: 16, zeroPoints: null, mins: null } },
  { format: FORMATS.Q5_0, n: 16, k: 512, expect: { bits: 8, blockSize: 32, zeroPoints: null, mins: null } },
  { format: FORMATS.Q5_0, n: 8, k: 96, expect: { bits: 8, blockSize: 32, zeroPoints: null, mins: null } },
  { format: FORMATS.Q5_K, n: 16, k: 512, expect: { bits: 8, blockSize: 32, zeroPoints: null, activation: "q8_K" } },
];

describe.each(CASES)("$format.name repack, N=$n K=$k", ({ format, n, k, expect: shape }) => {
  const raw = randomTensor(format, n, k, 1000 + n + k + format.type);
  const dense = reference(format, raw, n, k);
  const w = asNBits(format.repack(raw, n, k));

  it("produces MatMulNBits operands of the expected form", () => {
    expect(w).toMatchObject({ kind: "nbits", n, k, exact: true, ...shape });
    if (format.type === GgmlType.Q4_1 || format.type === GgmlType.Q4_K) {
      // zero point 0 for every block (4-bit zero points, two per byte, rows padded) + a mins matrix
      expect(w.zeroPoints).toEqual(new Uint8Array(n * Math.ceil(k / 32 / 2)));
      expect(w.mins).not.toBeNull();
    }
  });

  it("dequantizes (per the MatMulNBits definition) bit-exactly to ggml's values", () => {
    expect(dense.every(Number.isFinite)).toBe(true);
    expect(bitMismatches(dequantOperands(w), dense)).toEqual([]);
  });

  it("computes x @ W^T in onnxruntime (MatMulNBits, accuracy_level 0)", async () => {
    expect(await ortRelativeError(`${format.name}-${n}x${k}`, w, dense, 7)).toBeLessThan(1e-4);
  });
});

describe("concatRows (fusing Q, K and V along N)", () => {
  const FUSIONS: Array<{ label: string; parts: Array<{ format: Format; n: number }>; k: number }> = [
    {
      label: "Q4_0",
      parts: [
        { format: FORMATS.Q4_0, n: 16 },
        { format: FORMATS.Q4_0, n: 8 },
        { format: FORMATS.Q4_0, n: 8 },
      ],
      k: 256,
    },
    {
      label: "Q4_1 (odd blocks)",
      parts: [
        { format: FORMATS.Q4_1, n: 8 },
        { format: FORMATS.Q4_1, n: 4 },
        { format: FORMATS.Q4_1, n: 4 },
      ],
      k: 96,
    },
    {
      label: "Q8_0",
      parts: [
        { format: FORMATS.Q8_0, n: 16 },
        { format: FORMATS.Q8_0, n: 8 },
        { format: FORMATS.Q8_0, n: 8 },
      ],
      k: 256,
    },
    {
      label: "Q4_K",
      parts: [
        { format: FORMATS.Q4_K, n: 16 },
        { format: FORMATS.Q4_K, n: 8 },
        { format: FORMATS.Q4_K, n: 8 },
      ],
      k: 512,
    },
    {
      label: "Q6_K",
      parts: [
        { format: FORMATS.Q6_K, n: 16 },
        { format: FORMATS.Q6_K, n: 8 },
        { format: FORMATS.Q6_K, n: 8 },
      ],
      k: 256,
    },
    // Same operand form (4-bit, block 32, zero point 0 + mins), so these fuse too.
    {
      label: "Q4_1 + Q4_K",
      parts: [
        { format: FORMATS.Q4_1, n: 16 },
        { format: FORMATS.Q4_K, n: 8 },
        { format: FORMATS.Q4_K, n: 8 },
      ],
      k: 256,
    },
  ];

  function build(f: (typeof FUSIONS)[number], seed: number) {
    const raws = f.parts.map((p, i) => randomTensor(p.format, p.n, f.k, seed + i));
    const dense = concatF32(raws.map((raw, i) => reference(f.parts[i].format, raw, f.parts[i].n, f.k)));
    const fused = asNBits(concatRows(raws.map((raw, i) => f.parts[i].format.repack(raw, f.parts[i].n, f.k))));
    return { fused, dense };
  }

  it.each(FUSIONS)("$label: the fused weight dequantizes to the stacked rows, bit for bit", (f) => {
    const { fused, dense } = build(f, 50);
    expect(fused.n).toBe(f.parts.reduce((s, p) => s + p.n, 0));
    expect(bitMismatches(dequantOperands(fused), dense)).toEqual([]);
  });

  it("Q4_K: the fused weight (mins interleaved per block) runs correctly in onnxruntime", async () => {
    const { fused, dense } = build(FUSIONS[3], 60);
    expect(await ortRelativeError("fused-q4k", fused, dense, 8)).toBeLessThan(1e-4);
  });

  it("Q4_1 with odd block count: the fused zero points and mins run correctly in onnxruntime", async () => {
    const { fused, dense } = build(FUSIONS[1], 70);
    expect(await ortRelativeError("fused-q41", fused, dense, 9)).toBeLessThan(1e-4);
  });

  it("stacks float weights along N", () => {
    const k = 5;
    const a = randomFloats(3 * k, rng(1));
    const b = randomFloats(2 * k, rng(2));
    const fused = concatRows([floatLinear(a, 3, k, "F32"), floatLinear(b, 2, k, "F32")]);
    if (fused.kind !== "float") throw new Error("expected float");
    const stacked = concatF32([a, b]);
    for (let r = 0; r < 5; r++) for (let c = 0; c < k; c++) expect(fused.weightT[c * 5 + r]).toBe(stacked[r * k + c]);
  });

  it("refuses to fuse weights of different operand forms", () => {
    const q40 = FORMATS.Q4_0.repack(randomTensor(FORMATS.Q4_0, 4, 256, 1), 4, 256);
    const q41 = FORMATS.Q4_1.repack(randomTensor(FORMATS.Q4_1, 4, 256, 2), 4, 256);
    const q80 = FORMATS.Q8_0.repack(randomTensor(FORMATS.Q8_0, 4, 256, 3), 4, 256);
    const q4k = FORMATS.Q4_K.repack(randomTensor(FORMATS.Q4_K, 4, 256, 4), 4, 256);
    const q6k = FORMATS.Q6_K.repack(randomTensor(FORMATS.Q6_K, 4, 256, 5), 4, 256);
    const q40wide = FORMATS.Q4_0.repack(randomTensor(FORMATS.Q4_0, 4, 512, 6), 4, 512);
    const float = floatLinear(new Float32Array(4 * 256), 4, 256, "F32");
    expect(fusable(q41, q4k)).toBe(true);
    expect(fusable(q40, q41)).toBe(false); // zero points / mins differ
    expect(fusable(q40, q80)).toBe(false); // bits differ
    expect(fusable(q80, q6k)).toBe(false); // block size differs
    expect(fusable(q40, q40wide)).toBe(false); // K differs
    expect(fusable(q40, float)).toBe(false);
    expect(fusable(float, q40)).toBe(false);
    // Operands that differ in exactly one respect.
    const nb = asNBits(q41);
    expect(fusable(nb, { ...nb, mins: null })).toBe(false);
    expect(fusable(nb, { ...nb, zeroPoints: null })).toBe(false);
    expect(fusable(nb, { ...nb, n: 2 })).toBe(true); // N may differ: that is the point of fusing
    expect(() => concatRows([q4k, q6k])).toThrow(/fusable/);
  });
});

describe("scaleRows (folding a power of two into some rows)", () => {
  it.each([FORMATS.Q4_0, FORMATS.Q4_1, FORMATS.Q8_0, FORMATS.Q4_K, FORMATS.Q6_K])(
    "$name: scales exactly rows [4, 12) and leaves the others alone",
    (format) => {
      const n = 16;
      const k = 256;
      const raw = randomTensor(format, n, k, 300 + format.type);
      const dense = reference(format, raw, n, k);
      const w = asNBits(format.repack(raw, n, k));
      scaleRows(w, 2 ** -3, 4, 12);
      const expected = dense.map((v, i) => {
        const row = Math.floor(i / k);
        return row >= 4 && row < 12 ? v * 2 ** -3 : v;
      });
      expect(bitMismatches(dequantOperands(w), expected)).toEqual([]);
    },
  );

  it("Q4_K fused QKV with 1/sqrt(64) folded into Q runs correctly in onnxruntime", async () => {
    const k = 256;
    const raws = [16, 8, 8].map((n, i) => randomTensor(FORMATS.Q4_K, n, k, 400 + i));
    const fused = asNBits(concatRows(raws.map((raw, i) => repackQ4_K(raw, [16, 8, 8][i], k))));
    scaleRows(fused, 1 / 8, 0, 16);
    const dense = concatF32(raws.map((raw, i) => reference(FORMATS.Q4_K, raw, [16, 8, 8][i], k)));
    for (let i = 0; i < 16 * k; i++) dense[i] /= 8;
    expect(bitMismatches(dequantOperands(fused), dense)).toEqual([]);
    expect(await ortRelativeError("scaled-q4k", fused, dense, 11)).toBeLessThan(1e-4);
  });

  it("scales float weights", () => {
    const n = 4;
    const k = 3;
    const values = randomFloats(n * k, rng(3));
    const w = floatLinear(values, n, k, "F32");
    if (w.kind !== "float") throw new Error("expected float");
    scaleRows(w, 0.5, 1, 3);
    for (let r = 0; r < n; r++) {
      for (let c = 0; c < k; c++) expect(w.weightT[c * n + r]).toBe(values[r * k + c] * (r >= 1 && r < 3 ? 0.5 : 1));
    }
  });
});

describe("foldMinsTo8Bit (block minimums into 8-bit integer zero points)", () => {
  const FOLDS: Array<{ format: Format; n: number; k: number }> = [
    { format: FORMATS.Q4_1, n: 16, k: 256 },
    { format: FORMATS.Q4_K, n: 8, k: 512 },
    { format: FORMATS.Q5_K, n: 8, k: 512 },
  ];

  /** Largest |folded - original| over each 32-block, in units of that block's own step d (its MatMulNBits scale). */
  function worstStepError(original: NBits, folded: Float32Array, dense: Float32Array): number {
    const kBlocks = original.k / original.blockSize;
    let worst = 0;
    for (let r = 0; r < original.n; r++) {
      for (let b = 0; b < kBlocks; b++) {
        const d = Math.abs(original.scales[r * kBlocks + b]);
        for (let j = 0; j < original.blockSize; j++) {
          const at = r * original.k + b * original.blockSize + j;
          // A zero-step block (a K-quant sub-block scale of 0) holds only its minimum: 8-bit symmetric, within a 254th of it.
          if (d === 0) expect(Math.abs(folded[at] - dense[at])).toBeLessThanOrEqual(Math.abs(dense[at]) / 254 + 1e-7);
          else worst = Math.max(worst, Math.abs(folded[at] - dense[at]) / d);
        }
      }
    }
    return worst;
  }

  it.each(FOLDS)(
    "$format.name: 8 bits, no minimums, every weight within half a step (1/32 where the minimum lies within 15 steps below zero)",
    ({ format, n, k }) => {
      const raw = randomTensor(format, n, k, 4000 + k);
      const original = asNBits(format.repack(raw, n, k));
      const dense = reference(format, raw, n, k);
      const report: FoldReport = { worstStepFraction: 0, requantizedBlocks: 0 };
      const folded = asNBits(foldMinsTo8Bit(original, report));
      expect(folded).toMatchObject({ bits: 8, blockSize: original.blockSize, mins: null, exact: false });
      expect(folded.zeroPoints!.length).toBe(n * (k / original.blockSize));
      expect(report.requantizedBlocks).toBe(0);
      expect(worstStepError(original, dequantOperands(folded), dense)).toBeLessThanOrEqual(report.worstStepFraction + 1e-3);
      expect(report.worstStepFraction).toBeLessThanOrEqual(0.5);
    },
  );

  it("a typical Q4_1 block (minimum a few steps below zero) folds to within 1/32 of a step", () => {
    // d = 0.01, m = -0.0737: -m/d = 7.37, inside [0, 15], so k = 16.
    const raw = new Uint8Array(20);
    const d = f32ToF16(0.01);
    const m = f32ToF16(-0.0737);
    raw.set([d & 0xff, d >> 8, m & 0xff, m >> 8]);
    for (let i = 4; i < 20; i++) raw[i] = (i * 37) & 0xff;
    const original = asNBits(repackQ4_1(raw, 1, 32));
    const report: FoldReport = { worstStepFraction: 0, requantizedBlocks: 0 };
    const folded = asNBits(foldMinsTo8Bit(original, report));
    expect(report.worstStepFraction).toBeLessThanOrEqual(1 / 32);
    expect(worstStepError(original, dequantOperands(folded), reference(FORMATS.Q4_1, raw, 1, 32))).toBeLessThanOrEqual(1 / 32 + 1e-3);
  });

  it("runs in onnxruntime as one MatMulNBits (8-bit, explicit zero points)", async () => {
    const raw = randomTensor(FORMATS.Q4_1, 16, 256, 4100);
    const dense = reference(FORMATS.Q4_1, raw, 16, 256);
    const folded = asNBits(foldMinsTo8Bit(repackQ4_1(raw, 16, 256)));
    // Against the original weights: the fold's own error (<= half a step, about 2% of a weight's range here) bounds it.
    expect(await ortRelativeError("folded-q41", folded, dense, 11)).toBeLessThan(0.05);
    expect(await ortRelativeError("folded-q41-self", folded, dequantOperands(folded), 12)).toBeLessThan(1e-4);
  });

  it("leaves weights without minimums alone", () => {
    const w = repackQ8_0(randomTensor(FORMATS.Q8_0, 4, 64, 4200), 4, 64);
    expect(foldMinsTo8Bit(w)).toBe(w);
  });
});

describe("requantizeTo4Bit (a Q8_0 or float weight as 4-bit blocks with zero points)", () => {
  /** Plain round-to-nearest over each block's min..max: what the fitted codes must not be worse than. */
  function minMaxErrorSq(dense: Float32Array): number {
    let sum = 0;
    for (let at = 0; at < dense.length; at += 32) {
      const v = dense.subarray(at, at + 32);
      const lo = Math.min(...v);
      const hi = Math.max(...v);
      const s = hi === lo ? 1 : (hi - lo) / 15;
      const zp = Math.min(15, Math.max(0, Math.round(-lo / s)));
      for (const x of v) sum += ((Math.min(15, Math.max(0, Math.round(x / s) + zp)) - zp) * s - x) ** 2;
    }
    return sum;
  }

  it("Q8_0: 4-bit codes, packed zero points, every weight within a step and a half of its block's range, no worse than min-max rounding", () => {
    const raw = randomTensor(FORMATS.Q8_0, 24, 256, 4300);
    const dense = reference(FORMATS.Q8_0, raw, 24, 256);
    const report: RequantReport = { relativeRmsError: 0 };
    const w = asNBits(requantizeTo4Bit(repackQ8_0(raw, 24, 256), report));
    expect(w).toMatchObject({ bits: 4, blockSize: 32, mins: null, exact: false });
    const got = dequantOperands(w);
    let errorSq = 0;
    let valueSq = 0;
    for (let at = 0; at < dense.length; at += 32) {
      const block = dense.subarray(at, at + 32);
      const step = (Math.max(...block) - Math.min(...block)) / 15;
      for (let j = 0; j < 32; j++) {
        expect(Math.abs(got[at + j] - block[j])).toBeLessThanOrEqual(1.5 * step + 1e-6);
        errorSq += (got[at + j] - block[j]) ** 2;
        valueSq += block[j] ** 2;
      }
    }
    expect(report.relativeRmsError).toBeCloseTo(Math.sqrt(errorSq / valueSq), 4);
    expect(report.relativeRmsError).toBeLessThan(0.1);
    expect(errorSq).toBeLessThanOrEqual(minMaxErrorSq(dense) * 1.0001);
  });

  it("a float weight re-quantizes the same way (rows read from its transposed layout)", () => {
    const dense = randomFloats(8 * 64, rng(4400));
    const w = asNBits(requantizeTo4Bit(floatLinear(dense, 8, 64, "F32")));
    const got = dequantOperands(w);
    // Values in -1..1: a block's step is at most 2/15, and no weight is off by more than a step and a half.
    for (let i = 0; i < dense.length; i++) expect(Math.abs(got[i] - dense[i])).toBeLessThanOrEqual(0.2 + 1e-6);
  });

  it("blocks of one value stay exact (zero, positive, negative)", () => {
    const codes = new Uint8Array(32);
    for (const value of [0, 0.37, -1.25]) {
      const fit = quantizeBlock(new Float32Array(32).fill(value), codes);
      expect((codes[0] - fit.zeroPoint) * fit.scale).toBeCloseTo(value, 6);
      expect(fit.errorSq).toBeLessThan(1e-12);
    }
  });

  it("runs in onnxruntime as one 4-bit MatMulNBits with packed zero points", async () => {
    const raw = randomTensor(FORMATS.Q8_0, 16, 256, 4500);
    const w = asNBits(requantizeTo4Bit(repackQ8_0(raw, 16, 256)));
    expect(await ortRelativeError("requant-q80-self", w, dequantOperands(w), 13)).toBeLessThan(1e-4);
    expect(await ortRelativeError("requant-q80", w, reference(FORMATS.Q8_0, raw, 16, 256), 14)).toBeLessThan(0.15);
  });

  it("leaves 4-bit weights alone", () => {
    const w = repackQ4_1(randomTensor(FORMATS.Q4_1, 4, 64, 4600), 4, 64);
    expect(requantizeTo4Bit(w)).toBe(w);
  });
});
