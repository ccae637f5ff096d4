/**
 * The time arithmetic both limit stores share (the Redis store repeats it in its Lua scripts): the
 * rolling window, the UTC day, and how long a refused request should wait.
 */

/** Length of the rolling window of `requestsPerMinute` and `tokensPerMinute`, ms. */
export const WINDOW_MS = 60_000;

/** How long a concurrency slot is held without a settle before it comes back, ms (default 5 minutes). */
export const DEFAULT_LEASE_MS = 5 * 60_000;

/**
 * The retry time given for a concurrency refusal when no lease expires sooner, ms: slots come back
 * when requests end, which no store can foresee, so clients are told to try again shortly.
 */
export const CONCURRENCY_RETRY_MS = 1_000;

const DAY_MS = 86_400_000;

/** Days since the epoch, UTC: the daily budget's period. */
export function utcDay(nowMs: number): number {
  return Math.floor(nowMs / DAY_MS);
}

/** Milliseconds until the next UTC day begins (when a spent budget comes back). */
export function msUntilNextUtcDay(nowMs: number): number {
  return (utcDay(nowMs) + 1) * DAY_MS - nowMs;
}

/** An entry stamped at `atMs` counts in the window until `atMs + WINDOW_MS` (exclusive). */
export function inWindow(atMs: number, nowMs: number): boolean {
  return atMs > nowMs - WINDOW_MS;
}

/**
 * When a window of entries (oldest first) has room for `amount` more under `limit`: 0 when it has
 * room now; else the wait until enough of the oldest entries leave it. An amount above the limit
 * never fits: the wait is the whole window.
 */
export function msUntilRoom(entries: readonly { atMs: number; amount: number }[], amount: number, limit: number, nowMs: number): number {
  if (amount > limit) return WINDOW_MS;
  let total = entries.reduce((sum, e) => sum + e.amount, 0);
  if (total + amount <= limit) return 0;
  for (const entry of entries) {
    total -= entry.amount;
    if (total + amount <= limit) return entry.atMs + WINDOW_MS - nowMs;
  }
  return WINDOW_MS;
}
