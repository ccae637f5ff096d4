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
