/**
 * The same semantic cases against both limit stores: in memory, and in a real `redis-server`
 * started for this file. A clock injected into both makes windows, leases and days testable
 * without waiting; the Redis cases each use a fresh key prefix.
 */
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Admission, KeyLimits, LimitCounters } from "../../../src/cloud/limits/limiter.js";
import { MemoryLimits } from "../../../src/cloud/limits/memory-limits.js";
import { createRedisLimits } from "../../../src/cloud/limits/redis-limits.js";
import { freePort } from "../../support/servers/free-port.js";
import { startRedis, type RunningRedis } from "../../support/servers/redis.js";

const NO_LIMITS: KeyLimits = { requestsPerMinute: null, tokensPerMinute: null, maxConcurrent: null, dailyBudgetNanoUsd: null };
/** 01:00 UTC on some day, so a day boundary is 23 h away. */
const DAY_START = Date.UTC(2026, 10, 23);
const T0 = DAY_START + 3_600_000;

interface Store {
  limits: LimitCounters;
  clock: { now: number };
}
type StoreFactory = (options: { leaseMs?: number }) => Promise<Store>;

let redis: RunningRedis;
const opened: LimitCounters[] = [];

beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await Promise.all(opened.map((l) => l.close()));
  await redis?.stop();
});

const memoryStore: StoreFactory = async ({ leaseMs }) => {
  const clock = { now: T0 };
  return { limits: new MemoryLimits({ now: () => clock.now, leaseMs }), clock };
};
const redisStore: StoreFactory = async ({ leaseMs }) => {
  const clock = { now: T0 };
  const limits = await createRedisLimits(redis.url, { now: () => clock.now, leaseMs, keyPrefix: `test:${randomUUID()}:` });
  opened.push(limits);
  return { limits, clock };
};

function admission(keyId: string, limits: Partial<KeyLimits>, reserve: { tokens?: number; nanoUsd?: number } = {}): Admission {
  return { ticket: randomUUID(), keyId, limits: { ...NO_LIMITS, ...limits }, tokens: reserve.tokens ?? 10, nanoUsd: reserve.nanoUsd ?? 1_000 };
}

describe.each([
  ["memory", memoryStore],
  ["redis", redisStore],
] as const)("%s limit counters", (_name, open) => {
  it("admits N requests per rolling minute and refuses the next with the wait until the oldest leaves", async () => {
    const { limits, clock } = await open({});
    const rpm = { requestsPerMinute: 3 };
    for (const at of [0, 10_000, 20_000]) {
      clock.now = T0 + at;
      const r = await limits.admit(admission("k", rpm));
      expect(r.admitted).toBe(true);
    }
    clock.now = T0 + 30_000;
    const refused = await limits.admit(admission("k", rpm));
    expect(refused).toMatchObject({ admitted: false, code: "rate_limit_exceeded", limit: "requests", retryAfterMs: 30_000 });
    expect(refused.state).toMatchObject({ limitRequests: 3, remainingRequests: 0, resetRequestsMs: 30_000 });
    // Another key has its own window.
    expect((await limits.admit(admission("other", rpm))).admitted).toBe(true);
    // The refusal reserved nothing: once the first admission leaves the window there is room for one.
    clock.now = T0 + 60_000;
    const next = await limits.admit(admission("k", rpm));
    expect(next).toMatchObject({ admitted: true, state: { remainingRequests: 0 } });
    expect((await limits.admit(admission("k", rpm))).admitted).toBe(false);
  });

  it("reserves tokens at admission and corrects them to what was used at settle", async () => {
    const { limits, clock } = await open({});
    const tpm = { tokensPerMinute: 100 };
    const first = admission("k", tpm, { tokens: 60 });
    expect(await limits.admit(first)).toMatchObject({ admitted: true, state: { limitTokens: 100, remainingTokens: 40, resetTokensMs: 60_000 } });
    clock.now += 5_000;
    const refused = await limits.admit(admission("k", tpm, { tokens: 50 }));
    expect(refused).toMatchObject({ admitted: false, code: "rate_limit_exceeded", limit: "tokens", retryAfterMs: 55_000 });
    await limits.settle(first.ticket, { tokens: 10, nanoUsd: 0 });
    expect(await limits.admit(admission("k", tpm, { tokens: 50 }))).toMatchObject({ admitted: true, state: { remainingTokens: 40, resetTokensMs: 60_000 } });
    // A request larger than the whole limit can never fit.
    expect(await limits.admit(admission("k", tpm, { tokens: 101 }))).toMatchObject({ admitted: false, limit: "tokens" });
  });

  it("frees a concurrency slot at settle, and after the lease when nobody settles", async () => {
    const { limits, clock } = await open({ leaseMs: 10_000 });
    const one = { maxConcurrent: 1 };
    const a = admission("k", one);
    expect((await limits.admit(a)).admitted).toBe(true);
    const refused = await limits.admit(admission("k", one));
    expect(refused).toMatchObject({ admitted: false, code: "rate_limit_exceeded", limit: "concurrency" });
    expect(refused.admitted === false && refused.retryAfterMs).toBeGreaterThan(0);
    await limits.settle(a.ticket, { tokens: 5, nanoUsd: 500 });
    expect((await limits.admit(admission("k", one))).admitted).toBe(true); // never settled: a replica died
    clock.now += 9_999;
    expect((await limits.admit(admission("k", one))).admitted).toBe(false);
    clock.now += 1;
    expect((await limits.admit(admission("k", one))).admitted).toBe(true);
  });

  it("refuses with insufficient_quota past the daily budget, until the next UTC day", async () => {
    const { limits, clock } = await open({});
    const budget = { dailyBudgetNanoUsd: 1_000_000 };
    const a = admission("k", budget, { nanoUsd: 600_000 });
    expect((await limits.admit(a)).admitted).toBe(true);
    const refused = await limits.admit(admission("k", budget, { nanoUsd: 600_000 }));
    expect(refused).toMatchObject({ admitted: false, code: "insufficient_quota", limit: "budget", retryAfterMs: DAY_START + 86_400_000 - clock.now });
    await limits.settle(a.ticket, { tokens: 3, nanoUsd: 100_000 });
    expect((await limits.admit(admission("k", budget, { nanoUsd: 600_000 }))).admitted).toBe(true);
    expect((await limits.admit(admission("k", budget, { nanoUsd: 300_001 }))).admitted).toBe(false);
    clock.now = DAY_START + 86_400_000;
    expect((await limits.admit(admission("k", budget, { nanoUsd: 900_000 }))).admitted).toBe(true);
  });

  it("counts a ticket settled twice once, and ignores a ticket never admitted", async () => {
    const { limits } = await open({});
    const budget = { dailyBudgetNanoUsd: 1_000, tokensPerMinute: 100 };
    const a = admission("k", budget, { nanoUsd: 500, tokens: 50 });
    expect((await limits.admit(a)).admitted).toBe(true);
    await limits.settle(a.ticket, { tokens: 20, nanoUsd: 100 });
    await limits.settle(a.ticket, { tokens: 20, nanoUsd: 100 });
    await limits.settle(randomUUID(), { tokens: 1_000, nanoUsd: 1_000_000 });
    // Spent 100 (not 100 - 400 - 400): 900 more fit, one more does not; 20 tokens used, 80 left.
    expect(await limits.admit(admission("k", budget, { nanoUsd: 900, tokens: 80 }))).toMatchObject({ admitted: true, state: { remainingTokens: 0 } });
    expect(await limits.admit(admission("k", budget, { nanoUsd: 1, tokens: 0 }))).toMatchObject({ admitted: false, code: "insufficient_quota" });
  });

  it("admits the same ticket once", async () => {
    const { limits } = await open({});
    const a = admission("k", { requestsPerMinute: 2 });
    expect((await limits.admit(a)).admitted).toBe(true);
    expect((await limits.admit(a)).admitted).toBe(true);
    expect((await limits.admit(admission("k", { requestsPerMinute: 2 }))).admitted).toBe(true);
  });

  it("reports null state for a key without limits", async () => {
    const { limits } = await open({});
    expect(await limits.admit(admission("k", {}))).toEqual({
      admitted: true,
      state: { limitRequests: null, remainingRequests: null, resetRequestsMs: null, limitTokens: null, remainingTokens: null, resetTokensMs: null },
    });
  });
});

describe("memory limit counters", () => {
  it("start the day from the spend recorded before a restart", async () => {
    const asked: string[] = [];
    const limits = new MemoryLimits({ now: () => T0, spentToday: (keyId) => (asked.push(keyId), 900) });
    const budget = { dailyBudgetNanoUsd: 1_000 };
    expect((await limits.admit(admission("k", budget, { nanoUsd: 200 }))).admitted).toBe(false);
    expect((await limits.admit(admission("k", budget, { nanoUsd: 100 }))).admitted).toBe(true);
    expect(asked).toEqual(["k"]);
  });
});

describe("redis limit counters", () => {
  it("share one limit between instances (the fleet), also under concurrent admits", async () => {
    const keyPrefix = `test:${randomUUID()}:`;
    const replicas = await Promise.all([0, 1, 2].map(() => createRedisLimits(redis.url, { keyPrefix })));
    opened.push(...replicas);
    const rpm = { requestsPerMinute: 7 };
    const results = await Promise.all(Array.from({ length: 30 }, (_, i) => replicas[i % 3].admit(admission("fleet", rpm))));
    expect(results.filter((r) => r.admitted)).toHaveLength(7);
    const refused = results.filter((r) => !r.admitted);
    expect(refused).toHaveLength(23);
    for (const r of refused) expect(r).toMatchObject({ code: "rate_limit_exceeded", limit: "requests" });
  });

  it("fail closed: admit throws when Redis is gone, and connecting to nothing rejects", async () => {
    const own = await startRedis();
    const limits = await createRedisLimits(own.url, { commandTimeoutMs: 500 });
    expect((await limits.admit(admission("k", {}))).admitted).toBe(true);
    await own.stop();
    await expect(limits.admit(admission("k", {}))).rejects.toThrow();
    await limits.close();
    const nothing = await freePort();
    await expect(createRedisLimits(`redis://127.0.0.1:${nothing}`, { commandTimeoutMs: 500 })).rejects.toThrow(/cannot reach Redis/);
  });
});
