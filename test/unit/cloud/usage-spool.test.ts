/**
 * Metering never breaks an answer (cloud mode): when the usage ledger (SQLite's `usage` table)
 * cannot be written, e.g. its disk is full, an admitted request still completes well formed, its
 * usage goes to a durable spool and is settled exactly once when the ledger is back; while neither
 * the ledger nor the spool can be written, new metered requests get a clean 503. The database's
 * full disk is injected through a ledger seam (SQLite's own SQLITE_FULL error), or for real with
 * `PRAGMA max_page_count`; the spool's through /dev/full (ENOSPC on every write).
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterEach, describe, expect, it, vi } from "vitest";
import { sqliteKeyStore } from "./keys-support.js";
import { sqliteUsageLedger, sqliteUsageRecorder, type LedgerEntry, type UsageLedger, type UsageRecorder } from "../../../src/cloud/usage.js";
import { SpooledUsageRecorder, UsageSpool, usageSpoolPath, type UsageLog } from "../../../src/cloud/usage-spool.js";
import { getModel } from "../../../src/catalogue/catalogue.js";
import { openDatabase, type KilnDatabase } from "../../../src/catalogue/db.js";
import { fakeApp, sseEvents, SLUG } from "../api/fake-model.js";

const diskFull = () => new Database.SqliteError("database or disk is full", "SQLITE_FULL");

const chat = (extra: object = {}) => ({ model: SLUG, messages: [{ role: "user", content: "hi" }], ...extra });

const cleanups: Array<() => void> = [];
afterEach(() => {
  for (const f of cleanups.splice(0).reverse()) f();
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "kiln-usage-spool-"));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** The database's disk, full on demand: writes throw SQLite's SQLITE_FULL and write nothing. */
function faultyLedger(inner: UsageLedger): UsageLedger & { full: boolean; writes: number } {
  const ledger = {
    full: false,
    writes: 0,
    write(entries: readonly LedgerEntry[]) {
      ledger.writes++;
      if (ledger.full) throw diskFull();
      inner.write(entries);
    },
  };
  return ledger;
}

/** The spool's disk, full on demand: the spool path becomes /dev/full (every write fails with ENOSPC). */
function breakSpool(path: string): void {
  if (existsSync("/dev/full")) symlinkSync("/dev/full", path);
  else mkdirSync(path); // EISDIR: not writable either
}
const fixSpool = (path: string) => rmSync(path, { recursive: true, force: true });

/** A log that remembers what it was told. */
function memoryLog(): UsageLog & { lines: Array<{ level: string; msg: string; obj: any }> } {
  const lines: Array<{ level: string; msg: string; obj: any }> = [];
  return {
    lines,
    info: (obj, msg) => lines.push({ level: "info", msg, obj }),
    warn: (obj, msg) => lines.push({ level: "warn", msg, obj }),
    error: (obj, msg) => lines.push({ level: "error", msg, obj }),
  };
}

async function cloudSetup(options: { settleIntervalMs?: number } = {}) {
  const db = openDatabase({ path: ":memory:" });
  cleanups.push(() => db.close());
  const keys = sqliteKeyStore(db);
  const { key, record } = await keys.create("metered");
  const ledger = faultyLedger(sqliteUsageLedger(db, (slug) => getModel(slug)));
  const spoolPath = join(tempDir(), "usage-spool.jsonl");
  const log = memoryLog();
  const recorder = new SpooledUsageRecorder({ ledger, spoolPath, log, settleIntervalMs: options.settleIntervalMs ?? 0 });
  cleanups.push(() => recorder.close());
  return { db, keys, key, keyId: record.id, ledger, spoolPath, log, recorder };
}

const rowsOf = (db: KilnDatabase, requestId: string) => db.prepare("SELECT * FROM usage WHERE request_id = ?").all(requestId) as any[];
const spooledIds = (path: string) => new UsageSpool(path).read().entries.map((e) => e.requestId);

async function ask(app: Awaited<ReturnType<typeof fakeApp>>["app"], key: string, body: object, url = "/v1/chat/completions") {
  return app.inject({ method: "POST", url, payload: body, headers: { authorization: `Bearer ${key}` } });
}

/** A non-streamed chat answer, whole. */
function expectCompleteAnswer(res: { statusCode: number; json(): any }) {
  expect(res.statusCode).toBe(200);
  const body = res.json();
  expect(body.choices[0]).toMatchObject({ message: { role: "assistant", content: "Hello world!" }, finish_reason: "stop" });
  expect(body.usage).toMatchObject({ completion_tokens: 3 });
  return body.id as string;
}

/** A streamed chat answer, whole: content, the finish chunk, the usage chunk, [DONE], and no error event. */
function expectCompleteStream(res: { statusCode: number; body: string }) {
  expect(res.statusCode).toBe(200);
  const events = sseEvents(res.body) as any[];
  expect(events.at(-1)).toBe("[DONE]");
  expect(events.some((e) => typeof e === "object" && "error" in e)).toBe(false);
  const chunks = events.slice(0, -1);
  expect(chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("")).toBe("Hello world!");
  expect(chunks.some((c) => c.choices[0]?.finish_reason === "stop")).toBe(true);
  expect(chunks.at(-1).usage).toMatchObject({ completion_tokens: 3 });
  return chunks[0].id as string;
}

describe("an answer whose usage cannot be written", () => {
  // Today's failure: the usage write throws after the tokens are generated.
  const throwing: UsageRecorder = {
    record() {
      throw diskFull();
    },
  };

  it("is still a complete 200 when not streamed", async () => {
    const { keys } = await cloudSetup();
    const { key } = await keys.create("k");
    const { app } = await fakeApp({ auth: { mode: "cloud", keys }, usage: throwing });
    expectCompleteAnswer(await ask(app, key, chat()));
  });

  it("still streams its finish chunk, usage chunk and [DONE]", async () => {
    const { keys } = await cloudSetup();
    const { key } = await keys.create("k");
    const { app } = await fakeApp({ auth: { mode: "cloud", keys }, usage: throwing });
    expectCompleteStream(await ask(app, key, chat({ stream: true, stream_options: { include_usage: true } })));
    // The legacy completions route shares the flow.
    const res = await ask(app, key, { model: SLUG, prompt: "hi", stream: true }, "/v1/completions");
    expect((sseEvents(res.body) as any[]).at(-1)).toBe("[DONE]");
  });
});

describe("cloud mode with the database's disk full", () => {
  it("answers in full, spools the usage durably, and settles it exactly once when the disk has room again", async () => {
    const { db, key, keyId, ledger, spoolPath, recorder, log } = await cloudSetup();
    const { app } = await fakeApp({ auth: { mode: "cloud", keys: sqliteKeyStore(db) }, usage: recorder });
    ledger.full = true;

    const whole = expectCompleteAnswer(await ask(app, key, chat()));
    const streamed = expectCompleteStream(await ask(app, key, chat({ stream: true, stream_options: { include_usage: true } })));
    expect(rowsOf(db, whole)).toEqual([]);
    expect(spooledIds(spoolPath)).toEqual([whole, streamed]);
    expect(statSync(spoolPath).mode & 0o777).toBe(0o600);
    expect(log.lines.some((l) => l.level === "error" && l.msg.includes("usage ledger: write failed"))).toBe(true);
    // The spool keeps the usage: requests are still admitted.
    expect(recorder.admits()).toBe(true);
    expect(recorder.status()).toMatchObject({ ledgerWritable: false, spoolWritable: true, held: 0, spooled: true });

    // Still full: settling leaves everything in the spool.
    recorder.settle();
    expect(spooledIds(spoolPath)).toEqual([whole, streamed]);

    ledger.full = false;
    recorder.settle();
    for (const id of [whole, streamed]) {
      expect(rowsOf(db, id)).toHaveLength(1);
      expect(rowsOf(db, id)[0]).toMatchObject({ key_id: keyId, slug: SLUG, completion_tokens: 3 });
      expect(rowsOf(db, id)[0].cost_nano_usd).toBeGreaterThan(0);
    }
    expect(readFileSync(spoolPath, "utf8")).toBe("");
    expect(recorder.status()).toMatchObject({ ledgerWritable: true, spooled: false });

    // Settling again, or a record written again, never counts twice.
    recorder.settle();
    new UsageSpool(spoolPath).append([{ requestId: whole, keyId, slug: SLUG, promptTokens: 1, completionTokens: 3, at: new Date().toISOString() }]);
    new SpooledUsageRecorder({ ledger, spoolPath, log, settleIntervalMs: 0 }).close();
    expect(rowsOf(db, whole)).toHaveLength(1);
    expect(rowsOf(db, whole)[0].prompt_tokens).not.toBe(1);
  });

  it("keeps the time of the request, not of the settling", async () => {
    const { db, key, ledger, recorder } = await cloudSetup();
    const { app } = await fakeApp({ auth: { mode: "cloud", keys: sqliteKeyStore(db) }, usage: recorder });
    ledger.full = true;
    const before = new Date().toISOString();
    const id = expectCompleteAnswer(await ask(app, key, chat()));
    const after = new Date().toISOString();
    await new Promise((r) => setTimeout(r, 20));
    ledger.full = false;
    recorder.settle();
    const at = rowsOf(db, id)[0].created_at;
    expect(at >= before && at <= after).toBe(true);
  });

  it("settles on its own, on a timer", async () => {
    const { db, key, ledger, spoolPath, recorder } = await cloudSetup({ settleIntervalMs: 20 });
    const { app } = await fakeApp({ auth: { mode: "cloud", keys: sqliteKeyStore(db) }, usage: recorder });
    ledger.full = true;
    const id = expectCompleteAnswer(await ask(app, key, chat()));
    expect(spooledIds(spoolPath)).toEqual([id]);
    ledger.full = false;
    await vi.waitFor(() => expect(rowsOf(db, id)).toHaveLength(1), { timeout: 2000, interval: 10 });
    expect(spooledIds(spoolPath)).toEqual([]);
  });

  it("works with SQLite's own SQLITE_FULL (database at its maximum size)", async () => {
    const db = openDatabase({ path: ":memory:" });
    cleanups.push(() => db.close());
    const keys = sqliteKeyStore(db);
    const { key } = await keys.create("metered");
    const spoolPath = join(tempDir(), "usage-spool.jsonl");
    const recorder = sqliteUsageRecorder(db, (slug) => getModel(slug), { spoolPath, log: memoryLog(), settleIntervalMs: 0 });
    cleanups.push(() => recorder.close());
    // Fill the database up to a page limit with rows the size of a real one.
    const pages = db.pragma("page_count", { simple: true }) as number;
    db.pragma(`max_page_count = ${pages + 2}`);
    const filler = db.prepare("INSERT INTO usage (request_id, key_id, slug) VALUES (?, NULL, ?)");
    let full = false;
    for (let i = 0; i < 10_000 && !full; i++) {
      try {
        filler.run(`chatcmpl-filler${String(i).padStart(24, "0")}`, SLUG);
      } catch (err) {
        expect((err as { code?: string }).code).toBe("SQLITE_FULL");
        full = true;
      }
    }
    expect(full).toBe(true);

    const { app } = await fakeApp({ auth: { mode: "cloud", keys }, usage: recorder });
    const id = expectCompleteAnswer(await ask(app, key, chat()));
    expect(rowsOf(db, id)).toEqual([]);
    expect(spooledIds(spoolPath)).toEqual([id]);

    db.pragma("max_page_count = 1073741823");
    recorder.settle();
    expect(rowsOf(db, id)).toHaveLength(1);
    expect(spooledIds(spoolPath)).toEqual([]);
  });
});

describe("cloud mode with neither the database nor the spool writable", () => {
  it("completes the admitted request, refuses new ones with 503 until usage can be kept, then settles exactly once", async () => {
    const { db, key, ledger, spoolPath, recorder, log } = await cloudSetup();
    const { app } = await fakeApp({ auth: { mode: "cloud", keys: sqliteKeyStore(db) }, usage: recorder });
    ledger.full = true;
    breakSpool(spoolPath);

    // Admitted before anything was known to fail: answered in full, usage held in memory, logged loudly.
    const first = expectCompleteStream(await ask(app, key, chat({ stream: true, stream_options: { include_usage: true } })));
    expect(recorder.status()).toMatchObject({ ledgerWritable: false, spoolWritable: false, held: 1 });
    const loud = log.lines.find((l) => l.level === "error" && l.msg.includes("neither the ledger nor the spool"));
    expect(loud?.obj.usage[0].requestId).toBe(first);

    // New metered requests: a clean 503 before any work, streamed or not, on both routes.
    const writesBefore = ledger.writes;
    for (const [body, url] of [
      [chat(), "/v1/chat/completions"],
      [chat({ stream: true }), "/v1/chat/completions"],
      [{ model: SLUG, prompt: "hi" }, "/v1/completions"],
    ] as const) {
      const res = await ask(app, key, body, url);
      expect(res.statusCode).toBe(503);
      expect(res.headers["content-type"]).toMatch(/^application\/json/);
      expect(res.headers["retry-after"]).toBe("5");
      expect(res.json().error).toMatchObject({ type: "server_error", code: "overloaded", param: null });
      expect(res.json().error.message).toMatch(/usage/);
    }
    expect(ledger.writes).toBe(writesBefore);
    // Routes that do no metered work still answer.
    expect((await app.inject({ method: "GET", url: "/v1/models", headers: { authorization: `Bearer ${key}` } })).statusCode).toBe(200);

    // Retried while both still fail: nothing lost.
    recorder.settle();
    expect(recorder.status()).toMatchObject({ held: 1, spoolWritable: false });

    // The spool's disk has room again: the held record goes there, requests are admitted again.
    fixSpool(spoolPath);
    recorder.settle();
    expect(spooledIds(spoolPath)).toEqual([first]);
    expect(recorder.status()).toMatchObject({ held: 0, spoolWritable: true, ledgerWritable: false });
    const second = expectCompleteAnswer(await ask(app, key, chat()));
    expect(spooledIds(spoolPath)).toEqual([first, second]);

    // Then the database's: everything settles, once.
    ledger.full = false;
    recorder.settle();
    recorder.settle();
    expect(rowsOf(db, first)).toHaveLength(1);
    expect(rowsOf(db, second)).toHaveLength(1);
    expect(spooledIds(spoolPath)).toEqual([]);
  });

  it("admits again once the database alone is back, writing the held usage to it", async () => {
    const { db, key, ledger, spoolPath, recorder } = await cloudSetup();
    const { app } = await fakeApp({ auth: { mode: "cloud", keys: sqliteKeyStore(db) }, usage: recorder });
    ledger.full = true;
    breakSpool(spoolPath);
    const first = expectCompleteAnswer(await ask(app, key, chat()));
    expect((await ask(app, key, chat())).statusCode).toBe(503);
    ledger.full = false;
    recorder.settle();
    expect(rowsOf(db, first)).toHaveLength(1);
    expect(recorder.admits()).toBe(true);
    const second = expectCompleteAnswer(await ask(app, key, chat()));
    expect(rowsOf(db, second)).toHaveLength(1);
  });

  it("leaves the held usage in the log at close when it could not be kept anywhere", async () => {
    const { ledger, spoolPath, recorder, log } = await cloudSetup();
    ledger.full = true;
    breakSpool(spoolPath);
    recorder.record({ requestId: "chatcmpl-lost", keyId: null, slug: SLUG, promptTokens: 2, completionTokens: 3 });
    recorder.close();
    const last = log.lines.at(-1)!;
    expect(last.level).toBe("error");
    expect(last.obj.usage.map((u: LedgerEntry) => u.requestId)).toEqual(["chatcmpl-lost"]);
  });
});

describe("the spool at startup", () => {
  it("is settled first: each record once, a line cut short by a crash skipped, then emptied", async () => {
    const { db, keyId, ledger, spoolPath, log } = await cloudSetup();
    const at = "2025-01-02T03:04:05.678Z";
    const entry = (requestId: string): LedgerEntry => ({ requestId, keyId, slug: SLUG, promptTokens: 5, completionTokens: 7, at });
    ledger.write([entry("chatcmpl-already")]);
    writeFileSync(
      spoolPath,
      [entry("chatcmpl-already"), entry("chatcmpl-a"), entry("chatcmpl-a"), entry("chatcmpl-b")].map((e) => JSON.stringify(e)).join("\n") +
        '\n{"requestId":"chatcmpl-cu',
      { mode: 0o600 },
    );
    // The next append starts on a new line: the cut line does not swallow it.
    new UsageSpool(spoolPath).append([entry("chatcmpl-c")]);
    expect(spooledIds(spoolPath)).toEqual(["chatcmpl-already", "chatcmpl-a", "chatcmpl-a", "chatcmpl-b", "chatcmpl-c"]);

    const recorder = new SpooledUsageRecorder({ ledger, spoolPath, log, settleIntervalMs: 0 });
    cleanups.push(() => recorder.close());
    for (const id of ["chatcmpl-already", "chatcmpl-a", "chatcmpl-b", "chatcmpl-c"]) expect(rowsOf(db, id)).toHaveLength(1);
    expect(rowsOf(db, "chatcmpl-a")[0]).toMatchObject({ key_id: keyId, prompt_tokens: 5, completion_tokens: 7, created_at: at });
    expect(readFileSync(spoolPath, "utf8")).toBe("");
    expect(log.lines.some((l) => l.level === "error" && l.obj.line === '{"requestId":"chatcmpl-cu')).toBe(true);
    expect(recorder.admits()).toBe(true);
  });

  it("stays in the spool while the database is still full, and requests are admitted", async () => {
    const { ledger, spoolPath, log } = await cloudSetup();
    ledger.full = true;
    new UsageSpool(spoolPath).append([
      { requestId: "chatcmpl-x", keyId: null, slug: SLUG, promptTokens: 1, completionTokens: 1, at: new Date().toISOString() },
    ]);
    const recorder = new SpooledUsageRecorder({ ledger, spoolPath, log, settleIntervalMs: 0 });
    cleanups.push(() => recorder.close());
    expect(recorder.status()).toMatchObject({ ledgerWritable: false, spooled: true });
    expect(recorder.admits()).toBe(true);
    expect(spooledIds(spoolPath)).toEqual(["chatcmpl-x"]);
  });

  it("lives in KILN_HOME unless KILN_USAGE_SPOOL names another file", () => {
    expect(usageSpoolPath({ KILN_HOME: "/srv/kiln" })).toBe("/srv/kiln/usage-spool.jsonl");
    expect(usageSpoolPath({ KILN_HOME: "/srv/kiln", KILN_USAGE_SPOOL: "/mnt/other/spool.jsonl" })).toBe("/mnt/other/spool.jsonl");
  });
});

describe("local mode", () => {
  it("records nothing and is never refused", async () => {
    const { app } = await fakeApp();
    expectCompleteAnswer(await app.inject({ method: "POST", url: "/v1/chat/completions", payload: chat(), headers: { authorization: "Bearer x" } }));
    const res = await app.inject({
      method: "POST",
      url: "/v1/chat/completions",
      payload: chat({ stream: true, stream_options: { include_usage: true } }),
      headers: { authorization: "Bearer x" },
    });
    expectCompleteStream(res);
  });
});
