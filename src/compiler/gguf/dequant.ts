// Dequantization exactly as ggml-quants.c dequantize_row_*: float32 arithmetic in the same order.
// JS computes in doubles; every float32 intermediate is rounded with Math.fround (or by the store
// into a Float32Array), and double rounding is harmless for one float32 + - * of float32 inputs.
// Assumes a little-endian host, like every platform kiln runs on.

import { halfToFloatBitsTable, halfToFloatTable } from "./fp16.js";
import { GgmlType, QK_K, ggmlByteLength, ggmlTypeName } from "./types.js";

const fround = Math.fround;

/** `elementCount` values of a tensor of `type` from its raw bytes, in ggml element order. */
export function dequantize(type: GgmlType, bytes: Uint8Array, elementCount: number): Float32Array {
  const dequantizer = DEQUANTIZERS.get(type);
  if (!dequantizer) throw new RangeError(`cannot dequantize ${ggmlTypeName(type)}: not supported`);
  const needed = ggmlByteLength(type, elementCount);
  if (bytes.length < needed) {
    throw new RangeError(`${elementCount} ${ggmlTypeName(type)} elements need ${needed} bytes, got ${bytes.length}`);
  }
  const out = new Float32Array(elementCount);
  dequantizer(bytes, out);
  return out;
}

type Dequantizer = (src: Uint8Array, out: Float32Array) => void;

const DEQUANTIZERS: ReadonlyMap<GgmlType, Dequantizer> = new Map([
  [GgmlType.F32, dequantizeF32],
  [GgmlType.F16, dequantizeF16],
  [GgmlType.BF16, dequantizeBF16],
  [GgmlType.Q4_0, dequantizeQ4_0],
  [GgmlType.Q4_1, dequantizeQ4_1],
  [GgmlType.Q5_0, dequantizeQ5_0],
  [GgmlType.Q8_0, dequantizeQ8_0],
  [GgmlType.Q4_K, dequantizeQ4_K],
  [GgmlType.Q5_K, dequantizeQ5_K],
  [GgmlType.Q6_K, dequantizeQ6_K],
]);

function dequantizeF32(src: Uint8Array, out: Float32Array): void {
  new Uint8Array(out.buffer).set(src.subarray(0, out.length * 4));
}

function dequantizeF16(src: Uint8Array, out: Float32Array): void {
  const table = halfToFloatBitsTable();
  const bits = new Uint32Array(out.buffer);
  for (let i = 0; i < out.length; i++) bits[i] = table[src[2 * i] | (src[2 * i + 1] << 8)];
}

function dequantizeBF16(src: Uint8Array, out: Float32Array): void {
  const bits = new Uint32Array(out.buffer);
  for (let i = 0; i < out.length; i++) bits[i] = ((src[2 * i] | (src[2 * i + 1] << 8)) << 16) >>> 0;
}

function dequantizeQ4_0(src: Uint8Array, out: Float32Array): void {
  const half = halfToFloatTable();
  for (let o = 0, y = 0; y < out.length; o += 18, y += 32) {
    const d = half[src[o] | (src[o + 1] << 8)];
    for (let j = 0; j < 16; j++) {
      const q = src[o + 2 + j];
      out[y + j] = ((q & 0x0f) - 8) * d;
      out[y + j + 16] = ((q >> 4) - 8) * d;
    }
  }
}

function dequantizeQ4_1(src: Uint8Array, out: Float32Array): void {
  const half = halfToFloatTable();
  for (let o = 0, y = 0; y < out.length; o += 20, y += 32) {
    const d = half[src[o] | (src[o + 1] << 8)];
    const m = half[src[o + 2] | (src[o + 3] << 8)];
    for (let j = 0; j < 16; j++) {
      const q = src[o + 4 + j];
      out[y + j] = fround((q & 0x0f) * d) + m;
      out[y + j + 16] = fround((q >> 4) * d) + m;
    }
  }
}

function dequantizeQ5_0(src: Uint8Array, out: Float32Array): void {
  const half = halfToFloatTable();
  for (let o = 0, y = 0; y < out.length; o += 22, y += 32) {
    const d = half[src[o] | (src[o + 1] << 8)];
    // Bit j of the little-endian qh word is element j's fifth bit.
    const qh = (src[o + 2] | (src[o + 3] << 8) | (src[o + 4] << 16) | (src[o + 5] << 24)) >>> 0;
    for (let j = 0; j < 16; j++) {
      const q = src[o + 6 + j];
      out[y + j] = (((q & 0x0f) | (((qh >>> j) << 4) & 0x10)) - 16) * d;
      out[y + j + 16] = (((q >> 4) | ((qh >>> (j + 12)) & 0x10)) - 16) * d;
    }
  }
}

function dequantizeQ8_0(src: Uint8Array, out: Float32Array): void {
  const half = halfToFloatTable();
  const signed = new Int8Array(src.buffer, src.byteOffset, src.length);
  for (let o = 0, y = 0; y < out.length; o += 34, y += 32) {
    const d = half[src[o] | (src[o + 1] << 8)];
    for (let j = 0; j < 32; j++) out[y + j] = signed[o + 2 + j] * d;
  }
}

/** get_scale_min_k4 for sub-block j, written to scaleMin[0] (scale) and scaleMin[1] (min). */
function getScaleMinK4(j: number, src: Uint8Array, s: number, scaleMin: Uint8Array): void {
  if (j < 4) {
    scaleMin[0] = src[s + j] & 63;
    scaleMin[1] = src[s + j + 4] & 63;
  } else {
    scaleMin[0] = (src[s + j + 4] & 0x0f) | ((src[s + j - 4] >> 6) << 4);
    scaleMin[1] = (src[s + j + 4] >> 4) | ((src[s + j] >> 6) << 4);
  }
}

function dequantizeQ4_K(src: Uint8Array, out: Float32Array): void {
  const half = halfToFloatTable();
  const sm = new Uint8Array(2);
  for (let o = 0, y = 0; y < out.length; o += 144) {
    const d = half[src[o] | (src[o + 1] << 8)];
    const dmin = half[src[o + 2] | (src[o + 3] << 8)];
    // 4 groups of 64: low nibbles use sub-block 2g, high nibbles sub-block 2g+1.
    for (let g = 0, q = o + 16; g < 4; g++, q += 32) {
      getScaleMinK4(2 * g, src, o + 4, sm);
      const d1 = fround(d * sm[0]);
      const m1 = fround(dmin * sm[1]);
      getScaleMinK4(2 * g + 1, src, o + 4, sm);
      const d2 = fround(d * sm[0]);
      const m2 = fround(dmin * sm[1]);
      for (let l = 0; l < 32; l++) out[y++] = fround(d1 * (src[q + l] & 0x0f)) - m1;
      for (let l = 0; l < 32; l++) out[y++] = fround(d2 * (src[q + l] >> 4)) - m2;
    }
  }
}

function dequantizeQ5_K(src: Uint8Array, out: Float32Array): void {
  const half = halfToFloatTable();
  const sm = new Uint8Array(2);
  for (let o = 0, y = 0; y < out.length; o += 176) {
    const d = half[src[o] | (src[o + 1] << 8)];
    const dmin = half[src[o + 2] | (src[o + 3] << 8)];
    const qh = o + 16;
    // As Q4_K, plus a fifth bit: bit s of qh[l] belongs to element l of sub-block s.
    for (let g = 0, q = o + 48; g < 4; g++, q += 32) {
      getScaleMinK4(2 * g, src, o + 4, sm);
      const d1 = fround(d * sm[0]);
      const m1 = fround(dmin * sm[1]);
      getScaleMinK4(2 * g + 1, src, o + 4, sm);
      const d2 = fround(d * sm[0]);
      const m2 = fround(dmin * sm[1]);
      const lowBit = 1 << (2 * g);
      const highBit = lowBit << 1;
      for (let l = 0; l < 32; l++) out[y++] = fround(d1 * ((src[q + l] & 0x0f) + (src[qh + l] & lowBit ? 16 : 0))) - m1;
      for (let l = 0; l < 32; l++) out[y++] = fround(d2 * ((src[q + l] >> 4) + (src[qh + l] & highBit ? 16 : 0))) - m2;
    }
  }
}

function dequantizeQ6_K(src: Uint8Array, out: Float32Array): void {
  const half = halfToFloatTable();
  const signed = new Int8Array(src.buffer, src.byteOffset, src.length);
  const scale = new Float32Array(16);
  for (let o = 0, y = 0; y < out.length; o += 210, y += QK_K) {
    const d = half[src[o + 208] | (src[o + 209] << 8)];
    for (let i = 0; i < 16; i++) scale[i] = d * signed[o + 192 + i];
    // Two halves of 128: ql bytes 64h.., qh bytes 32h.., scales 8h..
    for (let h = 0; h < 2; h++) {
      const ql = o + 64 * h;
      const qh = o + 128 + 32 * h;
      const sc = 8 * h;
      const base = y + 128 * h;
      for (let l = 0; l < 32; l++) {
        const is = sc + (l >> 4);
        const hi = src[qh + l];
        const lo0 = src[ql + l];
        const lo1 = src[ql + l + 32];
        out[base + l] = scale[is] * (((lo0 & 0x0f) | ((hi & 3) << 4)) - 32);
        out[base + l + 32] = scale[is + 2] * (((lo1 & 0x0f) | (((hi >> 2) & 3) << 4)) - 32);
        out[base + l + 64] = scale[is + 4] * (((lo0 >> 4) | (((hi >> 4) & 3) << 4)) - 32);
        out[base + l + 96] = scale[is + 6] * (((lo1 >> 4) | (((hi >> 6) & 3) << 4)) - 32);
      }
    }
  }
}
