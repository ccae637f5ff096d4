/**
 * Re-quantizing a weight from its dequantized values into MatMulNBits blocks of 4 or 8 bits with
 * integer zero points, or dequantizing it to a dense float weight. Two uses:
 *
 * - The LM head (`lmHead: "4bit"`), which a small model's GGUF usually keeps in Q8_0 (tied to the
 *   embedding) and which is then about a third of the bytes of a decode step (SmolLM2-135M: 28 of
 *   88 MB): 4-bit blocks of 32 halve them, at a quality cost the optimization track measures.
 *   Re-quantizing a head that is already 4-bit is not offered there: it stacks a second rounding on
 *   the first (measured KL 0.37 on SmolLM2's Q4_1 layers).
 * - The GPU target's `deviceWeights`: every linear weight at one width and block size.
 *
 * Each block is quantized asymmetrically, value ~ (q - zp) * s with q, zp in 0..2^bits-1: the range
 * min..max (shrunk a little where clipping the extremes lowers the squared error), then s refitted
 * by least squares for the chosen codes. Where K is not a multiple of the block size, the last block
 * of each row is padded with codes equal to its zero point (value 0), as MatMulNBits expects.
 */
import { type LinearWeight, type NbitsWeight, storedIntegers } from "./linear-weight.js";

/** Block size of the 4-bit LM head: the finest MatMulNBits block, for the least error. */
export const REQUANT_BLOCK = 32;

/** Shares of the block's range tried as the code span (1 = min..max, no clipping). */
const RANGE_SHARES = [1, 0.95, 0.9, 0.85, 0.8];

/** How far the re-quantized weight is from the original, for tests and the manifest. */
export interface RequantReport {
  /** Root mean square error over every weight, relative to the weights' own root mean square. */
  relativeRmsError: number;
}

/** The MatMulNBits form a weight is re-quantized to: bits per code and weights per block (along K). */
export interface RequantTarget {
  bits: 4 | 8;
  blockSize: number;
}

/** `w` as 4-bit blocks of {@link REQUANT_BLOCK} with packed zero points; `w` itself when it is already 4-bit or K is not a multiple of 32. */
export function requantizeTo4Bit(w: LinearWeight, report?: RequantReport): LinearWeight {
  if ((w.kind === "nbits" && w.bits === 4) || w.k % REQUANT_BLOCK !== 0) return w;
  return requantize(w, { bits: 4, blockSize: REQUANT_BLOCK }, report);
}

/**
 * `w` as MatMulNBits blocks of `target` with zero points (packed two per byte at 4 bits, one per
 * byte at 8), from its dequantized values; `w` itself when it is already stored at exactly that width
 * and block size, so that no second rounding is stacked on the first.
 */
export function requantize(w: LinearWeight, target: RequantTarget, report?: RequantReport): LinearWeight {
  const { bits, blockSize } = target;
  if (w.kind === "nbits" && w.bits === bits && w.blockSize === blockSize) return w;
  const { n, k } = w;
  const kBlocks = Math.ceil(k / blockSize);
  const zpRow = bits === 4 ? Math.ceil(kBlocks / 2) : kBlocks;
  const packed = new Uint8Array((n * kBlocks * blockSize * bits) / 8);
  const scales = new Float32Array(n * kBlocks);
  const zeroPoints = new Uint8Array(n * zpRow);
  const row = new Float32Array(k);
  const codes = new Uint8Array(blockSize);
  let errorSq = 0;
  let valueSq = 0;
  for (let r = 0; r < n; r++) {
    readRow(w, r, row);
    for (let b = 0; b < kBlocks; b++) {
      const block = row.subarray(b * blockSize, Math.min(k, (b + 1) * blockSize));
      const fit = quantizeBlock(block, codes, bits);
      codes.fill(fit.zeroPoint, block.length);
      const blk = r * kBlocks + b;
      scales[blk] = fit.scale;
      if (bits === 8) {
        zeroPoints[r * zpRow + b] = fit.zeroPoint;
        packed.set(codes, blk * blockSize);
      } else {
        zeroPoints[r * zpRow + (b >> 1)] |= b & 1 ? fit.zeroPoint << 4 : fit.zeroPoint;
        const base = (blk * blockSize) / 2;
        for (let i = 0; i < blockSize; i += 2) packed[base + i / 2] = codes[i] | (codes[i + 1] << 4);
      }
      errorSq += fit.errorSq;
      for (const v of block) valueSq += v * v;
    }
  }
  if (report) report.relativeRmsError = valueSq === 0 ? 0 : Math.sqrt(errorSq / valueSq);
  return {
    kind: "nbits",
    n,
    k,
    bits,
    blockSize,
    packed,
    scales,
    zeroPoints,
    mins: null,
    mapping: `${sourceOf(w)} -> re-quantized to MatMulNBits ${bits}-bit block ${blockSize} with zero points`,
    exact: false,
    ...(w.activation ? { activation: w.activation } : {}),
  };
}

/** `w` as a dense float weight (its dequantized values, transposed to [K, N] for MatMul); `w` itself when it is one. */
export function dequantizeToFloat(w: LinearWeight): LinearWeight {
  if (w.kind === "float") return w;
  const { n, k } = w;
  const weightT = new Float32Array(k * n);
  const row = new Float32Array(k);
  for (let r = 0; r < n; r++) {
    readRow(w, r, row);
    for (let kk = 0; kk < k; kk++) weightT[kk * n + r] = row[kk];
  }
  return {
    kind: "float",
    n,
    k,
    weightT,
    mapping: `${sourceOf(w)} -> dequantized to a dense MatMul`,
    exact: w.exact,
    ...(w.activation ? { activation: w.activation } : {}),
  };
}

/** The source encoding named by a weight's mapping (the part before any "->"). */
function sourceOf(w: LinearWeight): string {
  return w.mapping.split(" -> ")[0];
}

/** Row `r` of the weight as floats (its first K values: a weight folded to block means has extra columns, which are not its values). */
function readRow(w: LinearWeight, r: number, out: Float32Array): void {
  if (w.kind === "float") {
    for (let kk = 0; kk < w.k; kk++) out[kk] = w.weightT[kk * w.n + r];
    return;
  }
  if (w.blockMeans) throw new Error("readRow: a weight folded to block means has no plain row to read");
  const kBlocks = Math.ceil(w.k / w.blockSize);
  const u = new Int32Array(w.blockSize);
  for (let b = 0; b < kBlocks; b++) {
    storedIntegers(w as NbitsWeight, r, b, u);
    const s = w.scales[r * kBlocks + b];
    const m = w.mins ? w.mins[b * w.n + r] : 0;
    const end = Math.min(w.blockSize, w.k - b * w.blockSize);
    for (let i = 0; i < end; i++) out[b * w.blockSize + i] = u[i] * s + m;
  }
}

/** The best `bits`-bit codes of one block (written to `codes`), its scale, zero point and squared error. */
export function quantizeBlock(v: Float32Array, codes: Uint8Array, bits: 4 | 8 = 4): { scale: number; zeroPoint: number; errorSq: number } {
  const maxCode = (1 << bits) - 1;
  const mid = (maxCode + 1) / 2;
  let lo = Infinity;
  let hi = -Infinity;
  for (const x of v) {
    lo = Math.min(lo, x);
    hi = Math.max(hi, x);
  }
  // A block that MatMulNBits must still represent exactly where it can: all equal (often all zero).
  if (hi === lo) {
    const scale = lo === 0 ? 1 : Math.abs(lo) / mid;
    const zeroPoint = lo === 0 ? 0 : lo > 0 ? 0 : maxCode;
    const q = lo === 0 ? 0 : lo > 0 ? mid : maxCode - mid;
    codes.fill(q, 0, v.length);
    const err = ((q - zeroPoint) * scale - lo) ** 2 * v.length;
    return { scale, zeroPoint, errorSq: err };
  }
  let best = { scale: 0, zeroPoint: 0, errorSq: Infinity };
  const trial = new Uint8Array(v.length);
  for (const share of RANGE_SHARES) {
    // The span shrinks around the block's middle: both extremes are clipped alike.
    const span = (hi - lo) * share;
    const start = lo + (hi - lo - span) / 2;
    let scale = span / maxCode;
    const zeroPoint = Math.min(maxCode, Math.max(0, Math.round(-start / scale)));
    for (let pass = 0; pass < 2; pass++) {
      let num = 0;
      let den = 0;
      for (let i = 0; i < v.length; i++) {
        const q = Math.min(maxCode, Math.max(0, Math.round(v[i] / scale) + zeroPoint));
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
