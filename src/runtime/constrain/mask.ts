/** Sets every logit the mask does not allow to -Infinity, in place. */
export function applyTokenMask(logits: Float32Array, mask: Int32Array): void {
  const n = logits.length;
  const words = Math.min(mask.length, Math.ceil(n / 32));
  for (let w = 0; w < words; w++) {
    const bits = mask[w];
    if (bits === -1) continue;
    const base = w << 5;
    const end = Math.min(32, n - base);
    // A JSON grammar allows few tokens: most words are empty, and a native fill beats 32 tests.
    if (bits === 0) {
      logits.fill(-Infinity, base, base + end);
      continue;
    }
    for (let b = 0; b < end; b++) if (((bits >>> b) & 1) === 0) logits[base + b] = -Infinity;
  }
  // Logits past the mask's width are not allowed either.
  if (words << 5 < n) logits.fill(-Infinity, words << 5);
}

/** Whether the mask allows `id`. */
export function maskAllows(mask: Int32Array, id: number): boolean {
  return ((mask[id >>> 5] >>> (id & 31)) & 1) === 1;
}
