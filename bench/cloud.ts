/**
 * Cloud mode's overhead: the same fleet of `kiln serve` replicas behind nginx, measured in local
 * mode (any key: the peer) and in cloud mode (API keys, limit counters in Redis, the usage ledger in
 * Postgres), under the same steady load of tiny requests. The difference of the latencies is what
 * auth + limits + ledger cost per request.
 *
 *   npm run bench -- cloud [--replicas 3] [--rate 200[,r2...]] [--seconds 15] [--warmup 3] [--threads 1]
 *                          [--model smollm2-135m-instruct] [--skip-local] [--stores-only]
 *                          [--writers 16] [--store-seconds 5]
 *
 * Workload: open loop, one non-streaming chat completion with `max_tokens` 1 every 1/rate s
 * whatever the answers, so a slow server is not given time to recover (no coordinated omission);
 * latency runs from the request's scheduled time to its full response. Only requests scheduled
 * after the warm-up count. Each rate of `--rate` runs in turn on the same fleet; a rate the fleet
 * cannot keep up with is reported as such (its latencies then measure the queue, not the overhead). Postgres, Redis and nginx are the real servers of test/support/servers,
 * each in a temporary directory; the cloud key has no limits, so every request is admitted and
 * recorded. The ledger's write rate is counted in the database itself: rows inserted per second
 * over the load, read with `count(*)` before and after (and once a second, for the peak). Last, the
 * ledger store's own capacity: `--writers` concurrent writers against the Postgres store directly,
 * each doing per "request" what a replica does (a reservation at admission, then the ledger row in
 * a transaction that deletes it), for `--store-seconds`; rows/s written.
 */
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { parseArgs, promisify } from "node:util";
import pg from "pg";
import { createRedisLimits, openCloudStore, type CloudStore } from "../src/cloud/index.js";
import { getModel } from "../src/catalogue/catalogue.js";
import { costNanoUsd, priceOf } from "../src/cloud/money.js";
import { startFleet, type CloudSettings } from "../test/support/servers/fleet.js";
import { startPostgres } from "../test/support/servers/postgres.js";
import { startRedis } from "../test/support/servers/redis.js";

const { values: args } = parseArgs({
  options: {
    replicas: { type: "string", default: "3" },
    rate: { type: "string", default: "200" },
    seconds: { type: "string", default: "15" },
    warmup: { type: "string", default: "3" },
    threads: { type: "string", default: "1" },
    model: { type: "string", default: "smollm2-135m-instruct" },
    "skip-local": { type: "boolean", default: false },
    "stores-only": { type: "boolean", default: false },
    writers: { type: "string", default: "16" },
    "store-seconds": { type: "string", default: "5" },
  },
  allowPositionals: true,
});
const replicas = positiveNumber("replicas", args.replicas!);
const rates = args.rate!.split(",").map((r) => positiveNumber("rate", r.trim()));
const seconds = positiveNumber("seconds", args.seconds!);
const warmupS = Number(args.warmup);
const threads = positiveNumber("threads", args.threads!);
const slug = args.model!;
const writers = positiveNumber("writers", args.writers!);
const storeSeconds = positiveNumber("store-seconds", args["store-seconds"]!);

/** The ledger's table (src/cloud): one row per request. */
const LEDGER_TABLE = "usage_ledger";

function positiveNumber(name: string, v: string): number {
  const n = Number(v);
  if (!(n > 0)) throw new Error(`--${name} must be a positive number, not ${v}`);
  return n;
}

const log = (s: string) => process.stderr.write(`${s}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function percentile(xs: number[], p: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const r = (p / 100) * (s.length - 1);
  return s[Math.floor(r)] + (s[Math.ceil(r)] - s[Math.floor(r)]) * (r - Math.floor(r));
}

interface LoadResult {
  rate: number;
  latenciesMs: number[];
  /** Non-2xx answers and failed connections of measured requests, by status ("error" for no answer). */
  failures: Record<string, number>;
  sent: number;
  /** Wall time from the first measured request's schedule to the last answer, s (`seconds` plus the final lag). */
  wallS: number;
  /** When the last answer came (ms since the epoch), for the ledger's count. */
  measuredTo: number;
}

/** Open-loop load at `rate` requests/s for warm-up + `seconds`; resolves when every answer is in. */
async function steadyLoad(baseUrl: string, key: string, rate: number): Promise<LoadResult> {
  const body = JSON.stringify({ model: slug, messages: [{ role: "user", content: "Say hi." }], max_tokens: 1, temperature: 0 });
  const headers = { "content-type": "application/json", authorization: `Bearer ${key}` };
  const total = Math.round((warmupS + seconds) * rate);
  const warmupCount = Math.round(warmupS * rate);
  const latenciesMs: number[] = [];
  const failures: Record<string, number> = {};
  const pending: Promise<void>[] = [];
  const t0 = performance.now() + 50;
  for (let i = 0; i < total; i++) {
    const scheduled = t0 + (i * 1000) / rate;
    const wait = scheduled - performance.now();
    if (wait > 1) await sleep(wait);
    const measured = i >= warmupCount;
    pending.push(
      fetch(`${baseUrl}/v1/chat/completions`, { method: "POST", headers, body })
        .then(async (res) => {
          await res.arrayBuffer();
          if (!measured) return;
          if (res.ok) latenciesMs.push(performance.now() - scheduled);
          else failures[res.status] = (failures[res.status] ?? 0) + 1;
        })
        .catch(() => {
          if (measured) failures.error = (failures.error ?? 0) + 1;
        }),
    );
  }
  await Promise.all(pending);
  return {
    rate,
    latenciesMs,
    failures,
    sent: total - warmupCount,
    wallS: (performance.now() - (t0 + (warmupCount * 1000) / rate)) / 1000,
    measuredTo: Date.now(),
  };
}

/** Seconds the last answer may come after the last request was sent for the fleet to count as keeping up. */
const MAX_FINAL_LAG_S = 5;

interface Latency {
  p50: number;
  p99: number;
  /** Whether every measured request succeeded with no queue left at the end (else the figures measure a queue). */
  keptUp: boolean;
}

function summary(name: string, r: LoadResult): Latency {
  const p50 = percentile(r.latenciesMs, 50);
  const p99 = percentile(r.latenciesMs, 99);
  const failed =
    Object.entries(r.failures)
      .map(([k, n]) => `${n}x ${k}`)
      .join(", ") || "none";
  // A fleet slower than the offered rate builds a queue: every request answered, but the last ones long after they were sent.
  const lagS = r.wallS - seconds;
  const keptUp = r.latenciesMs.length === r.sent && lagS <= MAX_FINAL_LAG_S;
  log(
    `${name.padEnd(6)} ${r.rate}/s: sent ${r.sent}; ok ${r.latenciesMs.length}; failed ${failed}; last answer ${lagS.toFixed(1)} s after the last send; ` +
      `latency p50 ${p50.toFixed(1)} ms, p99 ${p99.toFixed(1)} ms${keptUp ? "" : "  (the fleet did NOT keep up with this rate)"}`,
  );
  return { p50, p99, keptUp };
}

const runKiln = (argv: string[], env: NodeJS.ProcessEnv) =>
  promisify(execFile)(process.execPath, ["bin/kiln.mjs", ...argv], { env: { ...process.env, ...env } });

async function ledgerRows(client: pg.Client): Promise<number> {
  const { rows } = await client.query(`SELECT count(*)::int AS n FROM ${LEDGER_TABLE}`);
  return rows[0].n as number;
}

/** p50 and p99 of `steps` sequential calls of `one`, ms. */
async function sequentialLatency(steps: number, one: (i: number) => Promise<void>): Promise<{ p50: number; p99: number }> {
  const ms: number[] = [];
  for (let i = 0; i < steps; i++) {
    const t = performance.now();
    await one(i);
    ms.push(performance.now() - t);
  }
  return { p50: percentile(ms, 50), p99: percentile(ms, 99) };
}

/** Rows/s the store takes when each of `writers` writers reserves and then writes one ledger row per request, back to back. */
async function storeCapacity(store: CloudStore, keyId: string): Promise<number> {
  const price = priceOf(getModel(slug));
  const used = { promptTokens: 30, completionTokens: 1, audioMs: 0 };
  const nanoUsd = costNanoUsd(price, used);
  let rows = 0;
  const end = performance.now() + storeSeconds * 1000;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: writers }, async (_, w) => {
      for (let i = 0; performance.now() < end; i++) {
        const requestId = `bench-${w}-${i}-${randomBytes(4).toString("hex")}`;
        const common = { requestId, keyId, slug, artifactId: null, ...used, price, replicaId: "bench", at: new Date().toISOString() };
        await store.reserve({ ...common, nanoUsd });
        await store.writeLedger([{ ...common, costNanoUsd: nanoUsd, settledFrom: "completed" }]);
        rows++;
      }
    }),
  );
  return rows / ((performance.now() - t0) / 1000);
}

// ── local mode: the peer ──────────────────────────────────────────────────────────────────────

const serveArgs = ["--threads", String(threads)];
const local = new Map<number, Latency>();
const storesOnly = args["stores-only"]!;
if (!args["skip-local"] && !storesOnly) {
  log(`local mode: ${replicas} replica(s) of ${slug} behind nginx ...`);
  const fleet = await startFleet({ replicas, slug, cloud: null, serveArgs });
  try {
    for (const rate of rates) local.set(rate, summary("local", await steadyLoad(fleet.url, "local", rate)));
  } finally {
    await fleet.stop();
  }
}

// ── cloud mode: keys, limits in Redis, ledger in Postgres ─────────────────────────────────────

log(storesOnly ? "cloud stores: Postgres, Redis ..." : `cloud mode: Postgres, Redis, ${replicas} replica(s) behind nginx ...`);
const postgres = await startPostgres();
const redis = await startRedis();
try {
  const cloud: CloudSettings = { databaseUrl: postgres.url, limitsUrl: redis.url, keySecret: randomBytes(32).toString("hex") };
  const secretEnv = { KILN_KEY_SECRET: cloud.keySecret };
  const fleet = storesOnly ? null : await startFleet({ replicas, slug, cloud, serveArgs });
  const db = new pg.Client(postgres.url);
  await db.connect();
  try {
    const created = await runKiln(["keys", "create", "--name", "bench", "--database", postgres.url, "--json"], secretEnv);
    const { key } = JSON.parse(created.stdout) as { key: string };
    for (const rate of rates) {
      if (!fleet) break;
      const before = await ledgerRows(db);
      let peak = 0;
      let last = before;
      const poll = setInterval(() => {
        void ledgerRows(db).then((n) => {
          peak = Math.max(peak, n - last);
          last = n;
        });
      }, 1_000);
      const loadStart = Date.now();
      const result = await steadyLoad(fleet.url, key, rate);
      await sleep(1_000); // rows of the last answers may still be on their way to the database
      clearInterval(poll);
      const rows = (await ledgerRows(db)) - before;
      const cloudLatency = summary("cloud", result);
      const loadS = (result.measuredTo - loadStart) / 1000;
      log(
        `ledger ${rate}/s: ${rows} rows inserted for ${Math.round((warmupS + seconds) * rate)} requests sent: ${(rows / loadS).toFixed(1)} rows/s over the ${loadS.toFixed(1)} s of load (peak ${peak} rows in one second)`,
      );
      const peer = local.get(rate);
      if (peer) {
        const caveat = peer.keptUp && cloudLatency.keptUp ? "" : "  (a mode did not keep up: this is queueing, not overhead)";
        log(
          `overhead of auth + limits + ledger at ${rate}/s (cloud - local): p50 ${(cloudLatency.p50 - peer.p50).toFixed(1)} ms, p99 ${(cloudLatency.p99 - peer.p99).toFixed(1)} ms${caveat}`,
        );
      }
    }
  } finally {
    await db.end();
    await fleet?.stop();
  }
  const store = await openCloudStore(postgres.url);
  try {
    const { stdout } = await runKiln(["keys", "create", "--name", "bench-store", "--database", postgres.url, "--json"], secretEnv);
    const { id } = JSON.parse(stdout) as { id: string };
    // The parts of the overhead on their own, one call at a time: what a request waits for in each store.
    const limits = await createRedisLimits(redis.url);
    const keyLimits = { requestsPerMinute: 1e9, tokensPerMinute: null, maxConcurrent: 1e6, dailyBudgetNanoUsd: null };
    const limitsTime = await sequentialLatency(1_000, async (i) => {
      await limits.admit({ ticket: `bench-limits-${i}`, keyId: id, limits: keyLimits, tokens: 31, nanoUsd: 10 });
      await limits.settle(`bench-limits-${i}`, { tokens: 31, nanoUsd: 10 });
    });
    await limits.close();
    log(`limits (Redis), admit + settle: p50 ${limitsTime.p50.toFixed(2)} ms, p99 ${limitsTime.p99.toFixed(2)} ms (1,000 in a row)`);
    const price = priceOf(getModel(slug));
    const ledgerTime = await sequentialLatency(500, async (i) => {
      const common = {
        requestId: `bench-seq-${i}`,
        keyId: id,
        slug,
        artifactId: null,
        promptTokens: 30,
        completionTokens: 1,
        audioMs: 0,
        price,
        replicaId: "bench",
        at: new Date().toISOString(),
      };
      await store.reserve({ ...common, nanoUsd: 10 });
      await store.writeLedger([{ ...common, costNanoUsd: 10, settledFrom: "completed" }]);
    });
    log(`ledger (Postgres), reservation + ledger row: p50 ${ledgerTime.p50.toFixed(2)} ms, p99 ${ledgerTime.p99.toFixed(2)} ms (500 in a row)`);
    const perSecond = await storeCapacity(store, id);
    log(
      `ledger store capacity: ${perSecond.toFixed(0)} rows/s (${writers} writers, each a reservation then its ledger row, for ${storeSeconds} s; no model running)`,
    );
  } finally {
    await store.close();
  }
} finally {
  await redis.stop();
  await postgres.stop();
}
