// Conversions between float32 and the 16-bit float formats GGUF stores (IEEE half and bfloat16).
// Bulk paths work on bit patterns (Uint32Array views) so NaN payloads survive exactly, as in ggml.

const scratchF32 = new Float32Array(1);
const scratchU32 = new Uint32Array(scratchF32.buffer);

let halfTable: Uint32Array | undefined;

/** float32 bit patterns of all 65536 halfs, built on first use (256 KiB). */
export function halfToFloatBitsTable(): Uint32Array {
  if (!halfTable) {
    halfTable = new Uint32Array(65536);
    for (let h = 0; h < 65536; h++) halfTable[h] = halfToFloatBits(h);
  }
  return halfTable;
}

let halfValues: Float32Array | undefined;

/** The same table read as float32 values, for scale lookups in dequantization. */
export function halfToFloatTable(): Float32Array {
  halfValues ??= new Float32Array(halfToFloatBitsTable().buffer);
  return halfValues;
}

function halfToFloatBits(h: number): number {
  const sign = (h & 0x8000) << 16;
  const exp = (h >> 10) & 0x1f;
  let mant = h & 0x3ff;
  if (exp === 0x1f) return (sign | 0x7f800000 | (mant << 13)) >>> 0;
  if (exp !== 0) return (sign | ((exp + 112) << 23) | (mant << 13)) >>> 0;
  if (mant === 0) return sign >>> 0;
  // Subnormal half: shift the mantissa up to an implicit leading 1, lowering the exponent.
  let biased = 113;
  while ((mant & 0x400) === 0) {
    mant <<= 1;
    biased--;
  }
  return (sign | (biased << 23) | ((mant & 0x3ff) << 13)) >>> 0;
}

export function f16ToF32(h: number): number {
  scratchU32[0] = halfToFloatBitsTable()[h & 0xffff];
  return scratchF32[0];
}

export function bf16ToF32(h: number): number {
  scratchU32[0] = (h & 0xffff) << 16;
  return scratchF32[0];
}

/** Round-to-nearest-even, as numpy and ggml's GGML_FP32_TO_FP16 do. */
export function f32ToF16(x: number): number {
  scratchF32[0] = x;
  return floatBitsToHalf(scratchU32[0]);
}

function floatBitsToHalf(f: number): number {
  const sign = (f >>> 16) & 0x8000;
  const exp = (f >>> 23) & 0xff;
  const mant = f & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant === 0 ? 0 : mant >>> 13 || 1);
  const e = exp - 112;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) return sign | subnormalHalf(mant | 0x800000, e);
  return sign | roundHalfEven((e << 10) | (mant >>> 13), mant & 0x1fff, 0x1000);
}

/** Half subnormal (or zero, or the smallest normal after rounding) for a float with implicit bit set. */
function subnormalHalf(mant: number, e: number): number {
  if (e < -10) return 0;
  const shift = 14 - e;
  return roundHalfEven(mant >>> shift, mant & ((1 << shift) - 1), 1 << (shift - 1));
}

/** A carry out of the mantissa correctly bumps the exponent, up to infinity. */
function roundHalfEven(truncated: number, rest: number, half: number): number {
  return rest > half || (rest === half && (truncated & 1) === 1) ? truncated + 1 : truncated;
}

/** ggml_compute_fp32_to_bf16: round-to-nearest-even, NaNs forced quiet. */
export function f32ToBf16(x: number): number {
  scratchF32[0] = x;
  return floatBitsToBf16(scratchU32[0]);
}

function floatBitsToBf16(u: number): number {
  if ((u & 0x7fffffff) > 0x7f800000) return ((u >>> 16) | 64) & 0xffff;
  return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
}

/** Halfs (as stored, little-endian uint16) to float32. */
export function f16ArrayToF32(src: Uint16Array): Float32Array {
  const table = halfToFloatBitsTable();
  const out = new Float32Array(src.length);
  const bits = new Uint32Array(out.buffer);
  for (let i = 0; i < src.length; i++) bits[i] = table[src[i]];
  return out;
}

export function f32ArrayToF16(src: Float32Array): Uint16Array {
  const bits = new Uint32Array(src.buffer, src.byteOffset, src.length);
  const out = new Uint16Array(src.length);
  for (let i = 0; i < src.length; i++) out[i] = floatBitsToHalf(bits[i]);
  return out;
}

export function f32ArrayToBf16(src: Float32Array): Uint16Array {
  const bits = new Uint32Array(src.buffer, src.byteOffset, src.length);
  const out = new Uint16Array(src.length);
  for (let i = 0; i < src.length; i++) out[i] = floatBitsToBf16(bits[i]);
  return out;
}
