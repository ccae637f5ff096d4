/**
 * The batch runner with a fake endpoint: it keeps at most `concurrency` requests running, asks
 * again after an answer that names a wait (and records a final one at once), and ends a batch
 * past its completion window as `expired`, the requests it never sent in the error file. Two
 * runners over one store, as two replicas over a fleet's database: a batch whose runner froze is
 * taken over once its lease ends, every request answered once, and a cancel taken by one reaches
 * the one running the batch.
 */
import { describe, expect, it } from "vitest";
import { BatchRunner, COMPLETION_WINDOW_SECONDS, type LineAnswer, type SendLine } from "../../../../src/api/batches/batch-runner.js";
import { openDatabase, type KilnDatabase } from "../../../../src/catalogue/db.js";
import { SqliteBatchStore, type BatchObject } from "../../../../src/catalogue/stored-batches.js";
import { SqliteFileStore } from "../../../../src/catalogue/stored-files.js";

const ENDPOINT = "/v1/completions";
const FINAL = ["completed", "failed", "cancelled", "expired"];

interface Setup {
  concurrency?: number;
  now?: () => number;
  leaseMs?: number;
  db?: KilnDatabase;
  /** While true, the runner's batch store never answers (its process frozen). */
  freeze?: () => boolean;
}

/** `store` whose every call hangs while `frozen()`. */
function freezable<T extends object>(store: T, frozen: () => boolean): T {
  const never = new Promise<never>(() => {});
  return new Proxy(store, {
    get(target, name) {
      const value = Reflect.get(target, name) as unknown;
      return typeof value === "function" ? (...args: unknown[]) => (frozen() ? never : (value as (...a: unknown[]) => unknown).apply(target, args)) : value;
    },
  });
}

function setup(send: SendLine, options: Setup = {}) {
  const db = options.db ?? openDatabase({ path: ":memory:", seed: false });
  const files = new SqliteFileStore(db, options.now);
  const store = new SqliteBatchStore(db, options.now);
  const runner = new BatchRunner(options.freeze ? freezable(store, options.freeze) : store, files, send, options);
  const input = async (count: number) => {
    const content = Array.from({ length: count }, (_, i) =>
      JSON.stringify({ custom_id: `r${i}`, method: "POST", url: ENDPOINT, body: { prompt: `p${i}` } }),
    ).join("\n");
    await files.save(
      { id: "file-in", keyId: null, createdAt: 0, expiresAt: null, filename: "in.jsonl", purpose: "batch", bytes: content.length },
      Buffer.from(content),
    );
    return runner.create({ endpoint: ENDPOINT, inputFileId: "file-in", metadata: null, outputExpiresAfter: null }, { id: null });
  };
  const settled = async (batch: BatchObject, by = runner): Promise<BatchObject> => {
    for (let i = 0; i < 1000; i++) {
      const now = (await by.get(batch.id, null))!;
      if (FINAL.includes(now.status)) return now;
      await new Promise((r) => setTimeout(r, 5));
    }
    throw new Error("the batch did not end");
  };
  const lines = async (id: unknown): Promise<any[]> =>
    (await files.content(String(id), null))!
      .toString()
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
  return { db, runner, input, settled, lines };
}

const ok = (body: Record<string, unknown>, requestId = "req_1"): LineAnswer => ({
  status: 200,
  requestId,
  body: { echo: body, usage: { prompt_tokens: 3, completion_tokens: 2 } },
});
/** An endpoint taking `ms` per request, noting each prompt in `seen` and answering with `requestId`. */
const slowly =
  (ms: number, seen: string[] = [], requestId = "req_1"): SendLine =>
  async (_endpoint, body) => {
    seen.push(String(body.prompt));
    await new Promise((r) => setTimeout(r, ms));
    return ok(body, requestId);
  };

describe("BatchRunner", () => {
  it("keeps at most `concurrency` requests running", async () => {
    let running = 0;
    let most = 0;
    const send: SendLine = async (_endpoint, body) => {
      most = Math.max(most, ++running);
      await new Promise((r) => setTimeout(r, 3));
      running--;
      return ok(body);
    };
    const { input, settled } = setup(send, { concurrency: 3 });
    const batch = await settled(await input(12));
    expect(batch.request_counts).toEqual({ total: 12, completed: 12, failed: 0 });
    expect(batch.usage).toMatchObject({ input_tokens: 36, output_tokens: 24, total_tokens: 60 });
    expect(most).toBe(3);
  });

  it("asks again after an answer naming a wait, and records a final failure at once", async () => {
    const asked = new Map<string, number>();
    const send: SendLine = async (_endpoint, body) => {
      const n = (asked.get(String(body.prompt)) ?? 0) + 1;
      asked.set(String(body.prompt), n);
      if (body.prompt === "p0" && n < 3) return { status: 503, requestId: "", body: { error: { code: "overloaded" } }, retryAfter: 0.01 };
      if (body.prompt === "p1") return { status: 400, requestId: "req_x", body: { error: { param: "prompt" } } };
      return ok(body);
    };
    const { input, settled, lines } = setup(send);
    const batch = await settled(await input(2));
    expect(asked.get("p0")).toBe(3);
    expect(asked.get("p1")).toBe(1);
    expect(batch.request_counts).toEqual({ total: 2, completed: 1, failed: 1 });
    expect((await lines(batch.output_file_id))[0]).toMatchObject({ custom_id: "r0", response: { status_code: 200 } });
    expect((await lines(batch.error_file_id))[0]).toMatchObject({ custom_id: "r1", response: { status_code: 400, request_id: "req_x" } });
  });

  it("ends a batch past its completion window as expired, the requests it never sent in the error file", async () => {
    let now = Date.now();
    const send: SendLine = async (_endpoint, body) => {
      // The first answer takes longer than the window.
      now += (COMPLETION_WINDOW_SECONDS + 1) * 1000;
      return ok(body);
    };
    const { input, settled, lines } = setup(send, { concurrency: 1, now: () => now });
    const batch = await settled(await input(3));
    expect(batch.status).toBe("expired");
    expect(batch.expired_at).toBeGreaterThan(Number(batch.expires_at));
    expect(batch.request_counts).toEqual({ total: 3, completed: 1, failed: 2 });
    expect((await lines(batch.error_file_id)).map((l) => [l.custom_id, l.error.code])).toEqual([
      ["r1", "batch_expired"],
      ["r2", "batch_expired"],
    ]);
  });

  it("answers a request the endpoint threw on as a 500 in the API's shape", async () => {
    const { input, settled, lines } = setup(async () => {
      throw new Error("boom");
    });
    const batch = await settled(await input(1));
    expect(batch.request_counts).toEqual({ total: 1, completed: 0, failed: 1 });
    expect((await lines(batch.error_file_id))[0].response).toMatchObject({ status_code: 500, body: { error: { type: "server_error" } } });
  });

  it("a batch whose runner is gone is taken over by another once its lease ends, each request answered once", async () => {
    const leaseMs = 150;
    const seenA: string[] = [];
    const seenB: string[] = [];
    // Runner A's process freezes (a dead replica): from then on neither its store nor its endpoint answers.
    let dead = false;
    const frozen = new Promise<never>(() => {});
    const a = setup(async (endpoint, body, key) => (dead ? frozen : slowly(10, seenA, "req_A")(endpoint, body, key)), {
      concurrency: 2,
      leaseMs,
      freeze: () => dead,
    });
    const b = setup(slowly(2, seenB, "req_B"), { concurrency: 2, leaseMs, db: a.db });
    const created = await a.input(20);
    await b.runner.resume();
    while (seenA.length < 4) await new Promise((r) => setTimeout(r, 5));
    // A holds the batch: B, looking all along, has not taken it.
    expect(seenB).toEqual([]);
    dead = true;
    const diedAt = Date.now();
    const batch = await b.settled(created, b.runner);
    await b.runner.stop();
    expect(Date.now() - diedAt).toBeGreaterThanOrEqual(leaseMs / 2);
    expect(batch.status).toBe("completed");
    expect(batch.request_counts).toEqual({ total: 20, completed: 20, failed: 0 });
    const output = await b.lines(batch.output_file_id);
    expect(output.map((l) => l.custom_id)).toEqual(Array.from({ length: 20 }, (_, i) => `r${i}`));
    // What A answered before it froze stands, and B sent none of it again (what A had in flight, B sent anew).
    const byA = output.filter((l) => l.response.request_id === "req_A").map((l) => l.response.body.echo.prompt);
    expect(byA.length).toBeGreaterThanOrEqual(2);
    expect(seenB.filter((p) => byA.includes(p))).toEqual([]);
    expect(output.filter((l) => l.response.request_id === "req_B")).toHaveLength(20 - byA.length);
  });

  it("a store that fails stops the run without harm, and the batch is taken up again once its lease ends", async () => {
    const db = openDatabase({ path: ":memory:", seed: false });
    const store = new SqliteBatchStore(db);
    let failures = 1;
    const failing = new Proxy(store, {
      get(target, name) {
        const value = Reflect.get(target, name) as unknown;
        if (name !== "addResult" || typeof value !== "function") return value;
        return (...args: unknown[]) =>
          failures-- > 0 ? Promise.reject(new Error("database unreachable")) : (value as (...a: unknown[]) => unknown).apply(target, args);
      },
    });
    const errors: unknown[] = [];
    const files = new SqliteFileStore(db);
    const runner = new BatchRunner(failing, files, slowly(2), { concurrency: 2, leaseMs: 150, onError: (_id, err) => errors.push(err) });
    const content = Array.from({ length: 6 }, (_, i) => JSON.stringify({ custom_id: `r${i}`, method: "POST", url: ENDPOINT, body: { prompt: `p${i}` } })).join(
      "\n",
    );
    await files.save(
      { id: "file-in", keyId: null, createdAt: 0, expiresAt: null, filename: "in.jsonl", purpose: "batch", bytes: content.length },
      Buffer.from(content),
    );
    const created = await runner.create({ endpoint: ENDPOINT, inputFileId: "file-in", metadata: null, outputExpiresAfter: null }, { id: null });
    await runner.resume();
    let batch = created;
    for (let i = 0; i < 400 && batch.status !== "completed"; i++) {
      await new Promise((r) => setTimeout(r, 5));
      batch = (await runner.get(created.id, null))!;
    }
    await runner.stop();
    expect(errors.map((e) => (e as Error).message)).toEqual(["database unreachable"]);
    expect(batch.status).toBe("completed");
    expect(batch.request_counts).toEqual({ total: 6, completed: 6, failed: 0 });
  });

  it("a runner that fails while finalizing leaves the batch to the next try, which writes one output file and one error file", async () => {
    const db = openDatabase({ path: ":memory:", seed: false });
    const files = new SqliteFileStore(db);
    let saves = 0;
    // The first try writes the output file, then fails on the error file (its process dies there).
    const failing = new Proxy(files, {
      get(target, name) {
        const value = Reflect.get(target, name) as unknown;
        if (name !== "save" || typeof value !== "function") return value;
        return (...args: unknown[]) => (++saves === 3 ? Promise.reject(new Error("disk gone")) : (value as (...a: unknown[]) => unknown).apply(target, args));
      },
    });
    const send: SendLine = async (_endpoint, body) => (body.prompt === "p1" ? { status: 400, requestId: "", body: { error: {} } } : ok(body));
    const runner = new BatchRunner(new SqliteBatchStore(db), failing, send, { leaseMs: 150 });
    const content = Array.from({ length: 3 }, (_, i) => JSON.stringify({ custom_id: `r${i}`, method: "POST", url: ENDPOINT, body: { prompt: `p${i}` } })).join(
      "\n",
    );
    await failing.save(
      { id: "file-in", keyId: null, createdAt: 0, expiresAt: null, filename: "in.jsonl", purpose: "batch", bytes: content.length },
      Buffer.from(content),
    );
    const created = await runner.create({ endpoint: ENDPOINT, inputFileId: "file-in", metadata: null, outputExpiresAfter: null }, { id: null });
    await runner.resume();
    let batch = created;
    for (let i = 0; i < 400 && batch.status !== "completed"; i++) {
      await new Promise((r) => setTimeout(r, 5));
      batch = (await runner.get(created.id, null))!;
    }
    await runner.stop();
    expect(batch.status).toBe("completed");
    expect(saves).toBeGreaterThan(4);
    const written = (await files.list(null, { purpose: "batch_output", limit: 10 })).files.map((f) => f.id).sort();
    expect(written).toEqual([batch.output_file_id, batch.error_file_id].sort());
    expect((await files.content(String(batch.error_file_id), null))!.toString()).toContain('"custom_id":"r1"');
  });

  it("a cancel taken by another runner reaches the one running the batch", async () => {
    const a = setup(slowly(10), { concurrency: 1, leaseMs: 150 });
    const b = setup(slowly(10), { concurrency: 1, leaseMs: 150, db: a.db });
    const created = await a.input(30);
    expect((await b.runner.cancel(created.id, null))?.status).toBe("cancelling");
    const batch = await a.settled(created);
    expect(batch.status).toBe("cancelled");
    expect((batch.request_counts as { completed: number }).completed).toBeLessThan(30);
    expect(await b.runner.cancel(created.id, "another-key")).toBeNull();
  });
});
