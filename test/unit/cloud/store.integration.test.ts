/**
 * The cloud store's contract, the same tests on both implementations: SQLite (kiln's file) and a
 * real Postgres server (test/support/servers/postgres.ts). Keys, the idempotent ledger with its
 * reservations, the settling of a dead replica's reservations, exact BIGINT sums, the usage report,
 * and (Postgres) migrations applied once when replicas start at once.
 */
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openPostgresStore } from "../../../src/cloud/store/postgres-store.js";
import { SqliteCloudStore } from "../../../src/cloud/store/sqlite-store.js";
import type { CloudStore, LedgerRow, Reservation } from "../../../src/cloud/store/store.js";
import { openDatabase } from "../../../src/catalogue/db.js";
import { startPostgres, type RunningPostgres } from "../../support/servers/postgres.js";

const PRICE = { inputNanoUsdPerMTok: 150_000_000, outputNanoUsdPerMTok: 600_000_000, nanoUsdPerAudioMinute: 0 };
const NO_LIMITS = { requestsPerMinute: null, tokensPerMinute: null, maxConcurrent: null, dailyBudgetNanoUsd: null };
const T0 = new Date("2030-03-04T10:00:00.000Z");
const at = (ms: number) => new Date(T0.getTime() + ms);

function row(requestId: string, over: Partial<LedgerRow> = {}): LedgerRow {
  return {
    requestId,
    keyId: "key_a",
    slug: "m1",
    artifactId: "art-1",
    promptTokens: 10,
    completionTokens: 20,
    audioMs: 0,
    price: PRICE,
    costNanoUsd: 13_500,
    settledFrom: "completed",
    replicaId: "r1",
    at: T0.toISOString(),
    ...over,
  };
}

function reservation(requestId: string, replicaId: string, over: Partial<Reservation> = {}): Reservation {
  return {
    requestId,
    keyId: "key_a",
    slug: "m1",
    artifactId: "art-1",
    promptTokens: 10,
    completionTokens: 100,
    audioMs: 0,
    price: PRICE,
    nanoUsd: 61_500,
    replicaId,
    at: T0.toISOString(),
    ...over,
  };
}

async function withKeys(store: CloudStore): Promise<void> {
  for (const id of ["key_a", "key_b"]) {
    await store.createKey({
      id,
      name: id,
      hash: `${id}-hash`.padEnd(64, "0"),
      prefix: "kiln-abcd",
      models: null,
      limits: { ...NO_LIMITS, dailyBudgetNanoUsd: 5_000_000_000 },
      expiresAt: null,
      // key_b is an admin key, key_a a client's.
      admin: id === "key_b",
    });
  }
}

let postgres: RunningPostgres | null = null;
beforeAll(async () => {
  postgres = await startPostgres();
}, 60_000);
afterAll(async () => {
  await postgres?.stop();
});

let fresh = 0;
/** Each test gets an empty database: a new SQLite file in memory, or a new Postgres database on the shared server. */
const implementations: Array<[string, () => Promise<CloudStore>]> = [
  ["sqlite", async () => new SqliteCloudStore(openDatabase({ path: ":memory:" }), true)],
  [
    "postgres",
    async () => {
      const name = `store_${process.pid}_${++fresh}`;
      const admin = new pg.Client({ connectionString: postgres!.url });
      await admin.connect();
      await admin.query(`CREATE DATABASE ${name}`);
      await admin.end();
      return openPostgresStore(postgres!.url.replace(/\/kiln$/, `/${name}`));
    },
  ],
];

describe.each(implementations)("the %s store", (_kind, open) => {
  it("keeps keys by hash with their limits; revoking twice reports false", async () => {
    const store = await open();
    try {
      await withKeys(store);
      const found = await store.keyByHash("key_a-hash".padEnd(64, "0"));
      expect(found).toMatchObject({ id: "key_a", prefix: "kiln-abcd", models: null, limits: { dailyBudgetNanoUsd: 5_000_000_000 }, revokedAt: null });
      expect(await store.keyByHash("nope")).toBeNull();
      expect(await store.revokeKey("key_a")).toBe(true);
      expect(await store.revokeKey("key_a")).toBe(false);
      expect((await store.keyByHash("key_a-hash".padEnd(64, "0")))!.revokedAt).not.toBeNull();
    } finally {
      await store.close();
    }
  });

  it("keeps whether a key is an admin key, as created, in its lookup and in the list", async () => {
    const store = await open();
    try {
      await withKeys(store);
      expect((await store.keyByHash("key_a-hash".padEnd(64, "0")))!.admin).toBe(false);
      expect((await store.keyByHash("key_b-hash".padEnd(64, "0")))!.admin).toBe(true);
      expect((await store.listKeys(T0)).map((k) => [k.id, k.admin])).toEqual([
        ["key_a", false],
        ["key_b", true],
      ]);
    } finally {
      await store.close();
    }
  });

  it("writes a request's ledger row once, however often it is written, and deletes its reservation", async () => {
    const store = await open();
    try {
      await withKeys(store);
      await store.reserve(reservation("req-1", "r1"));
      expect((await store.spendSince(T0)).get("key_a")).toBe(61_500n);
      await store.writeLedger([row("req-1")]);
      await store.writeLedger([row("req-1", { costNanoUsd: 999 })]);
      await store.writeLedger([row("req-1"), row("req-2", { keyId: "key_gone" })]);
      const byKey = await store.usage({ by: "key" });
      expect(byKey).toEqual([
        { group: "-", requests: 1, promptTokens: 10, completionTokens: 20, audioMs: 0, costNanoUsd: 13_500n },
        { group: "key_a", requests: 1, promptTokens: 10, completionTokens: 20, audioMs: 0, costNanoUsd: 13_500n },
      ]);
      expect((await store.spendSince(T0)).get("key_a")).toBe(13_500n);
    } finally {
      await store.close();
    }
  });

  it("sums money past 2^53 exactly, as bigint", async () => {
    const store = await open();
    try {
      await withKeys(store);
      const big = 4_000_000_000_000_001; // about $4M in nano-USD; three exceed Number.MAX_SAFE_INTEGER
      await store.writeLedger([1, 2, 3].map((i) => row(`big-${i}`, { costNanoUsd: big })));
      const [line] = await store.usage({ by: "model" });
      expect(line.costNanoUsd).toBe(12_000_000_000_000_003n);
      const listed = await store.listKeys(T0);
      expect(listed.find((k) => k.id === "key_a")).toMatchObject({
        spentTotalNanoUsd: 12_000_000_000_000_003n,
        spentTodayNanoUsd: 12_000_000_000_000_003n,
        lastUsedAt: T0.toISOString(),
      });
    } finally {
      await store.close();
    }
  });

  it("charges a silent replica's reservations once, from the reserved amount; a live replica's are left alone", async () => {
    const store = await open();
    try {
      await withKeys(store);
      await store.heartbeat("dead", T0);
      await store.heartbeat("alive", T0);
      await store.reserve(reservation("req-dead", "dead"));
      await store.reserve(reservation("req-alive", "alive"));
      await store.heartbeat("alive", at(14_000));
      expect(await store.settleOrphans(15_000, at(10_000))).toBe(0); // not silent long enough yet
      expect(await store.settleOrphans(15_000, at(16_000))).toBe(1);
      expect(await store.settleOrphans(15_000, at(17_000))).toBe(0);
      const [line] = await store.usage({ by: "key", keyId: "key_a" });
      expect(line).toMatchObject({ requests: 1, promptTokens: 10, completionTokens: 100, costNanoUsd: 61_500n });
      // The live one ends normally; the dead one's late write (a spool settled after a restart) is ignored.
      await store.writeLedger([row("req-alive"), row("req-dead", { costNanoUsd: 1 })]);
      const [after] = await store.usage({ by: "key", keyId: "key_a" });
      expect(after).toMatchObject({ requests: 2, costNanoUsd: 61_500n + 13_500n });
    } finally {
      await store.close();
    }
  });

  it("reports by model and by UTC day, filtered by key, model and time", async () => {
    const store = await open();
    try {
      await withKeys(store);
      await store.writeLedger([
        row("a", { at: "2030-03-03T23:59:59.999Z" }),
        row("b", { slug: "m2", keyId: "key_b", at: "2030-03-04T00:00:00.000Z" }),
        row("c", { at: "2030-03-04T12:00:00.000Z", audioMs: 2000, promptTokens: 0, completionTokens: 0, costNanoUsd: 200_000 }),
      ]);
      expect((await store.usage({ by: "day" })).map((l) => [l.group, l.requests, l.costNanoUsd])).toEqual([
        ["2030-03-03", 1, 13_500n],
        ["2030-03-04", 2, 213_500n],
      ]);
      expect((await store.usage({ by: "model", slug: "m1" })).map((l) => [l.group, l.requests, l.audioMs])).toEqual([["m1", 2, 2000]]);
      expect((await store.usage({ by: "key", keyId: "key_b" })).map((l) => l.group)).toEqual(["key_b"]);
      expect((await store.usage({ by: "model", since: "2030-03-04T00:00:00.000Z" })).map((l) => [l.group, l.requests])).toEqual([
        ["m1", 1],
        ["m2", 1],
      ]);
    } finally {
      await store.close();
    }
  });
});

describe("Postgres migrations", () => {
  it("are applied once when three replicas start at once", async () => {
    const admin = new pg.Client({ connectionString: postgres!.url });
    await admin.connect();
    await admin.query("CREATE DATABASE migrate_race");
    await admin.end();
    const url = postgres!.url.replace(/\/kiln$/, "/migrate_race");
    const stores = await Promise.all([1, 2, 3].map(() => openPostgresStore(url)));
    await Promise.all(stores.map((s) => s.close()));
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    const { rows } = await client.query("SELECT version FROM schema_migrations ORDER BY version");
    await client.end();
    expect(rows.map((r) => r.version)).toEqual(["001_cloud", "002_admin_keys", "003_batches", "004_responses"]);
  });
});

describe("an SQLite database from before cloud mode's ledger", () => {
  it("gets the new columns, and its float costs as nano-USD, once", async () => {
    const db = openDatabase({ path: ":memory:" });
    // The tables as they shipped before: no limits on keys, a float cost on usage.
    db.exec("DROP TABLE usage; DROP TABLE api_keys");
    db.exec(`CREATE TABLE api_keys (id TEXT PRIMARY KEY, name TEXT NOT NULL, key_hash TEXT NOT NULL UNIQUE, models_json TEXT,
      created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')), revoked_at TEXT)`);
    db.exec(`CREATE TABLE usage (request_id TEXT PRIMARY KEY, key_id TEXT REFERENCES api_keys (id) ON DELETE SET NULL, slug TEXT NOT NULL,
      prompt_tokens INTEGER NOT NULL DEFAULT 0, completion_tokens INTEGER NOT NULL DEFAULT 0, audio_seconds REAL NOT NULL DEFAULT 0,
      cost_usd REAL NOT NULL DEFAULT 0, created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')))`);
    db.exec("INSERT INTO usage (request_id, slug, prompt_tokens, completion_tokens, audio_seconds, cost_usd) VALUES ('old', 'm', 10, 5, 3, 0.0000135)");
    const store = new SqliteCloudStore(db);
    new SqliteCloudStore(db); // a second open changes nothing
    expect(await store.usage({ by: "model" })).toEqual([
      { group: "m", requests: 1, promptTokens: 10, completionTokens: 5, audioMs: 3000, costNanoUsd: 13_500n },
    ]);
    await withKeys(store);
    expect((await store.listKeys(T0)).map((k) => k.limits.dailyBudgetNanoUsd)).toEqual([5_000_000_000, 5_000_000_000]);
    // Its keys gained the admin column; the keys written since keep the flag.
    expect((await store.listKeys(T0)).map((k) => k.admin)).toEqual([false, true]);
    db.close();
  });
});
