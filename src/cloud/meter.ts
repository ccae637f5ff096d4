/**
 * Cloud mode in the request path: admission (the key's limits, and a reservation in the database
 * so that a request whose replica dies is still charged), the limit state the rate-limit headers
 * show, and the ledger row when the request ends. Also this replica's heartbeat, and the sweep that charges the
 * reservations of replicas that stopped beating.
 *
 * A request's life: `admit` (limits + reservation: prompt tokens plus the most completion tokens
 * it may produce, at the prices in force) → the work → `record` (the spooled recorder writes the
 * ledger row and deletes the reservation in one transaction; the limit counters are corrected to
 * what was used). A request admitted but refused by its engine is `release`d: nothing charged.
 */
import { randomBytes } from "node:crypto";
import type { ApiKeyInfo } from "./keys/key-store.js";
import type { AdmitResult, LimitCounters, RateLimitState } from "./limits/limiter.js";
import { costNanoUsd, priceOf as nanoPrice, scaledPrice, type Metered, type PriceInForce } from "./money.js";
import type { CloudStore } from "./store/store.js";
import type { UsageLog } from "./usage-spool.js";
import type { PriceLookup, UsageRecord, UsageRecorder } from "./usage.js";
import { DEFAULT_ORPHAN_AFTER_MS } from "./defaults.js";

/** Default milliseconds between heartbeats (and orphan sweeps): 5 s. */
export const DEFAULT_HEARTBEAT_MS = 5_000;

export { DEFAULT_ORPHAN_AFTER_MS };

export interface CloudMeterOptions {
  store: CloudStore;
  limits: LimitCounters;
  /** Writes the ledger rows (kiln serve: a spooled recorder over `store`). */
  recorder: UsageRecorder;
  priceOf: PriceLookup;
  /** This replica's id in the ledger and the heartbeats; default random. */
  replicaId?: string;
  /** Milliseconds between heartbeats; default {@link DEFAULT_HEARTBEAT_MS}. */
  heartbeatMs?: number;
  /** Milliseconds of silence after which a replica's reservations are charged by another; default {@link DEFAULT_ORPHAN_AFTER_MS}. */
  orphanAfterMs?: number;
  log?: UsageLog;
}

/** What a request asks to be admitted for. */
export interface AdmissionRequest {
  /** The answer's id: the ledger row's key and the limits' ticket. */
  requestId: string;
  slug: string;
  artifactId: string | null;
  promptTokens: number;
  /** The most completion tokens it may produce (all choices together). */
  maxCompletionTokens: number;
  /** Milliseconds of audio billed (transcriptions); 0 for text. */
  audioMs: number;
  /** What the model's prices are multiplied by for this request (a batch's requests pay the batch price); default 1. */
  priceFactor?: number;
}

/** The answer to an admission; `state`: the key's limits as they stand, null without them. */
export type AdmissionDecision =
  | { outcome: "admitted"; state: RateLimitState | null }
  | {
      outcome: "refused";
      state: RateLimitState;
      code: "rate_limit_exceeded" | "insufficient_quota";
      limit: "requests" | "tokens" | "concurrency" | "budget";
      retryAfterMs: number;
    }
  | { outcome: "unavailable"; store: "limits" | "ledger"; error: unknown; state: RateLimitState | null };

const quietLog: UsageLog = { info: () => undefined, warn: () => undefined, error: () => undefined };

export class CloudMeter implements UsageRecorder {
  readonly replicaId: string;
  private readonly open = new Map<string, { price: PriceInForce }>();
  /** The latest limit state seen per key: the headers of answers that were not admitted through the limits (errors, /v1/models). */
  private readonly lastState = new Map<string, RateLimitState>();
  private readonly log: UsageLog;
  private timer: NodeJS.Timeout | null = null;
  private beating: Promise<void> | null = null;

  constructor(private readonly options: CloudMeterOptions) {
    this.replicaId = options.replicaId ?? `replica-${randomBytes(6).toString("hex")}`;
    this.log = options.log ?? quietLog;
  }

  /** Beats once (throws when the database cannot be reached), then keeps beating and sweeping. */
  async start(): Promise<void> {
    await this.options.store.heartbeat(this.replicaId, new Date());
    this.timer = setInterval(() => void this.beat(), this.options.heartbeatMs ?? DEFAULT_HEARTBEAT_MS);
    this.timer.unref();
  }

  /** One heartbeat and one sweep of dead replicas' reservations; failures are logged and retried next time. */
  beat(): Promise<void> {
    this.beating ??= (async () => {
      const now = new Date();
      try {
        await this.options.store.heartbeat(this.replicaId, now);
        const charged = await this.options.store.settleOrphans(this.options.orphanAfterMs ?? DEFAULT_ORPHAN_AFTER_MS, now);
        if (charged > 0) this.log.warn({ charged }, "cloud: charged the reservations of requests whose replica stopped (settled_from = reservation)");
      } catch (err) {
        this.log.error({ err }, "cloud: heartbeat failed (database unreachable?); retrying");
      } finally {
        this.beating = null;
      }
    })();
    return this.beating;
  }

  /**
   * Admits the request for its key, or says why not: a limit (`refused`), or the limits or the
   * database unreachable (`unavailable`: the caller fails closed). A key without limits (local
   * mode) is admitted with nothing reserved.
   */
  async admit(key: ApiKeyInfo, what: AdmissionRequest): Promise<AdmissionDecision> {
    if (!key.id || !key.limits) return { outcome: "admitted", state: null };
    const price = scaledPrice(nanoPrice(this.options.priceOf(what.slug)), what.priceFactor ?? 1);
    const reserved: Metered = { promptTokens: what.promptTokens, completionTokens: what.maxCompletionTokens, audioMs: what.audioMs };
    const nanoUsd = costNanoUsd(price, reserved);
    let result: AdmitResult;
    try {
      result = await this.options.limits.admit({
        ticket: what.requestId,
        keyId: key.id,
        limits: key.limits,
        tokens: what.promptTokens + what.maxCompletionTokens,
        nanoUsd,
      });
    } catch (error) {
      return { outcome: "unavailable", store: "limits", error, state: null };
    }
    this.lastState.set(key.id, result.state);
    if (!result.admitted) return { outcome: "refused", state: result.state, code: result.code, limit: result.limit, retryAfterMs: result.retryAfterMs };
    try {
      await this.options.store.reserve({
        requestId: what.requestId,
        keyId: key.id,
        slug: what.slug,
        artifactId: what.artifactId,
        ...reserved,
        price,
        nanoUsd,
        replicaId: this.replicaId,
        at: new Date().toISOString(),
      });
    } catch (error) {
      await this.options.limits.settle(what.requestId, { tokens: 0, nanoUsd: 0 }).catch(() => undefined);
      return { outcome: "unavailable", store: "ledger", error, state: result.state };
    }
    this.open.set(what.requestId, { price });
    return { outcome: "admitted", state: result.state };
  }

  /** A request admitted but never run (its engine refused it): its reservation and limits are given back, nothing is charged. */
  async release(requestId: string): Promise<void> {
    if (!this.open.delete(requestId)) return;
    await Promise.allSettled([this.options.store.releaseReservation(requestId), this.options.limits.settle(requestId, { tokens: 0, nanoUsd: 0 })]);
  }

  /** The ledger row of an ended request, at the prices it was admitted at; the limits corrected to what it used. */
  record(usage: UsageRecord): void {
    const admitted = this.open.get(usage.requestId);
    this.open.delete(usage.requestId);
    const price = admitted?.price ?? nanoPrice(this.options.priceOf(usage.slug));
    const used: Metered = { promptTokens: usage.promptTokens, completionTokens: usage.completionTokens, audioMs: Math.round((usage.audioSeconds ?? 0) * 1000) };
    const cost = costNanoUsd(price, used);
    this.options.recorder.record({ ...usage, price, costNanoUsd: cost, replicaId: this.replicaId });
    if (admitted) {
      this.options.limits.settle(usage.requestId, { tokens: used.promptTokens + used.completionTokens, nanoUsd: cost }).catch((err: unknown) => {
        this.log.error({ err, requestId: usage.requestId }, "cloud: cannot correct the limit counters (they expire on their own)");
      });
    }
  }

  admits(): boolean {
    return this.options.recorder.admits?.() ?? true;
  }

  /** The key's limit state as last seen on this replica, or its full window when none was; null for a key without limits. */
  lastKnownState(key: ApiKeyInfo): RateLimitState | null {
    return (key.id ? this.lastState.get(key.id) : undefined) ?? stateOfLimits(key);
  }

  /** Stops beating; waits for the recorder's last writes; closes the limits. The store is its owner's to close. */
  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.beating;
    await this.options.recorder.close?.();
    await this.options.limits.close();
  }
}

/** A key's limits as a full window's state (no request seen yet on this replica). */
function stateOfLimits(key: ApiKeyInfo): RateLimitState | null {
  const l = key.limits;
  if (!l) return null;
  return {
    limitRequests: l.requestsPerMinute,
    remainingRequests: l.requestsPerMinute,
    resetRequestsMs: l.requestsPerMinute === null ? null : 0,
    limitTokens: l.tokensPerMinute,
    remainingTokens: l.tokensPerMinute,
    resetTokensMs: l.tokensPerMinute === null ? null : 0,
  };
}
