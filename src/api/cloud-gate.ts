/**
 * Cloud mode at the HTTP door: a request is admitted through the {@link Metering} of its key, and
 * the answer becomes HTTP here: the rate-limit headers on every answer after auth, a refusal as
 * 429 (`retry-after`), a limit or ledger store that cannot be reached as 503 (fail closed).
 */
import type { FastifyReply, FastifyRequest } from "fastify";
import type { AdmissionDecision, AdmissionRequest, Metering } from "./cloud-port.js";
import { ApiError, apiError } from "./errors.js";
import { rateLimitHeaders, retryAfterSeconds } from "./rate-limit-headers.js";
import { DEFAULT_BATCH_PRICE } from "./defaults.js";

export class CloudGate {
  /** @param batchPrice what a batch's request pays, as a fraction of the model's prices */
  constructor(
    private readonly metering: Metering,
    private readonly batchPrice: number = DEFAULT_BATCH_PRICE,
  ) {}

  /**
   * Admits the request for its key, or throws 429 (a limit) or 503 (the limits or the database
   * unreachable). Sets the rate-limit headers either way. Does nothing for a request without a
   * cloud key (local mode).
   */
  async admit(request: FastifyRequest, reply: FastifyReply, what: AdmissionRequest): Promise<void> {
    const key = request.apiKey;
    if (!key) return;
    const decision = await this.metering.admit(key, key.batch ? { ...what, priceFactor: this.batchPrice } : what);
    if (decision.state) reply.headers(rateLimitHeaders(decision.state));
    if (decision.outcome === "refused") throw refusal(decision);
    if (decision.outcome === "unavailable") {
      if (decision.store === "limits") {
        request.log.error({ err: decision.error }, "cloud: the limit counters cannot be reached; refusing requests until they can");
        throw apiError("limits_unavailable", "The server cannot check rate limits right now (its limit store is unreachable); retry in a moment.");
      }
      request.log.error({ err: decision.error }, "cloud: cannot write the request's reservation (database unreachable?); refused");
      throw apiError("ledger_unavailable", "The server cannot record usage right now, so it is not taking metered requests; retry in a moment.");
    }
  }

  /** A request admitted but never run (its engine refused it): nothing is charged. */
  release(requestId: string): Promise<void> {
    return this.metering.release(requestId);
  }

  /** The last known rate-limit headers of the request's key, for an answer that did not pass admission (unless it has them already). */
  addLastKnownHeaders(request: FastifyRequest, reply: FastifyReply): void {
    const key = request.apiKey;
    if (!key?.id || reply.hasHeader("x-ratelimit-limit-requests") || reply.hasHeader("x-ratelimit-limit-tokens")) return;
    const state = this.metering.lastKnownState(key);
    if (state) reply.headers(rateLimitHeaders(state));
  }
}

function refusal({ code, limit, retryAfterMs }: Extract<AdmissionDecision, { outcome: "refused" }>): ApiError {
  const retryAfter = retryAfterSeconds(retryAfterMs);
  if (code === "insufficient_quota") {
    return new ApiError(
      "insufficient_quota",
      "You exceeded your current quota: this API key's daily budget is spent. It is renewed at 00:00 UTC.",
      null,
      retryAfter,
    );
  }
  const what = { requests: "requests per minute", tokens: "tokens per minute", concurrency: "concurrent requests", budget: "daily budget" }[limit];
  return new ApiError(
    limit === "tokens" ? "token_rate_limit_exceeded" : "rate_limit_exceeded",
    `Rate limit reached for this API key on ${what}. Please try again in ${retryAfter}s.`,
    null,
    retryAfter,
  );
}
