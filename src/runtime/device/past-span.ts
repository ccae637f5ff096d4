/** How much of a device-resident KV cache a step reads. */

/** The fewest positions a step's past span reads: shorter ones would only add shapes. */
const MIN_PAST_SPAN = 64;

/**
 * How many of each slot's first positions a step reaching `longest` positions reads, of pools of
 * `capacity` a slot: the next power of two at or above it (at least MIN_PAST_SPAN), at most the
 * capacity. A step then copies and attends at most twice what its rows hold rather than the whole
 * capacity, and powers of two keep the steps' shapes few, so the provider reuses its buffers and
 * compiled kernels.
 */
export function pastSpan(longest: number, capacity: number): number {
  let w = MIN_PAST_SPAN;
  while (w < longest) w *= 2;
  return Math.min(w, capacity);
}
