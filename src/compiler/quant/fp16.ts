const HALF_TABLE = (() => {
  const t = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) {
    const s = h & 0x8000 ? -1 : 1;
    const e = (h >> 10) & 0x1f;
    const f = h & 0x3ff;
    if (e === 0) t[h] = s * f * 2 ** -24;
    else if (e === 31) t[h] = f ? NaN : s * Infinity;
    else t[h] = s * (1 + f / 1024) * 2 ** (e - 15);
  }
  return t;
})();

/** IEEE half (as its 16 bits) to float, by table: the repacking loops call this millions of times. */
export function halfToFloat(bits: number): number {
  return HALF_TABLE[bits];
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** Float to IEEE half (as its 16 bits), rounding to nearest even; past the half range it is +-Infinity. */
export function floatToHalf(value: number): number {
  f32[0] = value;
  const x = u32[0];
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  const mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0); // Infinity or NaN
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign; // below half the smallest subnormal: zero
    const m = mant | 0x800000;
    const shift = 14 - e;
    const half = m >>> shift;
    const rest = m & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    return sign | (half + (rest > mid || (rest === mid && half & 1) ? 1 : 0));
  }
  const half = (e << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  // A carry out of the mantissa correctly rounds up into the exponent (and to Infinity at the top).
  return sign | (half + (rest > 0x1000 || (rest === 0x1000 && half & 1) ? 1 : 0));
}

/** Float32 values as IEEE halves. */
export function floatsToHalves(values: Float32Array): Uint16Array {
  const out = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = floatToHalf(values[i]);
  return out;
}
