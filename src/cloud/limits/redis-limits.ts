/**
 * {@link LimitCounters} in Redis (or Valkey), shared by every replica of a fleet so that a limit
 * holds for the fleet: admit and settle are each one Lua script (`redis-scripts.ts`), atomic
 * whichever replica runs it. Windows are exact (a log of the last 60 s per key), concurrency slots
 * are leases that come back after `leaseMs` when the replica that held one died, and the daily spend
 * is kept per UTC day. Fail closed: when Redis cannot be reached, `admit` throws at once (no queue
 * of commands waiting for a reconnect) and the server answers 503. One Redis (with replicas of its
 * own if wanted), not Redis Cluster: the settle script finds a ticket's key from the ticket.
 * The counters live only in Redis: a Redis restarted without persistence starts every window and
 * every key's daily spend from zero.
 */
import { createHash } from "node:crypto";
// Loaded when a server is started with Redis limits, so other servers never load the client.
import type { Redis } from "ioredis";
import type { AdmitResult, Admission, LimitCounters, RateLimitState, Usage } from "./limiter.js";
import { ADMIT_SCRIPT, SETTLE_SCRIPT } from "./redis-scripts.js";
import { CONCURRENCY_RETRY_MS, DEFAULT_LEASE_MS, WINDOW_MS } from "./window.js";

export interface RedisLimitsOptions {
  /** How long a concurrency slot is held without a settle before it comes back (a replica that died mid-request), ms. Default: 5 minutes. */
  leaseMs?: number;
  /** How long one Redis command may take before `admit` or `settle` fails, ms. Default: 2,000. */
  commandTimeoutMs?: number;
  /** Prefix of every Redis key this store writes. Default: `kiln:limits:`. */
  keyPrefix?: string;
  /** The clock, ms since the epoch, for tests. Default: the Redis server's clock (one clock for the whole fleet). */
  now?: () => number;
}

/** How long an unsettled ticket and a day's spend are kept, ms: past the end of the UTC day they count in. */
const RETENTION_MS = 2 * 86_400_000;

/** Connects to the Redis at `url` (`redis://[user:password@]host:port[/db]`, or `rediss://` for TLS); rejects when it cannot. */
export async function createRedisLimits(url: string, options: RedisLimitsOptions = {}): Promise<LimitCounters> {
  const timeoutMs = options.commandTimeoutMs ?? 2_000;
  const { Redis } = await import("ioredis");
  const redis = new Redis(url, {
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    connectTimeout: timeoutMs,
    commandTimeout: timeoutMs,
    // Keep reconnecting in the background, at most every 2 s; commands fail meanwhile (fail closed).
    retryStrategy: (attempt) => Math.min(attempt * 100, 2_000),
  });
  // Without a listener ioredis reports each failed reconnect as an unhandled error event.
  redis.on("error", () => {});
  try {
    await redis.connect();
  } catch (error) {
    redis.disconnect();
    throw new Error(`cannot reach Redis at ${redactedUrl(url)}: ${(error as Error).message}`);
  }
  return new RedisLimits(redis, options);
}

class RedisLimits implements LimitCounters {
  private readonly prefix: string;
  private readonly leaseMs: number;
  private readonly scripts: ScriptRunner;

  constructor(
    private readonly redis: Redis,
    private readonly options: RedisLimitsOptions,
  ) {
    this.prefix = options.keyPrefix ?? "kiln:limits:";
    this.leaseMs = options.leaseMs ?? DEFAULT_LEASE_MS;
    this.scripts = new ScriptRunner(redis);
  }

  async admit(admission: Admission): Promise<AdmitResult> {
    const { keyId, limits, ticket } = admission;
    const p = this.prefix;
    const reply = (await this.scripts.run(
      ADMIT_SCRIPT,
      5,
      `${p}req:${keyId}`,
      `${p}tok:${keyId}`,
      `${p}conc:${keyId}`,
      `${p}spend:${keyId}`,
      `${p}ticket:${ticket}`,
      this.options.now?.() ?? "",
      ticket,
      limits.requestsPerMinute ?? "",
      limits.tokensPerMinute ?? "",
      limits.maxConcurrent ?? "",
      limits.dailyBudgetNanoUsd ?? "",
      Math.round(admission.tokens),
      Math.round(admission.nanoUsd),
      this.leaseMs,
      WINDOW_MS,
      CONCURRENCY_RETRY_MS,
      RETENTION_MS,
      keyId,
    )) as [number, string, string, number, number, number, number, number];
    const [admitted, code, limit, retryAfterMs, remainingRequests, resetRequestsMs, remainingTokens, resetTokensMs] = reply;
    const nullable = (n: number) => (n < 0 ? null : n);
    const state: RateLimitState = {
      limitRequests: limits.requestsPerMinute,
      remainingRequests: nullable(remainingRequests),
      resetRequestsMs: nullable(resetRequestsMs),
      limitTokens: limits.tokensPerMinute,
      remainingTokens: nullable(remainingTokens),
      resetTokensMs: nullable(resetTokensMs),
    };
    if (admitted === 1) return { admitted: true, state };
    return {
      admitted: false,
      code: code as "rate_limit_exceeded" | "insufficient_quota",
      limit: limit as "requests" | "tokens" | "concurrency" | "budget",
      retryAfterMs,
      state,
    };
  }

  async settle(ticket: string, used: Usage): Promise<void> {
    await this.scripts.run(SETTLE_SCRIPT, 1, `${this.prefix}ticket:${ticket}`, this.prefix, ticket, Math.round(used.tokens), Math.round(used.nanoUsd));
  }

  async close(): Promise<void> {
    await this.redis.quit().catch(() => this.redis.disconnect());
  }
}

/** Runs a script by its SHA-1 (EVALSHA), sending its text only when Redis does not know it yet (NOSCRIPT: first use, or a restarted Redis). */
class ScriptRunner {
  private readonly shas = new Map<string, string>();

  constructor(private readonly redis: Redis) {}

  async run(script: string, keyCount: number, ...args: (string | number)[]): Promise<unknown> {
    let sha = this.shas.get(script);
    if (!sha) {
      sha = createHash("sha1").update(script).digest("hex");
      this.shas.set(script, sha);
    }
    try {
      return await this.redis.evalsha(sha, keyCount, ...args);
    } catch (error) {
      if (!String((error as Error).message).startsWith("NOSCRIPT")) throw error;
      return this.redis.eval(script, keyCount, ...args);
    }
  }
}

/** The URL without its password, for error messages and logs. */
function redactedUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = "***";
    return parsed.toString();
  } catch {
    return "(an unparsable URL)";
  }
}
