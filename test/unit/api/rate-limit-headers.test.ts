/** The rate-limit headers as the reference API writes them. */
import { describe, expect, it } from "vitest";
import { formatDuration, rateLimitHeaders, retryAfterSeconds } from "../../../src/api/rate-limit-headers.js";

describe("rate-limit headers", () => {
  it("writes durations in the reference API's style", () => {
    expect([0, 20, 999, 1000, 1500, 59_500, 60_000, 360_000, 3_723_000].map(formatDuration)).toEqual([
      "0s",
      "20ms",
      "999ms",
      "1s",
      "1.5s",
      "59.5s",
      "1m0s",
      "6m0s",
      "1h2m3s",
    ]);
    expect(formatDuration(0.2)).toBe("1ms");
  });

  it("rounds retry-after up to whole seconds, at least 1", () => {
    expect([0, 1, 999, 1000, 1001, 59_001].map(retryAfterSeconds)).toEqual([1, 1, 1, 1, 2, 60]);
  });

  it("gives the six headers for a key with both limits, and none for a limit the key does not have", () => {
    expect(
      rateLimitHeaders({ limitRequests: 60, remainingRequests: 59, resetRequestsMs: 1000, limitTokens: 150_000, remainingTokens: 149_984, resetTokensMs: 6 }),
    ).toEqual({
      "x-ratelimit-limit-requests": "60",
      "x-ratelimit-remaining-requests": "59",
      "x-ratelimit-reset-requests": "1s",
      "x-ratelimit-limit-tokens": "150000",
      "x-ratelimit-remaining-tokens": "149984",
      "x-ratelimit-reset-tokens": "6ms",
    });
    expect(
      rateLimitHeaders({ limitRequests: 5, remainingRequests: 0, resetRequestsMs: 12_000, limitTokens: null, remainingTokens: null, resetTokensMs: null }),
    ).toEqual({
      "x-ratelimit-limit-requests": "5",
      "x-ratelimit-remaining-requests": "0",
      "x-ratelimit-reset-requests": "12s",
    });
  });
});
