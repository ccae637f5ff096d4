/**
 * Per-key limits of cloud mode and the counters that enforce them. One process keeps them in memory
 * (`memory-limits.ts`); a fleet of replicas keeps them in Redis (`redis-limits.ts`) so that a limit
 * holds for the whole fleet, not per replica. Both implement {@link LimitCounters} with the same
 * semantics, checked by the same tests.
 */

/** What one key may do; null = unlimited. */
export interface KeyLimits {
  /** Requests admitted per rolling 60 s. */
  requestsPerMinute: number | null;
  /** Tokens per rolling 60 s: prompt + max completion reserved at admission, corrected when the request ends. */
  tokensPerMinute: number | null;
  /** Requests in flight at once. */
  maxConcurrent: number | null;
  /** Spend per UTC day, in nano-USD (reservations count until settled). */
  dailyBudgetNanoUsd: number | null;
}

/** One request asking to be admitted. */
export interface Admission {
  /** Unique per request (the request id); settling it twice counts once. */
  ticket: string;
  keyId: string;
  limits: KeyLimits;
  /** Tokens reserved: prompt tokens + the most completion tokens the request may produce. */
  tokens: number;
  /** Spend reserved, nano-USD: the cost of `tokens` at the model's prices. */
  nanoUsd: number;
}

/** The reference API's rate-limit headers' values; null where the key has no such limit. */
export interface RateLimitState {
  limitRequests: number | null;
  remainingRequests: number | null;
  /** Milliseconds until the request window has room for one more request again (0 when it has room now). */
  resetRequestsMs: number | null;
  limitTokens: number | null;
  remainingTokens: number | null;
  /** Milliseconds until the token window is back to full. */
  resetTokensMs: number | null;
}

export type AdmitResult =
  | { admitted: true; state: RateLimitState }
  | {
      admitted: false;
      /** `rate_limit_exceeded` for requests, tokens and concurrency; `insufficient_quota` for the daily budget. */
      code: "rate_limit_exceeded" | "insufficient_quota";
      /** Which limit refused it. */
      limit: "requests" | "tokens" | "concurrency" | "budget";
      /** When trying again can succeed, milliseconds (the `retry-after` header, rounded up to seconds). */
      retryAfterMs: number;
      state: RateLimitState;
    };

/** Used by a request that ended (completed, cancelled, failed, or cut by shutdown). */
export interface Usage {
  tokens: number;
  nanoUsd: number;
}

export interface LimitCounters {
  /**
   * Admits or refuses atomically (across the fleet for a shared store): a refused request reserves
   * nothing; an admitted one holds a concurrency slot and its token and spend reservations until
   * `settle`. Throws when the store cannot be reached (the server answers 503, fail closed).
   */
  admit(admission: Admission): Promise<AdmitResult>;
  /**
   * Replaces the ticket's reservations by what it used and frees its concurrency slot. Idempotent
   * per ticket; a ticket never admitted is ignored.
   */
  settle(ticket: string, used: Usage): Promise<void>;
  /** Releases connections and timers. */
  close(): Promise<void>;
}
