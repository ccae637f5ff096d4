/** Local and cloud authentication; keys stored as hashes; 401 and 403 answers. */
import { describe, expect, it } from "vitest";
import { hashKey } from "../../../src/cloud/keys/key-store.js";
import { sqliteKeyStore, TEST_KEY_SECRET } from "../cloud/keys-support.js";
import { openDatabase } from "../../../src/catalogue/db.js";
import { sqliteUsageRecorder } from "../../../src/cloud/usage.js";
import { getModel } from "../../../src/catalogue/catalogue.js";
import { fakeApp, SLUG } from "./fake-model.js";

const chat = (model = SLUG) => ({ model, messages: [{ role: "user", content: "hi" }] });

function cloud() {
  const db = openDatabase({ path: ":memory:" });
  const keys = sqliteKeyStore(db);
  return { db, keys };
}

describe("local mode", () => {
  it("accepts any non-empty bearer key", async () => {
    const { app } = await fakeApp();
    for (const key of ["x", "sk-anything", "kiln-whatever"]) {
      const res = await app.inject({ method: "POST", url: "/v1/chat/completions", payload: chat(), headers: { authorization: `Bearer ${key}` } });
      expect(res.statusCode).toBe(200);
    }
  });

  it("answers a request without an Authorization header", async () => {
    const { app } = await fakeApp();
    expect((await app.inject({ method: "GET", url: "/v1/models" })).statusCode).toBe(200);
    const res = await app.inject({ method: "POST", url: "/v1/chat/completions", payload: chat() });
    expect(res.statusCode).toBe(200);
  });

  it("refuses an Authorization header with an empty key with 401 invalid_api_key", async () => {
    const { app } = await fakeApp();
    for (const headers of [{ authorization: "Bearer" }, { authorization: "Bearer   " }, { authorization: "" }, { authorization: "Basic" }]) {
      const res = await app.inject({ method: "GET", url: "/v1/models", headers });
      expect(res.statusCode).toBe(401);
      expect(res.json().error).toMatchObject({ type: "invalid_request_error", code: "invalid_api_key", param: null });
    }
  });

  it("does not ask for a key on /health and /metrics", async () => {
    const { app } = await fakeApp();
    expect((await app.inject({ method: "GET", url: "/health" })).statusCode).toBe(200);
    expect((await app.inject({ method: "GET", url: "/metrics" })).statusCode).toBe(200);
  });
});

describe("local mode with shared keys", () => {
  const keyed = () => fakeApp({ auth: { mode: "local", keys: ["sk-first", "sk-second"] } });

  it("answers a request that carries one of the keys, as a bearer token or Anthropic's x-api-key", async () => {
    const { app } = await keyed();
    for (const headers of [{ authorization: "Bearer sk-first" }, { authorization: "bearer  sk-second " }, { "x-api-key": "sk-second" }]) {
      const res = await app.inject({ method: "POST", url: "/v1/chat/completions", payload: chat(), headers });
      expect(res.statusCode, JSON.stringify(headers)).toBe(200);
    }
  });

  it("refuses a request without a key, or with another one, with 401 invalid_api_key on every API", async () => {
    const { app } = await keyed();
    const routes = [
      { method: "GET", url: "/v1/models" },
      { method: "POST", url: "/v1/chat/completions", payload: chat() },
      { method: "POST", url: "/api/chat", payload: { ...chat(), stream: false } },
      { method: "POST", url: "/tokenize", payload: { content: "hi" } },
      { method: "GET", url: "/metrics" },
    ] as const;
    for (const route of routes) {
      for (const headers of [{}, { authorization: "Bearer sk-firs" }, { authorization: "Bearer sk-first-and-more" }, { "x-api-key": "sk-third" }]) {
        const res = await app.inject({ ...route, headers });
        expect(res.statusCode, `${route.url} ${JSON.stringify(headers)}`).toBe(401);
        if (route.url.startsWith("/v1")) expect(res.json().error).toMatchObject({ type: "invalid_request_error", code: "invalid_api_key", param: null });
      }
    }
    const wrong = await app.inject({ method: "GET", url: "/v1/models", headers: { authorization: "Bearer sk-not-the-key" } });
    expect(wrong.json().error.message).toBe("Incorrect API key provided: sk-no****-key.");
  });

  it("keeps /health open and puts /metrics behind the keys", async () => {
    const { app } = await keyed();
    expect((await app.inject({ method: "GET", url: "/health" })).statusCode).toBe(200);
    expect((await app.inject({ method: "GET", url: "/metrics", headers: { authorization: "Bearer sk-second" } })).statusCode).toBe(200);
  });
});

describe("cloud mode", () => {
  it("stores only the keyed hash of a key", async () => {
    const { db, keys } = cloud();
    const { key, record } = await keys.create("ci");
    expect(key).toMatch(/^kiln-/);
    const row = db.prepare("SELECT * FROM api_keys WHERE id = ?").get(record.id) as Record<string, unknown>;
    expect(row.key_hash).toBe(hashKey(key, TEST_KEY_SECRET));
    expect(JSON.stringify(row)).not.toContain(key);
    expect((await keys.list()).map((k) => k.id)).toEqual([record.id]);
  });

  it("accepts known keys, refuses unknown and revoked ones with 401", async () => {
    const { keys } = cloud();
    const { key, record } = await keys.create("ci");
    const { app } = await fakeApp({ auth: { mode: "cloud", keys } });
    const call = (k: string) => app.inject({ method: "POST", url: "/v1/chat/completions", payload: chat(), headers: { authorization: `Bearer ${k}` } });
    expect((await call(key)).statusCode).toBe(200);
    const unknown = await call("kiln-not-a-key");
    expect(unknown.statusCode).toBe(401);
    expect(unknown.json().error).toMatchObject({ type: "invalid_request_error", code: "invalid_api_key" });
    expect(unknown.json().error.message).not.toContain("kiln-not-a-key");
    const none = await app.inject({ method: "POST", url: "/v1/chat/completions", payload: chat() });
    expect(none.statusCode).toBe(401);
    expect(none.json().error).toMatchObject({ code: "invalid_api_key" });
    expect(await keys.revoke(record.id)).toBe(true);
    expect(await keys.revoke(record.id)).toBe(false);
    expect((await call(key)).statusCode).toBe(401);
  });

  it("takes the key from x-api-key (Anthropic's clients) when there is no Authorization header, on every route", async () => {
    const { keys } = cloud();
    const { key } = await keys.create("anthropic");
    const { app } = await fakeApp({ auth: { mode: "cloud", keys } });
    const messages = (headers: Record<string, string>) =>
      app.inject({ method: "POST", url: "/v1/messages", payload: { model: SLUG, max_tokens: 4, messages: [{ role: "user", content: "hi" }] }, headers });
    expect((await messages({ "x-api-key": key })).statusCode).toBe(200);
    const wrong = await messages({ "x-api-key": "kiln-not-a-key" });
    expect(wrong.statusCode).toBe(401);
    expect(wrong.json()).toEqual({ type: "error", error: { type: "authentication_error", message: expect.any(String) } });
    expect((await messages({ "x-api-key": " " })).statusCode).toBe(401);
    expect((await app.inject({ method: "POST", url: "/v1/chat/completions", payload: chat(), headers: { "x-api-key": key } })).statusCode).toBe(200);
    // An Authorization header, when there is one, is the key.
    expect((await messages({ "x-api-key": key, authorization: "Bearer kiln-not-a-key" })).statusCode).toBe(401);
  });

  it("answers 403 permission_error for a model outside the key's list", async () => {
    const { keys } = cloud();
    const { key } = await keys.create("limited", { models: ["smollm2-360m-instruct"] });
    const { app } = await fakeApp({ auth: { mode: "cloud", keys } });
    const res = await app.inject({ method: "POST", url: "/v1/chat/completions", payload: chat(), headers: { authorization: `Bearer ${key}` } });
    expect(res.statusCode).toBe(403);
    expect(res.json().error).toMatchObject({ type: "permission_error", param: "model" });
    const { key: all } = await keys.create("all", { models: [SLUG] });
    expect((await app.inject({ method: "POST", url: "/v1/chat/completions", payload: chat(), headers: { authorization: `Bearer ${all}` } })).statusCode).toBe(
      200,
    );
  });

  it("records usage per request with the key and the cost", async () => {
    const { db, keys } = cloud();
    const { key, record } = await keys.create("billing");
    const { app } = await fakeApp({ auth: { mode: "cloud", keys }, usage: sqliteUsageRecorder(db, (slug) => getModel(slug)) });
    const res = await app.inject({ method: "POST", url: "/v1/chat/completions", payload: chat(), headers: { authorization: `Bearer ${key}` } });
    const rows = db.prepare("SELECT * FROM usage").all() as any[];
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({
      request_id: res.json().id,
      key_id: record.id,
      slug: SLUG,
      prompt_tokens: res.json().usage.prompt_tokens,
      completion_tokens: 3,
    });
    expect(rows[0].cost_nano_usd).toBeGreaterThan(0);
  });

  it("meters Anthropic's and Ollama's routes as it meters chat, each request once under its own id", async () => {
    const { db, keys } = cloud();
    const { key, record } = await keys.create("other-apis");
    const { app } = await fakeApp({ auth: { mode: "cloud", keys }, usage: sqliteUsageRecorder(db, (slug) => getModel(slug)) });
    const messages = await app.inject({
      method: "POST",
      url: "/v1/messages",
      payload: { model: SLUG, max_tokens: 8, messages: [{ role: "user", content: "hi" }] },
      headers: { "x-api-key": key },
    });
    const ollama = await app.inject({ method: "POST", url: "/api/chat", payload: { ...chat(), stream: false }, headers: { authorization: `Bearer ${key}` } });
    const streamed = await app.inject({
      method: "POST",
      url: "/api/generate",
      payload: { model: SLUG, prompt: "hi" },
      headers: { authorization: `Bearer ${key}` },
    });
    expect([messages.statusCode, ollama.statusCode, streamed.statusCode]).toEqual([200, 200, 200]);
    const rows = db.prepare("SELECT * FROM usage ORDER BY rowid").all() as any[];
    expect(rows.map((r) => [r.key_id, r.slug, r.completion_tokens])).toEqual([
      [record.id, SLUG, 3],
      [record.id, SLUG, 3],
      [record.id, SLUG, 3],
    ]);
    expect(rows[0]).toMatchObject({ request_id: messages.json().id, prompt_tokens: messages.json().usage.input_tokens });
    expect(rows[1].prompt_tokens).toBe(ollama.json().prompt_eval_count);
    expect(new Set(rows.map((r) => r.request_id)).size).toBe(3);
    expect(rows.every((r) => r.cost_nano_usd > 0)).toBe(true);
    // Without a key, Ollama's routes are refused in its error shape.
    const none = await app.inject({ method: "POST", url: "/api/chat", payload: chat() });
    expect(none.statusCode).toBe(401);
    expect(typeof none.json().error).toBe("string");
  });
});
