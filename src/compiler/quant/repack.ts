import { halfToFloat } from "./fp16.js";
import type { LinearWeight } from "./linear-weight.js";

/**
 * Repacking of GGUF quantized blocks into MatMulNBits operands. Every mapping here is exact:
 * the dequantized value of each element equals ggml's dequantize_row_* result.
 */

const QK = 32;

/** ggml Q4_0/Q4_1 store element j in the low nibble of byte j and j+16 in its high nibble; MatMulNBits wants (2i, 2i+1) pairs. */
function repackNibbles(src: Uint8Array, srcOffset: number, dst: Uint8Array, dstOffset: number): void {
  for (let i = 0; i < 16; i++) {
    const a = pick4(src, srcOffset, 2 * i);
    const b = pick4(src, srcOffset, 2 * i + 1);
    dst[dstOffset + i] = a | (b << 4);
  }
}

function pick4(src: Uint8Array, offset: number, element: number): number {
  return element < 16 ? src[offset + element] & 0x0f : src[offset + element - 16] >> 4;
}

function u16(raw: Uint8Array, offset: number): number {
  return raw[offset] | (raw[offset + 1] << 8);
}

/** Q4_0 (value (q-8)*d) maps onto MatMulNBits' default zero point 8. */
export function repackQ4_0(raw: Uint8Array, n: number, k: number): LinearWeight {
  const kBlocks = k / QK;
  const packed = new Uint8Array(n * kBlocks * 16);
  const scales = new Float32Array(n * kBlocks);
  for (let blk = 0; blk < n * kBlocks; blk++) {
    const at = blk * 18;
    scales[blk] = halfToFloat(u16(raw, at));
    repackNibbles(raw, at + 2, packed, blk * 16);
  }
  return {
    kind: "nbits",
    n,
    k,
    bits: 4,
    blockSize: QK,
    packed,
    scales,
    zeroPoints: null,
    mins: null,
    mapping: "Q4_0 -> MatMulNBits 4-bit, zero point 8",
    exact: true,
  };
}

/** Q4_1 (value q*d + m): zero point 0 plus the per-block minimum as a correction matmul. */
export function repackQ4_1(raw: Uint8Array, n: number, k: number): LinearWeight {
  const kBlocks = k / QK;
  const packed = new Uint8Array(n * kBlocks * 16);
  const scales = new Float32Array(n * kBlocks);
  const mins = new Float32Array(kBlocks * n);
  for (let row = 0; row < n; row++) {
    for (let b = 0; b < kBlocks; b++) {
      const blk = row * kBlocks + b;
      const at = blk * 20;
      scales[blk] = halfToFloat(u16(raw, at));
      mins[b * n + row] = halfToFloat(u16(raw, at + 2));
      repackNibbles(raw, at + 4, packed, blk * 16);
    }
  }
  const zeroPoints = new Uint8Array(n * Math.ceil(kBlocks / 2));
  return {
    kind: "nbits",
    n,
    k,
    bits: 4,
    blockSize: QK,
    packed,
    scales,
    zeroPoints,
    mins,
    mapping: "Q4_1 -> MatMulNBits 4-bit, zero point 0, + blocksum(x) @ mins",
    exact: true,
  };
}

/** Q8_0 (value q*d, q int8) maps onto 8-bit MatMulNBits with the default zero point 128. */
export function repackQ8_0(raw: Uint8Array, n: number, k: number): LinearWeight {
  const kBlocks = k / QK;
  const packed = new Uint8Array(n * k);
  const scales = new Float32Array(n * kBlocks);
  for (let blk = 0; blk < n * kBlocks; blk++) {
    const at = blk * 34;
    scales[blk] = halfToFloat(u16(raw, at));
    for (let j = 0; j < QK; j++) packed[blk * QK + j] = (raw[at + 2 + j] + 128) & 0xff; // int8 -> uint8 offset by 128
  }
  return {
    kind: "nbits",
    n,
    k,
    bits: 8,
    blockSize: QK,
    packed,
    scales,
    zeroPoints: null,
    mins: null,
    mapping: "Q8_0 -> MatMulNBits 8-bit, zero point 128",
    exact: true,
  };
}

/**
 * Q5_0 (value (q-16)*d, q 5-bit: low nibbles as Q4_0, fifth bits in a 32-bit word) as 8-bit
 * MatMulNBits: q+112 with the default zero point 128 is exact.
 */
export function repackQ5_0(raw: Uint8Array, n: number, k: number): LinearWeight {
  const kBlocks = k / QK;
  const packed = new Uint8Array(n * k);
  const scales = new Float32Array(n * kBlocks);
  for (let blk = 0; blk < n * kBlocks; blk++) {
    const at = blk * 22;
    scales[blk] = halfToFloat(u16(raw, at));
    const qh = (raw[at + 2] | (raw[at + 3] << 8) | (raw[at + 4] << 16) | (raw[at + 5] << 24)) >>> 0;
    for (let j = 0; j < 16; j++) {
      const byte = raw[at + 6 + j];
      packed[blk * QK + j] = ((byte & 0x0f) | (((qh >>> j) & 1) << 4)) + 112;
      packed[blk * QK + j + 16] = ((byte >> 4) | (((qh >>> (j + 16)) & 1) << 4)) + 112;
    }
  }
  return {
    kind: "nbits",
    n,
    k,
    bits: 8,
    blockSize: QK,
    packed,
    scales,
    zeroPoints: null,
    mins: null,
    mapping: "Q5_0 -> MatMulNBits 8-bit, q+112 with zero point 128",
    exact: true,
  };
}

function q4kScaleMin(scales: Uint8Array, at: number, j: number): [number, number] {
  if (j < 4) return [scales[at + j] & 63, scales[at + j + 4] & 63];
  const sc = (scales[at + j + 4] & 0x0f) | ((scales[at + j - 4] >> 6) << 4);
  const m = (scales[at + j + 4] >> 4) | ((scales[at + j] >> 6) << 4);
  return [sc, m];
}

/** Q4_K: each 32-element sub-block is q*(d*sc) - dmin*m, the same form as Q4_1. */
export function repackQ4_K(raw: Uint8Array, n: number, k: number): LinearWeight {
  const superBlocks = k / 256;
  const kBlocks = k / QK;
  const packed = new Uint8Array(n * kBlocks * 16);
  const scales = new Float32Array(n * kBlocks);
  const mins = new Float32Array(kBlocks * n);
  for (let row = 0; row < n; row++) {
    for (let sb = 0; sb < superBlocks; sb++) {
      const at = (row * superBlocks + sb) * 144;
      const d = halfToFloat(u16(raw, at));
      const dmin = halfToFloat(u16(raw, at + 2));
      for (let pair = 0; pair < 4; pair++) {
        const qs = at + 16 + pair * 32;
        for (let half = 0; half < 2; half++) {
          const sub = pair * 2 + half;
          const [sc, m] = q4kScaleMin(raw, at + 4, sub);
          const b = sb * 8 + sub;
          const blk = row * kBlocks + b;
          scales[blk] = d * sc;
          mins[b * n + row] = -(dmin * m);
          for (let i = 0; i < 16; i++) {
            const lo = half === 0 ? raw[qs + 2 * i] & 0x0f : raw[qs + 2 * i] >> 4;
            const hi = half === 0 ? raw[qs + 2 * i + 1] & 0x0f : raw[qs + 2 * i + 1] >> 4;
            packed[blk * 16 + i] = lo | (hi << 4);
          }
        }
      }
    }
  }
  const zeroPoints = new Uint8Array(n * Math.ceil(kBlocks / 2));
  return {
    kind: "nbits",
    n,
    k,
    bits: 4,
    blockSize: QK,
    packed,
    scales,
    zeroPoints,
    mins,
    mapping: "Q4_K -> MatMulNBits 4-bit block 32, zero point 0, + blocksum(x) @ mins",
    exact: true,
    activation: "q8_K",
  };
}

/**
 * Q5_K: each 32-element sub-block is q*(d*sc) - dmin*m with q 5-bit (Q4_K's nibbles plus bit s of
 * qh[l] for element l of sub-block s). MatMulNBits has no 5-bit form, so q+128 in 8 bits with the
 * default zero point 128, plus blocksum(x) @ mins as for Q4_K: exact, at 8 bits per weight.
 */
export function repackQ5_K(raw: Uint8Array, n: number, k: number): LinearWeight {
  const superBlocks = k / 256;
  const kBlocks = k / QK;
  const packed = new Uint8Array(n * k);
  const scales = new Float32Array(n * kBlocks);
  const mins = new Float32Array(kBlocks * n);
  for (let row = 0; row < n; row++) {
    for (let sb = 0; sb < superBlocks; sb++) {
      const at = (row * superBlocks + sb) * 176;
      const d = halfToFloat(u16(raw, at));
      const dmin = halfToFloat(u16(raw, at + 2));
      const qh = at + 16;
      for (let sub = 0; sub < 8; sub++) {
        const qs = at + 48 + (sub >> 1) * 32;
        const shift = (sub & 1) * 4;
        const [sc, m] = q4kScaleMin(raw, at + 4, sub);
        const b = sb * 8 + sub;
        const blk = row * kBlocks + b;
        scales[blk] = d * sc;
        mins[b * n + row] = -(dmin * m);
        for (let l = 0; l < QK; l++) packed[blk * QK + l] = ((raw[qs + l] >> shift) & 0x0f) + (((raw[qh + l] >> sub) & 1) << 4) + 128;
      }
    }
  }
  return {
    kind: "nbits",
    n,
    k,
    bits: 8,
    blockSize: QK,
    packed,
    scales,
    zeroPoints: null,
    mins,
    mapping: "Q5_K -> MatMulNBits 8-bit block 32, q+128 with zero point 128, + blocksum(x) @ mins",
    exact: true,
    activation: "q8_K",
  };
}

/** Q6_K: 16-element groups of (q-32)*(d*sc); as 8-bit q+96 with zero point 128 that is exact. */
export function repackQ6_K(raw: Uint8Array, n: number, k: number): LinearWeight {
  const superBlocks = k / 256;
  const packed = new Uint8Array(n * k);
  const scales = new Float32Array((n * k) / 16);
  for (let row = 0; row < n; row++) {
    for (let sb = 0; sb < superBlocks; sb++) {
      const at = (row * superBlocks + sb) * 210;
      const d = halfToFloat(u16(raw, at + 208));
      const base = row * k + sb * 256;
      for (let h = 0; h < 2; h++) {
        const ql = at + h * 64;
        const qh = at + 128 + h * 32;
        const sc = at + 192 + h * 8;
        for (let l = 0; l < 32; l++) {
          const q1 = (raw[ql + l] & 0x0f) | (((raw[qh + l] >> 0) & 3) << 4);
          const q2 = (raw[ql + l + 32] & 0x0f) | (((raw[qh + l] >> 2) & 3) << 4);
          const q3 = (raw[ql + l] >> 4) | (((raw[qh + l] >> 4) & 3) << 4);
          const q4 = (raw[ql + l + 32] >> 4) | (((raw[qh + l] >> 6) & 3) << 4);
          const o = base + h * 128 + l;
          packed[o] = q1 + 96;
          packed[o + 32] = q2 + 96;
          packed[o + 64] = q3 + 96;
          packed[o + 96] = q4 + 96;
        }
        for (let g = 0; g < 8; g++) {
          const scale = (raw[sc + g] << 24) >> 24; // int8
          scales[(base + h * 128) / 16 + g] = d * scale;
        }
      }
    }
  }
  return {
    kind: "nbits",
    n,
    k,
    bits: 8,
    blockSize: 16,
    packed,
    scales,
    zeroPoints: null,
    mins: null,
    mapping: "Q6_K -> MatMulNBits 8-bit block 16, q+96 with zero point 128",
    exact: true,
    activation: "q8_K",
  };
}

/** Float weights [N, K] as a plain MatMul over the transposed matrix. */
export function floatLinear(values: Float32Array, n: number, k: number, source: string): LinearWeight {
  const weightT = new Float32Array(k * n);
  for (let r = 0; r < n; r++) for (let c = 0; c < k; c++) weightT[c * n + r] = values[r * k + c];
  const activation = source === "F16" ? "f16" : source === "BF16" ? "bf16" : undefined;
  return { kind: "float", n, k, weightT, mapping: `${source} -> MatMul float32`, exact: true, ...(activation ? { activation } : {}) };
}
