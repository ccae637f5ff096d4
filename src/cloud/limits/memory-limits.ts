/**
 * {@link LimitCounters} kept in this process: right for one replica, wrong for a fleet (each
 * replica would grant the whole limit), which keeps them in Redis (`redis-limits.ts`) instead.
 * JavaScript runs one admit at a time, so each admit and settle is atomic without locks.
 */
import type { AdmitResult, Admission, KeyLimits, LimitCounters, RateLimitState, Usage } from "./limiter.js";
import { CONCURRENCY_RETRY_MS, DEFAULT_LEASE_MS, WINDOW_MS, inWindow, msUntilNextUtcDay, msUntilRoom, utcDay } from "./window.js";

export interface MemoryLimitsOptions {
  /**
   * Today's spend of a key already recorded when this process starts (the ledger's settled rows),
   * nano-USD, so a restart keeps the daily budget; asked once per key and UTC day. Default: 0.
   */
  spentToday?: (keyId: string) => number;
  /** The clock, ms since the epoch. Default: `Date.now`. */
  now?: () => number;
  /** How long a concurrency slot is held without a settle before it comes back, ms. Default: 5 minutes. */
  leaseMs?: number;
}

interface WindowEntry {
  atMs: number;
  amount: number;
}

interface KeyCounters {
  /** Admissions in the rolling window, oldest first (amount 1 each). */
  requests: WindowEntry[];
  /** Reserved (later: used) tokens in the rolling window, oldest first. */
  tokens: WindowEntry[];
  /** Concurrency slots held: ticket -> lease end, ms. */
  leases: Map<string, number>;
  /** The UTC day `spentNanoUsd` counts. */
  day: number;
  /** Spend of `day`: settled requests plus open reservations, nano-USD. */
  spentNanoUsd: number;
}

/** What an admitted, unsettled ticket reserved, to be corrected when it settles. */
interface OpenTicket {
  keyId: string;
  tokens: WindowEntry;
  nanoUsd: number;
  day: number;
}

export class MemoryLimits implements LimitCounters {
  private readonly keys = new Map<string, KeyCounters>();
  private readonly tickets = new Map<string, OpenTicket>();
  private readonly now: () => number;
  private readonly leaseMs: number;
  private readonly spentToday: (keyId: string) => number;

  constructor(options: MemoryLimitsOptions = {}) {
    this.now = options.now ?? Date.now;
    this.leaseMs = options.leaseMs ?? DEFAULT_LEASE_MS;
    this.spentToday = options.spentToday ?? (() => 0);
  }

  async admit(admission: Admission): Promise<AdmitResult> {
    const nowMs = this.now();
    const counters = this.countersOf(admission.keyId, nowMs);
    const { limits } = admission;
    if (this.tickets.has(admission.ticket)) return { admitted: true, state: stateOf(counters, limits, nowMs) };

    const refusal = refusalOf(counters, admission, nowMs);
    if (refusal) return { admitted: false, ...refusal, state: stateOf(counters, limits, nowMs) };

    const tokens = { atMs: nowMs, amount: admission.tokens };
    counters.requests.push({ atMs: nowMs, amount: 1 });
    counters.tokens.push(tokens);
    counters.leases.set(admission.ticket, nowMs + this.leaseMs);
    counters.spentNanoUsd += admission.nanoUsd;
    this.tickets.set(admission.ticket, { keyId: admission.keyId, tokens, nanoUsd: admission.nanoUsd, day: counters.day });
    return { admitted: true, state: stateOf(counters, limits, nowMs) };
  }

  async settle(ticket: string, used: Usage): Promise<void> {
    const open = this.tickets.get(ticket);
    if (!open) return;
    this.tickets.delete(ticket);
    open.tokens.amount = used.tokens;
    const counters = this.keys.get(open.keyId);
    if (!counters) return;
    counters.leases.delete(ticket);
    // A reservation from a day already over no longer counts against anything.
    if (counters.day === open.day) counters.spentNanoUsd += used.nanoUsd - open.nanoUsd;
  }

  async close(): Promise<void> {
    this.keys.clear();
    this.tickets.clear();
  }

  /** The key's counters with entries out of the window, expired leases and past days dropped. */
  private countersOf(keyId: string, nowMs: number): KeyCounters {
    const day = utcDay(nowMs);
    let counters = this.keys.get(keyId);
    if (!counters) {
      counters = { requests: [], tokens: [], leases: new Map(), day, spentNanoUsd: this.spentToday(keyId) };
      this.keys.set(keyId, counters);
    }
    if (counters.day !== day) {
      counters.day = day;
      counters.spentNanoUsd = this.spentToday(keyId);
    }
    dropOld(counters.requests, nowMs);
    dropOld(counters.tokens, nowMs);
    for (const [ticket, endMs] of counters.leases) if (endMs <= nowMs) counters.leases.delete(ticket);
    return counters;
  }
}

function dropOld(entries: WindowEntry[], nowMs: number): void {
  let old = 0;
  while (old < entries.length && !inWindow(entries[old].atMs, nowMs)) old++;
  entries.splice(0, old);
}

type Refusal = Omit<Extract<AdmitResult, { admitted: false }>, "admitted" | "state">;

/** The first limit the admission would break, in the order budget, requests, tokens, concurrency. */
function refusalOf(counters: KeyCounters, admission: Admission, nowMs: number): Refusal | null {
  const { limits } = admission;
  if (limits.dailyBudgetNanoUsd !== null && counters.spentNanoUsd + admission.nanoUsd > limits.dailyBudgetNanoUsd) {
    return { code: "insufficient_quota", limit: "budget", retryAfterMs: msUntilNextUtcDay(nowMs) };
  }
  if (limits.requestsPerMinute !== null) {
    const wait = msUntilRoom(counters.requests, 1, limits.requestsPerMinute, nowMs);
    if (wait > 0) return { code: "rate_limit_exceeded", limit: "requests", retryAfterMs: wait };
  }
  if (limits.tokensPerMinute !== null) {
    const wait = msUntilRoom(counters.tokens, admission.tokens, limits.tokensPerMinute, nowMs);
    if (wait > 0) return { code: "rate_limit_exceeded", limit: "tokens", retryAfterMs: wait };
  }
  if (limits.maxConcurrent !== null && counters.leases.size >= limits.maxConcurrent) {
    const firstEnd = Math.min(...counters.leases.values());
    return { code: "rate_limit_exceeded", limit: "concurrency", retryAfterMs: Math.min(CONCURRENCY_RETRY_MS, firstEnd - nowMs) };
  }
  return null;
}

function stateOf(counters: KeyCounters, limits: KeyLimits, nowMs: number): RateLimitState {
  const rpm = limits.requestsPerMinute;
  const tpm = limits.tokensPerMinute;
  const tokensUsed = counters.tokens.reduce((sum, e) => sum + e.amount, 0);
  const lastTokens = [...counters.tokens].reverse().find((e) => e.amount > 0);
  return {
    limitRequests: rpm,
    remainingRequests: rpm === null ? null : Math.max(0, rpm - counters.requests.length),
    resetRequestsMs: rpm === null ? null : msUntilRoom(counters.requests, 1, rpm, nowMs),
    limitTokens: tpm,
    remainingTokens: tpm === null ? null : Math.max(0, tpm - tokensUsed),
    resetTokensMs: tpm === null ? null : lastTokens ? lastTokens.atMs + WINDOW_MS - nowMs : 0,
  };
}
