/**
 * Re-quantizing a weight stored wider than 4 bits (Q8_0, float) to 4-bit MatMulNBits blocks with
 * integer zero points: half the bytes a decode step reads for it, at a quality cost the optimization
 * track measures. Made for the LM head, which a small model's GGUF usually keeps in Q8_0 (tied to
 * the embedding) and which is then about a third of the bytes of a decode step (SmolLM2-135M:
 * 28 of 88 MB). Re-quantizing weights that are already 4-bit is not offered: it stacks a second
 * rounding on the first (measured KL 0.37 on SmolLM2's Q4_1 layers).
 *
 * Each block of 32 is quantized asymmetrically, value ~ (q - zp) * s with q, zp in 0..15: the range
 * min..max (shrunk a little where clipping the extremes lowers the squared error), then s refitted
 * by least squares for the chosen codes.
 */
import { type LinearWeight, type NbitsWeight, storedIntegers } from "./linear-weight.js";

/** Block size of the re-quantized weight: the finest MatMulNBits block, for the least error. */
export const REQUANT_BLOCK = 32;

/** Shares of the block's range tried as the 15-step span (1 = min..max, no clipping). */
const RANGE_SHARES = [1, 0.95, 0.9, 0.85, 0.8];

/** How far the re-quantized weight is from the original, for tests and the manifest. */
export interface RequantReport {
  /** Root mean square error over every weight, relative to the weights' own root mean square. */
  relativeRmsError: number;
}

/** `w` as 4-bit blocks of {@link REQUANT_BLOCK} with packed zero points; `w` itself when it is already 4-bit. */
export function requantizeTo4Bit(w: LinearWeight, report?: RequantReport): LinearWeight {
  if (w.kind === "nbits" && w.bits === 4) return w;
  const { n, k } = w;
  if (k % REQUANT_BLOCK !== 0) return w;
  const kBlocks = k / REQUANT_BLOCK;
  const zpRow = Math.ceil(kBlocks / 2);
  const packed = new Uint8Array((n * k) / 2);
  const scales = new Float32Array(n * kBlocks);
  const zeroPoints = new Uint8Array(n * zpRow);
  const row = new Float32Array(k);
  const codes = new Uint8Array(REQUANT_BLOCK);
  let errorSq = 0;
  let valueSq = 0;
  for (let r = 0; r < n; r++) {
    readRow(w, r, row);
    for (let b = 0; b < kBlocks; b++) {
      const block = row.subarray(b * REQUANT_BLOCK, (b + 1) * REQUANT_BLOCK);
      const fit = quantizeBlock(block, codes);
      scales[r * kBlocks + b] = fit.scale;
      zeroPoints[r * zpRow + (b >> 1)] |= b & 1 ? fit.zeroPoint << 4 : fit.zeroPoint;
      const base = ((r * kBlocks + b) * REQUANT_BLOCK) / 2;
      for (let i = 0; i < REQUANT_BLOCK; i += 2) packed[base + i / 2] = codes[i] | (codes[i + 1] << 4);
      errorSq += fit.errorSq;
      for (const v of block) valueSq += v * v;
    }
  }
  if (report) report.relativeRmsError = valueSq === 0 ? 0 : Math.sqrt(errorSq / valueSq);
  return {
    kind: "nbits",
    n,
    k,
    bits: 4,
    blockSize: REQUANT_BLOCK,
    packed,
    scales,
    zeroPoints,
    mins: null,
    mapping: `${w.mapping.split(" -> ")[0]} -> re-quantized to MatMulNBits 4-bit block ${REQUANT_BLOCK} with zero points`,
    exact: false,
    ...(w.activation ? { activation: w.activation } : {}),
  };
}

/** Row `r` of the weight as floats. */
function readRow(w: LinearWeight, r: number, out: Float32Array): void {
  if (w.kind === "float") {
    for (let kk = 0; kk < w.k; kk++) out[kk] = w.weightT[kk * w.n + r];
    return;
  }
  const kBlocks = w.k / w.blockSize;
  const u = new Int32Array(w.blockSize);
  for (let b = 0; b < kBlocks; b++) {
    storedIntegers(w as NbitsWeight, r, b, u);
    const s = w.scales[r * kBlocks + b];
    const m = w.mins ? w.mins[b * w.n + r] : 0;
    for (let i = 0; i < w.blockSize; i++) out[b * w.blockSize + i] = u[i] * s + m;
  }
}

/** The best 4-bit codes of one block (written to `codes`), its scale, zero point and squared error. */
export function quantizeBlock(v: Float32Array, codes: Uint8Array): { scale: number; zeroPoint: number; errorSq: number } {
  let lo = Infinity;
  let hi = -Infinity;
  for (const x of v) {
    lo = Math.min(lo, x);
    hi = Math.max(hi, x);
  }
  // A block that MatMulNBits must still represent exactly where it can: all equal (often all zero).
  if (hi === lo) {
    const scale = lo === 0 ? 1 : Math.abs(lo) / 8;
    const zeroPoint = lo === 0 ? 0 : lo > 0 ? 0 : 15;
    const q = lo === 0 ? 0 : lo > 0 ? 8 : 7;
    codes.fill(q);
    const err = ((q - zeroPoint) * scale - lo) ** 2 * v.length;
    return { scale, zeroPoint, errorSq: err };
  }
  let best = { scale: 0, zeroPoint: 0, errorSq: Infinity };
  const trial = new Uint8Array(v.length);
  for (const share of RANGE_SHARES) {
    // The span shrinks around the block's middle: both extremes are clipped alike.
    const span = (hi - lo) * share;
    const start = lo + (hi - lo - span) / 2;
    let scale = span / 15;
    const zeroPoint = Math.min(15, Math.max(0, Math.round(-start / scale)));
    for (let pass = 0; pass < 2; pass++) {
      let num = 0;
      let den = 0;
      for (let i = 0; i < v.length; i++) {
        const q = Math.min(15, Math.max(0, Math.round(v[i] / scale) + zeroPoint));
        trial[i] = q;
        num += v[i] * (q - zeroPoint);
        den += (q - zeroPoint) ** 2;
      }
      // Least squares for the scale given the codes (only refit once; the second pass requantizes with it).
      if (pass === 0 && den > 0 && num > 0) scale = num / den;
    }
    let errorSq = 0;
    for (let i = 0; i < v.length; i++) errorSq += ((trial[i] - zeroPoint) * scale - v[i]) ** 2;
    if (errorSq < best.errorSq) {
      best = { scale, zeroPoint, errorSq };
      codes.set(trial);
    }
  }
  return best;
}
