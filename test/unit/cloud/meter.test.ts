/**
 * Cloud mode in the request path, over the fake model: limits at admission (429 in the API's error
 * shape with retry-after and the rate-limit headers), a reservation in the database while the
 * request runs, and one ledger row at the end at the admitted prices. Real SQLite store, real
 * in-memory limit counters; only the model is fake.
 */
import { afterEach, describe, expect, it } from "vitest";
import { KeyStore, NO_LIMITS } from "../../../src/cloud/keys/key-store.js";
import type { KeyLimits } from "../../../src/cloud/limits/limiter.js";
import { drainApp } from "../../../src/api/app.js";
import { Lifecycle } from "../../../src/api/context.js";
import { MemoryLimits } from "../../../src/cloud/limits/memory-limits.js";
import { CloudMeter } from "../../../src/cloud/meter.js";
import { costNanoUsd, priceOf, scaledPrice } from "../../../src/cloud/money.js";
import { SqliteCloudStore } from "../../../src/cloud/store/sqlite-store.js";
import { sqliteUsageRecorder } from "../../../src/cloud/usage.js";
import { getModel } from "../../../src/catalogue/catalogue.js";
import { openDatabase } from "../../../src/catalogue/db.js";
import { fakeApp, fakeModel, sseEvents, SLUG } from "../api/fake-model.js";
import { TEST_KEY_SECRET } from "./keys-support.js";

const closers: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

async function cloudApp(limits: Partial<KeyLimits>, fakeOptions: Parameters<typeof fakeModel>[0] = {}, lifecycle = new Lifecycle()) {
  const db = openDatabase({ path: ":memory:" });
  const store = new SqliteCloudStore(db);
  const keys = new KeyStore(store, TEST_KEY_SECRET, { cacheMs: 0 });
  const meter = new CloudMeter({
    store,
    limits: new MemoryLimits(),
    recorder: sqliteUsageRecorder(db, getModel),
    priceOf: getModel,
    replicaId: "replica-test",
  });
  const { key, record } = await keys.create("metered", { limits: { ...NO_LIMITS, ...limits } });
  const { app, fake } = await fakeApp({ auth: { mode: "cloud", keys }, cloud: meter, fake: fakeModel(fakeOptions), lifecycle });
  closers.push(
    () => void db.close(),
    () => meter.close(),
    () => app.close(),
  );
  const ask = (body: object) =>
    app.inject({
      method: "POST",
      url: "/v1/chat/completions",
      payload: { model: SLUG, messages: [{ role: "user", content: "hi" }], ...body },
      headers: { authorization: `Bearer ${key}` },
    });
  return { db, store, app, fake, key, keyId: record.id, ask };
}

const ledger = (db: ReturnType<typeof openDatabase>) => db.prepare("SELECT * FROM usage ORDER BY created_at").all() as any[];

describe("admission", () => {
  it("refuses past requests-per-minute with 429 requests / rate_limit_exceeded, retry-after, and the rate-limit headers", async () => {
    const { ask } = await cloudApp({ requestsPerMinute: 2, tokensPerMinute: 100_000 });
    const first = await ask({ max_tokens: 5 });
    expect(first.statusCode).toBe(200);
    expect(first.headers).toMatchObject({ "x-ratelimit-limit-requests": "2", "x-ratelimit-remaining-requests": "1", "x-ratelimit-limit-tokens": "100000" });
    expect(Number(first.headers["x-ratelimit-remaining-tokens"])).toBeLessThan(100_000);
    expect(first.headers["x-ratelimit-reset-requests"]).toMatch(/^(\d+ms|[\d.]+s|\d+m[\d.]+s)$/);
    expect(first.headers["x-ratelimit-reset-tokens"]).toMatch(/^(\d+ms|[\d.]+s|\d+m[\d.]+s)$/);
    expect((await ask({ max_tokens: 5 })).statusCode).toBe(200);
    const refused = await ask({ max_tokens: 5 });
    expect(refused.statusCode).toBe(429);
    expect(refused.json()).toEqual({
      error: { message: expect.stringContaining("requests per minute"), type: "requests", param: null, code: "rate_limit_exceeded" },
    });
    const retryAfter = Number(refused.headers["retry-after"]);
    expect(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60).toBe(true);
    expect(refused.headers["x-ratelimit-remaining-requests"]).toBe("0");
  });

  it("reserves prompt + max completion tokens against tokens-per-minute: 429 type tokens", async () => {
    const { ask } = await cloudApp({ tokensPerMinute: 300 });
    const res = await ask({ max_tokens: 400 });
    expect(res.statusCode).toBe(429);
    expect(res.json().error).toMatchObject({ type: "tokens", code: "rate_limit_exceeded" });
    expect((await ask({ max_tokens: 50 })).statusCode).toBe(200);
  });

  it("refuses a spent daily budget with 429 insufficient_quota", async () => {
    // A budget of 1 nano-USD: a request reserving more (prompt + 100 tokens at the model's price) is refused.
    const { ask, db } = await cloudApp({ dailyBudgetNanoUsd: 1 });
    const res = await ask({ max_tokens: 100 });
    expect(res.statusCode).toBe(429);
    expect(res.json().error).toMatchObject({ type: "insufficient_quota", code: "insufficient_quota", param: null });
    expect(Number(res.headers["retry-after"])).toBeGreaterThanOrEqual(1);
    expect(ledger(db)).toHaveLength(0);
  });

  it("puts the last known headers on answers that did not pass admission (a 400, /v1/models)", async () => {
    const { app, key, ask } = await cloudApp({ requestsPerMinute: 10, tokensPerMinute: 1_000 });
    const bad = await ask({ temperature: 9 });
    expect(bad.statusCode).toBe(400);
    expect(bad.headers).toMatchObject({ "x-ratelimit-limit-requests": "10", "x-ratelimit-remaining-requests": "10", "x-ratelimit-limit-tokens": "1000" });
    await ask({ max_tokens: 5 });
    const models = await app.inject({ method: "GET", url: "/v1/models", headers: { authorization: `Bearer ${key}` } });
    expect(models.headers["x-ratelimit-remaining-requests"]).toBe("9");
  });
});

describe("reservation and ledger", () => {
  it("holds a reservation while the request runs; the end writes one ledger row at the admitted price and deletes it", async () => {
    const { ask, db, keyId } = await cloudApp({ requestsPerMinute: 100 }, { tokenDelayMs: 40 });
    const running = ask({ max_tokens: 20 });
    await new Promise((r) => setTimeout(r, 60));
    const reserved = db.prepare("SELECT * FROM usage_reservations").all() as any[];
    expect(reserved).toHaveLength(1);
    expect(reserved[0]).toMatchObject({ key_id: keyId, slug: SLUG, completion_tokens: 20, replica_id: "replica-test" });
    const res = await running;
    expect(res.statusCode).toBe(200);
    expect(db.prepare("SELECT count(*) AS n FROM usage_reservations").get()).toEqual({ n: 0 });
    const rows = ledger(db);
    expect(rows).toHaveLength(1);
    const usage = res.json().usage;
    const price = priceOf(getModel(SLUG));
    expect(rows[0]).toMatchObject({
      request_id: res.json().id,
      key_id: keyId,
      artifact_id: "fake-artifact-1",
      prompt_tokens: usage.prompt_tokens,
      completion_tokens: usage.completion_tokens,
      settled_from: "completed",
      replica_id: "replica-test",
      input_nano_usd_per_mtok: price.inputNanoUsdPerMTok,
      cost_nano_usd: costNanoUsd(price, { promptTokens: usage.prompt_tokens, completionTokens: usage.completion_tokens, audioMs: 0 }),
    });
  });

  it("charges a batch's request at the batch price (half the model's by default), the same request sent alone in full", async () => {
    const { app, db, key, ask } = await cloudApp({ requestsPerMinute: 100 });
    const headers = { authorization: `Bearer ${key}` };
    const body = { model: SLUG, messages: [{ role: "user", content: "hi" }], max_tokens: 5 };
    const alone = await ask({ max_tokens: 5 });
    const boundary = "b";
    const line = JSON.stringify({ custom_id: "one", method: "POST", url: "/v1/chat/completions", body });
    const upload = await app.inject({
      method: "POST",
      url: "/v1/files",
      payload: `--${boundary}\r\ncontent-disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--${boundary}\r\ncontent-disposition: form-data; name="file"; filename="a.jsonl"\r\n\r\n${line}\r\n--${boundary}--\r\n`,
      headers: { ...headers, "content-type": `multipart/form-data; boundary=${boundary}` },
    });
    const created = await app.inject({
      method: "POST",
      url: "/v1/batches",
      payload: { input_file_id: upload.json().id, endpoint: "/v1/chat/completions", completion_window: "24h" },
      headers,
    });
    let batch = created.json();
    while (batch.status !== "completed") {
      await new Promise((r) => setTimeout(r, 10));
      batch = (await app.inject({ method: "GET", url: `/v1/batches/${batch.id}`, headers })).json();
    }
    const rows = ledger(db);
    expect(rows).toHaveLength(2);
    const [full, half] = [rows.find((r) => r.request_id === alone.json().id), rows.find((r) => r.request_id !== alone.json().id)];
    const price = priceOf(getModel(SLUG));
    expect(half.input_nano_usd_per_mtok).toBe(Math.round(price.inputNanoUsdPerMTok / 2));
    expect(half.output_nano_usd_per_mtok).toBe(Math.round(price.outputNanoUsdPerMTok / 2));
    expect(full.input_nano_usd_per_mtok).toBe(price.inputNanoUsdPerMTok);
    expect(half.completion_tokens).toBe(full.completion_tokens);
    expect(half.cost_nano_usd).toBeLessThan(full.cost_nano_usd);
    expect(half.cost_nano_usd).toBe(
      costNanoUsd(scaledPrice(price, 0.5), { promptTokens: half.prompt_tokens, completionTokens: half.completion_tokens, audioMs: 0 }),
    );
  });

  it("charges a stream for the tokens it produced", async () => {
    const { ask, db } = await cloudApp({}, {});
    const res = await ask({ stream: true, stream_options: { include_usage: true } });
    const events = sseEvents(res.body) as any[];
    const usage = events.at(-2).usage;
    expect(ledger(db)[0]).toMatchObject({ completion_tokens: usage.completion_tokens, prompt_tokens: usage.prompt_tokens, settled_from: "completed" });
  });

  it("a request its engine refuses after admission (a full queue) leaves no reservation and no charge", async () => {
    const { ask, db } = await cloudApp({ requestsPerMinute: 100 }, { maxWaiting: 0, maxRunning: 1, tokenDelayMs: 30 });
    const first = ask({ max_tokens: 3 });
    await new Promise((r) => setTimeout(r, 10));
    const second = await ask({ max_tokens: 3 });
    expect(second.statusCode).toBe(503);
    expect(db.prepare("SELECT request_id FROM usage_reservations").all()).toHaveLength(1); // the first's
    expect((await first).statusCode).toBe(200);
    expect(db.prepare("SELECT count(*) AS n FROM usage_reservations").get()).toEqual({ n: 0 });
    expect(ledger(db)).toHaveLength(1);
  });

  it("holds one concurrency slot per running request, freed when it ends", async () => {
    const { ask } = await cloudApp({ maxConcurrent: 1 }, { tokenDelayMs: 30 });
    const first = ask({ max_tokens: 3 });
    await new Promise((r) => setTimeout(r, 10));
    const second = await ask({ max_tokens: 3 });
    expect(second.statusCode).toBe(429);
    expect(second.json().error).toMatchObject({ type: "requests", code: "rate_limit_exceeded" });
    expect((await first).statusCode).toBe(200);
    expect((await ask({ max_tokens: 3 })).statusCode).toBe(200);
  });

  it("charges a request cut by shutdown for the tokens it produced (settled_from shutdown)", async () => {
    const lifecycle = new Lifecycle();
    const script = Array.from({ length: 40 }, () => 256); // 40 tokens, none of them the end
    const { app, db, key } = await cloudApp({ requestsPerMinute: 100 }, { tokenDelayMs: 20, script }, lifecycle);
    const url = await app.listen({ port: 0, host: "127.0.0.1" });
    const answer = fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: SLUG, messages: [{ role: "user", content: "hi" }], max_tokens: 40, stream: true }),
    }).then((r) => r.text());
    await new Promise((r) => setTimeout(r, 200));
    await drainApp(app, lifecycle, { timeoutMs: 50 });
    await answer.catch(() => "");
    const rows = await (async () => {
      for (let i = 0; i < 50; i++) {
        const r = ledger(db);
        if (r.length > 0) return r;
        await new Promise((done) => setTimeout(done, 20));
      }
      return [];
    })();
    expect(rows).toHaveLength(1);
    expect(rows[0].settled_from).toBe("shutdown");
    expect(rows[0].completion_tokens).toBeGreaterThan(0);
    expect(rows[0].completion_tokens).toBeLessThan(40);
    expect(db.prepare("SELECT count(*) AS n FROM usage_reservations").get()).toEqual({ n: 0 });
  });
});
