/**
 * Folding a weight's block minimums into 8-bit integer zero points, so that its matmul is one
 * MatMulNBits node instead of MatMulNBits + ReduceSum + MatMul + Add (Q4_1, Q4_K, Q5_K).
 *
 * A block's values are u*d + m (u the stored integer minus its zero point, d the scale, m the
 * minimum). MatMulNBits computes (q - zp)*s with integer q and zp, so choose s = d/k and
 * q - zp = k*u + round(k*m/d): every value moves by the same |error| <= d/(2k), where d is the
 * block's own quantization step. k is the largest of 16, 8, 4, 2, 1 whose codes fit in a byte
 * (k = 16 for every Q4_1 block whose minimum lies within 15 steps below zero, i.e. nearly all).
 * A block that fits none (its minimum far from zero against its step) is quantized afresh to
 * 8 bits (s = max|value|/127), an error of at most max|value|/254. The cost is bytes: 8 bits per
 * weight instead of 4 (plus the minimums), which the optimization track weighs against the nodes
 * saved.
 */
import { type LinearWeight, type NbitsWeight, storedIntegers, zeroPoint } from "./linear-weight.js";

/** Divisors of the block step tried, finest first. */
const STEP_DIVISORS = [16, 8, 4, 2, 1];

/** How far the folded weight is from the original, for the manifest: the worst error over blocks, in units of each block's own step. */
export interface FoldReport {
  /** Largest |folded - original| / d over every weight (<= 1/32 when every block takes k = 16). */
  worstStepFraction: number;
  /** Blocks that no k fitted and were requantized to 8 bits. */
  requantizedBlocks: number;
}

/** `w` with its minimums folded into 8-bit zero points (no `mins`), or `w` itself when it has none. */
export function foldMinsTo8Bit(w: NbitsWeight, report?: FoldReport): NbitsWeight;
export function foldMinsTo8Bit(w: LinearWeight, report?: FoldReport): LinearWeight;
export function foldMinsTo8Bit(w: LinearWeight, report?: FoldReport): LinearWeight {
  if (w.kind !== "nbits" || w.mins === null) return w;
  const { n, k, blockSize } = w;
  const kBlocks = k / blockSize;
  const packed = new Uint8Array(n * k);
  const scales = new Float32Array(n * kBlocks);
  const zeroPoints = new Uint8Array(n * kBlocks);
  const u = new Int32Array(blockSize);
  let worst = 0;
  let requantized = 0;
  for (let row = 0; row < n; row++) {
    for (let b = 0; b < kBlocks; b++) {
      const blk = row * kBlocks + b;
      storedIntegers(w, row, b, u);
      const d = w.scales[blk];
      const m = w.mins[b * n + row];
      let umin = Infinity;
      let umax = -Infinity;
      for (let i = 0; i < blockSize; i++) {
        umin = Math.min(umin, u[i]);
        umax = Math.max(umax, u[i]);
      }
      const out = packed.subarray(blk * blockSize, (blk + 1) * blockSize);
      const fitted = d !== 0 && fitBlock(u, umin, umax, d, m, out);
      if (fitted) {
        scales[blk] = d / fitted.k;
        zeroPoints[blk] = fitted.zp;
        worst = Math.max(worst, fitted.error);
      } else {
        const s = requantizeBlock(u, d, m, out);
        scales[blk] = s;
        zeroPoints[blk] = 128;
        if (d !== 0) requantized++;
      }
    }
  }
  if (report) {
    report.worstStepFraction = Math.max(report.worstStepFraction, worst);
    report.requantizedBlocks += requantized;
  }
  return {
    kind: "nbits",
    n,
    k,
    bits: 8,
    blockSize,
    packed,
    scales,
    zeroPoints,
    mins: null,
    mapping: `${w.mapping.split(" -> ")[0]} -> MatMulNBits 8-bit block ${blockSize}, minimum folded into integer zero points (error <= step/32)`,
    exact: false,
    ...(w.activation ? { activation: w.activation } : {}),
  };
}

/** Codes q = k*u + a with zero point zp = a - r (r = round(k*m/d)) for the finest k that fits a byte; null when none does. */
function fitBlock(u: Int32Array, umin: number, umax: number, d: number, m: number, out: Uint8Array): { k: number; zp: number; error: number } | null {
  for (const k of STEP_DIVISORS) {
    const r = Math.round((k * m) / d);
    // q - zp = k*u + r for every u in the block: zp = -(k*umin + r) + a, q = k*(u - umin) + a, a >= 0.
    let zp = -(k * umin + r);
    let a = 0;
    if (zp < 0) {
      a = -zp;
      zp = 0;
    }
    if (zp > 255 || a + k * (umax - umin) > 255) continue;
    for (let i = 0; i < u.length; i++) out[i] = k * (u[i] - umin) + a;
    return { k, zp, error: Math.abs(r - (k * m) / d) / k };
  }
  return null;
}

/** Plain symmetric 8-bit quantization of the block's values u*d + m (zero point 128); returns the scale. */
function requantizeBlock(u: Int32Array, d: number, m: number, out: Uint8Array): number {
  let maxAbs = 0;
  for (let i = 0; i < u.length; i++) maxAbs = Math.max(maxAbs, Math.abs(u[i] * d + m));
  const s = maxAbs === 0 ? 1 : maxAbs / 127;
  for (let i = 0; i < u.length; i++) out[i] = Math.max(0, Math.min(255, Math.round((u[i] * d + m) / s) + 128));
  return s;
}

/**
 * Folding a weight's block minimums while keeping its code width (4 bits stay 4 bits) and the
 * operator's default zero point (8 for 4 bits, 128 for 8): a block's values d*u + m (u = code - zp0)
 * become d*(code - mid) + r with r = m + d*(mid - zp0), the block's offset from a symmetric grid. The
 * remainders need blocksum(x) @ r, and they ride in the same MatMulNBits: the graph appends the
 * input's block means to the input, once per factor in `blockMeans.factors`, and the weight gains as
 * many columns. For 4-bit codes the factors are [16, 1]: each remainder is s*(16*H + L) with H and L
 * 4-bit codes, 8 bits of resolution over the row's remainders (s = the row's largest |r| / ~128);
 * 8-bit codes need one copy. With no zero-point input at all, onnxruntime takes its symmetric
 * kernels (SmolLM2-135M: 4-bit zero points cost about 9% of a decode step). One MatMulNBits per
 * linear plus three or four nodes for the means (shared by every linear of the same input), where
 * "matmul" takes four nodes per linear and reads a float32 [K/blockSize, N] table per step.
 */
export interface BlockMeansReport {
  /** Largest |quantized remainder - remainder| over every block, in units of that block's own step d. */
  worstStepFraction: number;
}

/** `w` with its minimums folded into the default zero point plus block-mean columns (see above), or `w` itself when it has none. */
export function foldMinsToBlockMeans(w: NbitsWeight, report?: BlockMeansReport): NbitsWeight {
  if (w.mins === null || w.blockMeans) return w;
  const { n, k, blockSize, bits } = w;
  const mid = 2 ** (bits - 1);
  const factors = bits === 4 ? [16, 1] : [1];
  const kBlocks = k / blockSize;
  const totalK = k + factors.length * kBlocks;
  const totalBlocks = Math.ceil(totalK / blockSize);
  const blob = (blockSize * bits) / 8;
  const packed = new Uint8Array(n * totalBlocks * blob);
  const scales = new Float32Array(n * totalBlocks);
  // Remainders as integers c = sum of factor * (code - mid): from -(sum of factors) * mid to (sum of factors) * (mid - 1).
  const span = factors.reduce((a, f) => a + f, 0);
  const [cMin, cMax] = [-span * mid, span * (mid - 1)];
  const remainders = new Float64Array(kBlocks);
  const extra = new Uint8Array((totalBlocks - kBlocks) * blockSize).fill(mid);
  let worst = 0;
  for (let row = 0; row < n; row++) {
    packed.set(w.packed.subarray(row * kBlocks * blob, (row + 1) * kBlocks * blob), row * totalBlocks * blob);
    let lo = 0;
    let hi = 0;
    for (let b = 0; b < kBlocks; b++) {
      const d = w.scales[row * kBlocks + b];
      scales[row * totalBlocks + b] = d;
      remainders[b] = w.mins[b * n + row] + d * (mid - zeroPoint(w, row, b));
      lo = Math.min(lo, remainders[b]);
      hi = Math.max(hi, remainders[b]);
    }
    const s = Math.max(hi / cMax, lo / cMin) || 1;
    extra.fill(mid);
    for (let b = 0; b < kBlocks; b++) {
      let c = Math.max(cMin, Math.min(cMax, Math.round(remainders[b] / s)));
      const d = Math.abs(w.scales[row * kBlocks + b]);
      if (d > 0) worst = Math.max(worst, Math.abs(c * s - remainders[b]) / d);
      // Digits of c in base factors[0] (balanced: each in -mid..mid-1), most significant first.
      for (let f = 0; f < factors.length; f++) {
        const digit = f === factors.length - 1 ? c : Math.floor((c + mid * factors[f + 1]) / factors[f]);
        extra[f * kBlocks + b] = digit + mid;
        c -= digit * factors[f];
      }
    }
    for (let e = 0; e < totalBlocks - kBlocks; e++) {
      const blk = row * totalBlocks + kBlocks + e;
      scales[blk] = blockSize * s;
      const codes = extra.subarray(e * blockSize, (e + 1) * blockSize);
      const out = packed.subarray(blk * blob, (blk + 1) * blob);
      if (bits === 8) out.set(codes);
      else for (let i = 0; i < blockSize; i += 2) out[i / 2] = codes[i] | (codes[i + 1] << 4);
    }
  }
  if (report) report.worstStepFraction = Math.max(report.worstStepFraction, worst);
  return {
    kind: "nbits",
    n,
    k: totalK,
    bits,
    blockSize,
    packed,
    scales,
    zeroPoints: null,
    mins: null,
    blockMeans: { blocks: kBlocks, factors },
    mapping: `${w.mapping.split(" -> ")[0]} -> MatMulNBits ${bits}-bit block ${blockSize}, default zero point, block offsets over appended block means`,
    exact: false,
    ...(w.activation ? { activation: w.activation } : {}),
  };
}
