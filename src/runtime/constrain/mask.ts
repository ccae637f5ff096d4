/** Sets every logit the mask does not allow to -Infinity, in place. */
export function applyTokenMask(logits: Float32Array, mask: Int32Array): void {
  const n = logits.length;
  const words = Math.min(mask.length, Math.ceil(n / 32));
  for (let w = 0; w < words; w++) {
    const bits = mask[w];
    if (bits === -1) continue;
    const base = w << 5;
    const end = Math.min(32, n - base);
    for (let b = 0; b < end; b++) if (((bits >>> b) & 1) === 0) logits[base + b] = -Infinity;
  }
  // Logits past the mask's width are not allowed either.
  for (let i = words << 5; i < n; i++) logits[i] = -Infinity;
}

/** Whether the mask allows `id`. */
export function maskAllows(mask: Int32Array, id: number): boolean {
  return ((mask[id >>> 5] >>> (id & 31)) & 1) === 1;
}
