/**
 * Stored responses' retention, the same contract on both stores: kiln's SQLite records database and
 * cloud mode's Postgres (a real server, test/support/servers/postgres.ts), where a fleet shares
 * them. At most maxCount responses (the oldest deleted first, with their items), none older than
 * maxAgeSeconds, nothing with maxCount 0, and a key's responses and items found only with it.
 */
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase } from "../../../src/catalogue/db.js";
import { SqliteResponseStore, type ResponseRetention, type ResponseStore } from "../../../src/catalogue/stored-responses.js";
import { openPostgresStore } from "../../../src/cloud/store/postgres-store.js";
import { PostgresResponseStore } from "../../../src/cloud/store/postgres-responses.js";
import { startPostgres, type RunningPostgres } from "../../support/servers/postgres.js";

let postgres: RunningPostgres | null = null;
const pools: pg.Pool[] = [];
beforeAll(async () => {
  postgres = await startPostgres();
}, 60_000);
afterAll(async () => {
  for (const pool of pools) await pool.end();
  await postgres?.stop();
});

/** The clock the stores read, milliseconds; tests move it. */
let nowMs = Date.UTC(2030, 2, 4, 10);
const clock = () => nowMs;

let fresh = 0;
/** A store over an empty database: SQLite in memory, or a new Postgres database (migrated as a replica would) on the shared server. */
const implementations: Array<[string, (retention: ResponseRetention) => Promise<ResponseStore>]> = [
  ["sqlite", async (retention) => new SqliteResponseStore(openDatabase({ path: ":memory:", seed: false }), retention, clock)],
  [
    "postgres",
    async (retention) => {
      const name = `responses_${process.pid}_${++fresh}`;
      const admin = new pg.Client({ connectionString: postgres!.url });
      await admin.connect();
      await admin.query(`CREATE DATABASE ${name}`);
      await admin.end();
      const url = postgres!.url.replace(/\/kiln$/, `/${name}`);
      await (await openPostgresStore(url)).close();
      const pool = new pg.Pool({ connectionString: url, max: 2 });
      pools.push(pool);
      return new PostgresResponseStore(pool, retention, clock);
    },
  ],
];

const stored = (id: string, createdAt: number, keyId: string | null = null) => ({
  id,
  keyId,
  createdAt,
  response: { id, output: [{ id: `msg_${id}`, type: "message" }] },
  input: [{ id: `in_${id}`, type: "message" }],
});

describe.each(implementations)("the %s response store", (_kind, open) => {
  it("keeps at most maxCount responses, deleting the oldest first, with their items", async () => {
    const store = await open({ maxCount: 2 });
    const now = Math.floor(nowMs / 1000);
    for (const [i, id] of ["r1", "r2", "r3"].entries()) await store.save(stored(id, now + i));
    expect(await store.count()).toBe(2);
    expect(await store.get("r1", null)).toBeNull();
    expect((await store.get("r3", null))?.input).toEqual([{ id: "in_r3", type: "message" }]);
    expect(await store.item("msg_r1", null)).toBeNull();
    expect(await store.item("msg_r2", null)).toEqual({ id: "msg_r2", type: "message" });
  });

  it("hides and deletes responses older than maxAgeSeconds", async () => {
    const store = await open({ maxAgeSeconds: 60 });
    const start = Math.floor(nowMs / 1000);
    await store.save(stored("old", start));
    nowMs += 61_000;
    expect(await store.get("old", null)).toBeNull();
    expect(await store.item("msg_old", null)).toBeNull();
    expect(await store.delete("old", null)).toBe(false);
    await store.save(stored("new", start + 61));
    expect(await store.count()).toBe(1);
    expect(await store.get("new", null)).not.toBeNull();
  });

  it("keeps nothing with maxCount 0", async () => {
    const store = await open({ maxCount: 0 });
    await store.save(stored("r1", Math.floor(nowMs / 1000)));
    expect(await store.count()).toBe(0);
  });

  it("finds a key's response and its items only with that key, and deletes it once", async () => {
    const store = await open({});
    await store.save(stored("ra", Math.floor(nowMs / 1000), "key_a"));
    expect(await store.get("ra", "key_b")).toBeNull();
    expect(await store.get("ra", null)).toBeNull();
    expect(await store.item("in_ra", "key_b")).toBeNull();
    expect(await store.item("in_ra", "key_a")).toEqual({ id: "in_ra", type: "message" });
    expect(await store.delete("ra", "key_b")).toBe(false);
    expect(await store.delete("ra", "key_a")).toBe(true);
    expect(await store.delete("ra", "key_a")).toBe(false);
    expect(await store.item("in_ra", "key_a")).toBeNull();
  });
});
