/**
 * The reference API's rate-limit headers, from a {@link RateLimitState}: `x-ratelimit-limit-*`,
 * `x-ratelimit-remaining-*` and `x-ratelimit-reset-*` for requests and tokens. A key without such a
 * limit gets none of that limit's headers. Resets are durations as the reference API writes them
 * (Go's style: `20ms`, `1s`, `1.5s`, `6m0s`, `1h2m3s`).
 */
import type { RateLimitState } from "./cloud-port.js";

export function rateLimitHeaders(state: RateLimitState): Record<string, string> {
  const headers: Record<string, string> = {};
  const put = (name: string, v: number | null, format: (n: number) => string = String) => {
    if (v !== null) headers[name] = format(v);
  };
  put("x-ratelimit-limit-requests", state.limitRequests);
  put("x-ratelimit-remaining-requests", state.remainingRequests);
  put("x-ratelimit-reset-requests", state.resetRequestsMs, formatDuration);
  put("x-ratelimit-limit-tokens", state.limitTokens);
  put("x-ratelimit-remaining-tokens", state.remainingTokens);
  put("x-ratelimit-reset-tokens", state.resetTokensMs, formatDuration);
  return headers;
}

/** Milliseconds as a duration string: `0s`, `20ms`, `1s`, `59.5s`, `6m0s`, `1h0m0s`. */
export function formatDuration(ms: number): string {
  const whole = Math.max(0, Math.ceil(ms));
  if (whole === 0) return "0s";
  if (whole < 1000) return `${whole}ms`;
  const hours = Math.floor(whole / 3_600_000);
  const minutes = Math.floor((whole % 3_600_000) / 60_000);
  const seconds = (whole % 60_000) / 1000;
  const s = `${Number.isInteger(seconds) ? seconds : seconds.toFixed(3).replace(/0+$/, "")}s`;
  if (hours > 0) return `${hours}h${minutes}m${s}`;
  if (minutes > 0) return `${minutes}m${s}`;
  return s;
}

/** `retry-after` seconds for a wait in milliseconds: rounded up, at least 1. */
export function retryAfterSeconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000));
}
