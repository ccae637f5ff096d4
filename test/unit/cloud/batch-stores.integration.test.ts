/**
 * The Files and Batch APIs' stores, the same contract on both implementations: kiln's SQLite
 * records database and cloud mode's Postgres (a real server, test/support/servers/postgres.ts),
 * where a fleet shares them. Files by key, in order, by pages, past their expiry; batches by key and
 * by pages, atomic changes, the runners' leases (taken, renewed, released, taken over once ended),
 * and each line's answer counted once however often it is recorded.
 */
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase } from "../../../src/catalogue/db.js";
import { SqliteBatchStore, type BatchObject, type BatchStore } from "../../../src/catalogue/stored-batches.js";
import { SqliteFileStore, type FileStore } from "../../../src/catalogue/stored-files.js";
import { openPostgresStore } from "../../../src/cloud/store/postgres-store.js";
import { PostgresBatchStore, PostgresFileStore } from "../../../src/cloud/store/postgres-batches.js";
import { startPostgres, type RunningPostgres } from "../../support/servers/postgres.js";

let postgres: RunningPostgres | null = null;
const closers: Array<() => Promise<void>> = [];
beforeAll(async () => {
  postgres = await startPostgres();
}, 60_000);
afterAll(async () => {
  for (const close of closers) await close();
  await postgres?.stop();
});

/** The clock the stores read, milliseconds; tests move it. */
let now = Date.UTC(2030, 2, 4, 10);
const clock = () => now;

let fresh = 0;
/** Each test gets empty stores: SQLite in memory, or a new Postgres database (migrated as a replica would) on the shared server. */
const implementations: Array<[string, () => Promise<{ files: FileStore; batches: BatchStore }>]> = [
  [
    "sqlite",
    async () => {
      const db = openDatabase({ path: ":memory:", seed: false });
      return { files: new SqliteFileStore(db, clock), batches: new SqliteBatchStore(db, clock) };
    },
  ],
  [
    "postgres",
    async () => {
      const name = `batches_${process.pid}_${++fresh}`;
      const admin = new pg.Client({ connectionString: postgres!.url });
      await admin.connect();
      await admin.query(`CREATE DATABASE ${name}`);
      await admin.end();
      const url = postgres!.url.replace(/\/kiln$/, `/${name}`);
      // The migrations, applied as a replica applies them at start.
      await (await openPostgresStore(url)).close();
      const pool = new pg.Pool({ connectionString: url, max: 4 });
      closers.push(() => pool.end());
      return { files: new PostgresFileStore(pool, clock), batches: new PostgresBatchStore(pool, clock) };
    },
  ],
];

const seconds = () => Math.floor(now / 1000);
const info = (id: string, keyId: string | null, over: Partial<{ purpose: string; expiresAt: number | null }> = {}) => ({
  id,
  keyId,
  createdAt: seconds(),
  expiresAt: over.expiresAt ?? null,
  filename: `${id}.jsonl`,
  purpose: over.purpose ?? "batch",
  bytes: 3,
});
const batch = (id: string, status = "in_progress"): BatchObject => ({ id, status, created_at: seconds(), request_counts: { completed: 0 } });

describe.each(implementations)("the %s batch stores", (_kind, open) => {
  it("keep a key's files, newest first or oldest first, by pages and purpose, and forget them past their expiry", async () => {
    const { files } = await open();
    await files.save(info("file-a", "k1"), Buffer.from("abc"));
    await files.save(info("file-b", "k1", { purpose: "batch_output" }), Buffer.from("def"));
    now += 1000;
    await files.save(info("file-c", "k1", { expiresAt: seconds() + 60 }), Buffer.from("ghi"));
    await files.save(info("file-x", null), Buffer.from("jkl"));
    const ids = async (query: Parameters<FileStore["list"]>[1], key: string | null = "k1") => {
      const { files: listed, hasMore } = await files.list(key, query);
      return [listed.map((f) => f.id), hasMore];
    };
    expect(await ids({ limit: 10 })).toEqual([["file-c", "file-b", "file-a"], false]);
    expect(await ids({ limit: 2, order: "asc" })).toEqual([["file-a", "file-b"], true]);
    expect(await ids({ limit: 2, order: "asc", after: "file-b" })).toEqual([["file-c"], false]);
    expect(await ids({ limit: 10, purpose: "batch_output" })).toEqual([["file-b"], false]);
    expect(await ids({ limit: 10, after: "file-x" })).toEqual([[], false]);
    expect(await ids({ limit: 10 }, null)).toEqual([["file-x"], false]);
    expect(await files.get("file-a", "k1")).toMatchObject({ filename: "file-a.jsonl", purpose: "batch", bytes: 3, expiresAt: null });
    expect((await files.content("file-a", "k1"))?.toString()).toBe("abc");
    expect(await files.get("file-a", "k2")).toBeNull();
    expect(await files.content("file-a", null)).toBeNull();
    now += 61_000;
    expect(await files.get("file-c", "k1")).toBeNull();
    expect(await files.delete("file-a", "k2")).toBe(false);
    expect(await files.delete("file-a", "k1")).toBe(true);
    expect(await files.get("file-a", "k1")).toBeNull();
  });

  it("keep a key's batches newest first by pages, and change one atomically", async () => {
    const { batches } = await open();
    await batches.create(batch("batch_1"), { id: "k1" }, "r1", 1000);
    now += 1000;
    await batches.create(batch("batch_2"), { id: "k1" }, "r1", 1000);
    await batches.create(batch("batch_3"), { id: "k1" }, "r1", 1000);
    await batches.create(batch("batch_x"), { id: "k2" }, "r1", 1000);
    await batches.create(batch("msgbatch_1"), { id: "k1" }, "r1", 1000);
    const page = await batches.list("k1", { limit: 2, idPrefix: "batch_" });
    expect([page.batches.map((b) => b.id), page.hasMore]).toEqual([["batch_3", "batch_2"], true]);
    const rest = await batches.list("k1", { after: "batch_2", limit: 2, idPrefix: "batch_" });
    expect([rest.batches.map((b) => b.id), rest.hasMore]).toEqual([["batch_1"], false]);
    // Before a batch: the newer ones nearest it, still newest first.
    const newer = await batches.list("k1", { before: "batch_1", limit: 1, idPrefix: "batch_" });
    expect([newer.batches.map((b) => b.id), newer.hasMore]).toEqual([["batch_2"], true]);
    expect((await batches.list("k1", { before: "batch_1", limit: 5, idPrefix: "batch_" })).batches.map((b) => b.id)).toEqual(["batch_3", "batch_2"]);
    expect((await batches.list("k1", { limit: 5, idPrefix: "msgbatch_" })).batches.map((b) => b.id)).toEqual(["msgbatch_1"]);
    expect(await batches.get("batch_x", "k1")).toBeNull();
    const changed = await Promise.all(
      Array.from({ length: 8 }, () =>
        batches.update("batch_1", (b) => {
          (b.request_counts as { completed: number }).completed++;
        }),
      ),
    );
    expect(changed.every((b) => b !== null)).toBe(true);
    expect((await batches.get("batch_1", "k1"))?.request_counts).toEqual({ completed: 8 });
    expect(await batches.update("batch_nope", () => {})).toBeNull();
  });

  it("hold a batch for one runner until its lease ends or it is released; a finished one is nobody's", async () => {
    const { batches } = await open();
    await batches.create(batch("batch_1"), { id: "k1", name: "a" }, "r1", 1000);
    expect(await batches.claimable()).toEqual([]);
    expect(await batches.claim("batch_1", "r2", 1000)).toBe(false);
    now += 600;
    expect(await batches.claim("batch_1", "r1", 1000)).toBe(true);
    now += 600;
    expect(await batches.claim("batch_1", "r2", 1000)).toBe(false);
    now += 500;
    expect((await batches.claimable()).map((b) => [b.batch.id, b.key])).toEqual([["batch_1", { id: "k1", name: "a" }]]);
    expect(await batches.claim("batch_1", "r2", 1000)).toBe(true);
    expect(await batches.claim("batch_1", "r1", 1000)).toBe(false);
    await batches.release("batch_1", "r1");
    expect(await batches.claimable()).toEqual([]);
    await batches.release("batch_1", "r2");
    expect((await batches.claimable()).map((b) => b.batch.id)).toEqual(["batch_1"]);
    await batches.update("batch_1", (b) => void (b.status = "completed"));
    expect(await batches.claimable()).toEqual([]);
    expect(await batches.claim("batch_1", "r3", 1000)).toBe(false);
  });

  it("count each line's answer once however often it is recorded, and give the answers in line order", async () => {
    const { batches } = await open();
    await batches.create(batch("batch_1"), { id: null }, "r1", 1000);
    const count = (b: BatchObject) => void (b.request_counts as { completed: number }).completed++;
    const lines = [3, 1, 2, 1, 3, 0];
    const after = await Promise.all(lines.map((line) => batches.addResult("batch_1", { line, failed: line === 2, result: { line } }, count)));
    expect(after.every((b) => b !== null)).toBe(true);
    expect((await batches.get("batch_1", null))?.request_counts).toEqual({ completed: 4 });
    expect((await batches.results("batch_1")).map((r) => [r.line, r.failed, r.result])).toEqual([
      [0, false, { line: 0 }],
      [1, false, { line: 1 }],
      [2, true, { line: 2 }],
      [3, false, { line: 3 }],
    ]);
    await batches.clearResults("batch_1");
    expect(await batches.results("batch_1")).toEqual([]);
  });

  it("delete a key's batch with its answers, and only with that key", async () => {
    const { batches } = await open();
    await batches.create(batch("batch_1"), { id: "k1" }, "r1", 1000);
    await batches.addResult("batch_1", { line: 0, failed: false, result: {} }, () => {});
    expect(await batches.delete("batch_1", "k2")).toBe(false);
    expect(await batches.delete("batch_1", "k1")).toBe(true);
    expect(await batches.get("batch_1", "k1")).toBeNull();
    expect(await batches.results("batch_1")).toEqual([]);
    expect(await batches.delete("batch_1", "k1")).toBe(false);
  });
});
