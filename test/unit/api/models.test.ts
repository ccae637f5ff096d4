/** GET /v1/models and /v1/models/{id}: the 42 catalogue models and their serving state. */
import { describe, expect, it } from "vitest";
import { MODELS } from "../../../src/catalogue/models.js";
import { ModelRegistry } from "../../../src/scheduler/index.js";
import { AUTH, fakeApp, fakeModel, SLUG } from "./fake-model.js";

describe("models", () => {
  it("lists every catalogue model with kiln's fields", async () => {
    const { app } = await fakeApp();
    const res = await app.inject({ method: "GET", url: "/v1/models", headers: AUTH });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body.object).toBe("list");
    expect(body.data).toHaveLength(42);
    expect(body.data.map((m: any) => m.id)).toEqual(MODELS.map((m) => m.slug));
    for (const m of body.data) {
      expect(m).toMatchObject({
        object: "model",
        owned_by: expect.any(String),
        created: expect.any(Number),
        context_length: expect.any(Number),
        native_context_length: expect.any(Number),
      });
      expect(m.context_length).toBeLessThanOrEqual(m.native_context_length);
      expect(m.max_model_len).toBe(m.context_length);
      expect(Array.isArray(m.capabilities)).toBe(true);
      expect(["serving", "available"]).toContain(m.status);
      if (m.kind === "text") {
        expect(m.pricing).toEqual({ input_usd_per_million_tokens: expect.any(Number), output_usd_per_million_tokens: expect.any(Number) });
      } else {
        expect(m.pricing).toEqual({ usd_per_audio_minute: expect.any(Number) });
      }
    }
    const llama = body.data.find((m: any) => m.id === "llama-3-3-70b-instruct");
    expect(llama).toMatchObject({
      status: "available",
      context_length: 131072,
      native_context_length: 131072,
      pricing: { input_usd_per_million_tokens: 0.09, output_usd_per_million_tokens: 0.14 },
    });
    expect(llama).not.toHaveProperty("artifact_id");
    // The device is said of served models only: a model not loaded runs nowhere yet.
    expect(llama).not.toHaveProperty("device");
    expect(body.data.find((m: any) => m.id === SLUG)).toMatchObject({ status: "serving", device: "cpu" });
    expect(body.data.find((m: any) => m.id === "whisper-large-v3").pricing).toEqual({ usd_per_audio_minute: 0.02 });
  });

  it("says the device each served model was loaded on", async () => {
    const fake = fakeModel();
    fake.model.device = "webgpu";
    const { app } = await fakeApp({ fake });
    expect((await app.inject({ method: "GET", url: `/v1/models/${SLUG}`, headers: AUTH })).json()).toMatchObject({ status: "serving", device: "webgpu" });
  });

  it("advertises tools and json_schema where kiln serves them, and nothing it does not serve", async () => {
    const { app } = await fakeApp();
    const body = (await app.inject({ method: "GET", url: "/v1/models", headers: AUTH })).json();
    const served = new Set(["chat", "completions", "tools", "json_schema", "streaming", "transcription", "reasoning", "embeddings"]);
    for (const m of body.data) for (const c of m.capabilities) expect(served, `${m.id}: ${c}`).toContain(c);
    expect(body.data.find((m: any) => m.id === SLUG).capabilities).toEqual(expect.arrayContaining(["tools", "json_schema"]));
    // Every text model embeds (/v1/embeddings pools its hidden states); a speech model does not.
    for (const m of body.data) expect(m.capabilities.includes("embeddings"), m.id).toBe(m.kind === "text");
  });

  it("marks the reasoning models: the catalogue's until served, then the served model's template", async () => {
    const { app } = await fakeApp();
    const list = (await app.inject({ method: "GET", url: "/v1/models", headers: AUTH })).json().data as Array<{ id: string; capabilities: string[] }>;
    const reasoning = list.filter((m) => m.capabilities.includes("reasoning")).map((m) => m.id);
    expect(reasoning.sort()).toEqual(
      ["deepseek-r1-distill-llama-8b", "deepseek-r1-distill-qwen-7b", ...list.filter((m) => m.id.startsWith("qwen-3-")).map((m) => m.id)].sort(),
    );
    expect(reasoning.length).toBe(7);
    expect(list.find((m) => m.id === SLUG)!.capabilities).not.toContain("reasoning");
    const served = await fakeApp({ fake: fakeModel({ reasoning: { switchable: true } }) });
    expect((await served.app.inject({ method: "GET", url: `/v1/models/${SLUG}`, headers: AUTH })).json().capabilities).toContain("reasoning");
  });

  it("shows the served model's artifact id and measured throughput", async () => {
    const { app } = await fakeApp();
    const before = (await app.inject({ method: "GET", url: `/v1/models/${SLUG}`, headers: AUTH })).json();
    expect(before).toMatchObject({ id: SLUG, status: "serving", artifact_id: "fake-artifact-1", measured_output_tokens_per_second: null });
    expect(before.created).toBe(Date.parse("2025-01-02T03:04:05.000Z") / 1000);
    await app.inject({ method: "POST", url: "/v1/chat/completions", payload: { model: SLUG, messages: [{ role: "user", content: "x" }] }, headers: AUTH });
    const after = (await app.inject({ method: "GET", url: `/v1/models/${SLUG}`, headers: AUTH })).json();
    expect(after.measured_output_tokens_per_second).toBeGreaterThan(0);
  });

  it("tells when and why the artifact in service was promoted, and measures each artifact apart", async () => {
    const { app, fake, models } = await fakeApp();
    const get = async () => (await app.inject({ method: "GET", url: `/v1/models/${SLUG}`, headers: AUTH })).json();
    expect(await get()).toMatchObject({ last_optimized_at: null, optimization: null });
    const chat = () =>
      app.inject({ method: "POST", url: "/v1/chat/completions", payload: { model: SLUG, messages: [{ role: "user", content: "x" }] }, headers: AUTH });
    await chat();
    expect((await get()).measured_output_tokens_per_second).toBeGreaterThan(0);

    const next = fakeModel().model;
    next.artifactId = "fake-artifact-2";
    next.promotion = {
      id: "p1",
      slug: SLUG,
      artifactId: "fake-artifact-2",
      settings: { prefillChunk: 128 },
      metrics: { decode_tokens_per_second: 150 },
      quality: { kl_divergence: 0.004 },
      reason: "track: 12% faster decode",
      createdAt: "2026-01-02T03:04:05.678Z",
      promoted: true,
    };
    await models.switchModel(SLUG, async () => next);
    const after = await get();
    expect(after).toMatchObject({
      artifact_id: "fake-artifact-2",
      last_optimized_at: Math.floor(Date.parse("2026-01-02T03:04:05.678Z") / 1000),
      optimization: {
        reason: "track: 12% faster decode",
        settings: { prefillChunk: 128 },
        metrics: { decode_tokens_per_second: 150 },
        quality: { kl_divergence: 0.004 },
      },
      // The artifact before it answered every request so far: nothing is measured on this one yet.
      measured_output_tokens_per_second: null,
    });
    await chat();
    expect((await get()).measured_output_tokens_per_second).toBeGreaterThan(0);
    expect(fake.model.artifactId).toBe("fake-artifact-1");
    // Fields of models that are not served stay as they were.
    expect((await app.inject({ method: "GET", url: "/v1/models/llama-3-3-70b-instruct", headers: AUTH })).json()).not.toHaveProperty("last_optimized_at");
  });

  it("reports the context a request can use on a served model, beside the model's own window", async () => {
    const fake = fakeModel({ contextLength: 5760, nativeContextLength: 8192 });
    const { app } = await fakeApp({ fake });
    const model = (await app.inject({ method: "GET", url: `/v1/models/${SLUG}`, headers: AUTH })).json();
    expect(model).toMatchObject({ status: "serving", context_length: 5760, native_context_length: 8192 });
    const listed = (await app.inject({ method: "GET", url: "/v1/models", headers: AUTH })).json().data.find((m: any) => m.id === SLUG);
    expect(listed).toMatchObject({ context_length: 5760, native_context_length: 8192 });
    // What it reports is what a request gets: one token past it is refused.
    const tooLong = await app.inject({ method: "POST", url: "/v1/completions", payload: { model: SLUG, prompt: "x", max_tokens: 5760 }, headers: AUTH });
    expect(tooLong.json().error).toMatchObject({ code: "context_length_exceeded", param: "max_tokens" });
    expect(tooLong.json().error.message).toContain("maximum context length is 5760 tokens");
  });

  it("shows loading and failed models", async () => {
    const models = new ModelRegistry();
    models.expect(SLUG);
    models.fail("smollm2-360m-instruct", "no memory");
    const { app } = await fakeApp({ models });
    const data = (await app.inject({ method: "GET", url: "/v1/models", headers: AUTH })).json().data;
    expect(data.find((m: any) => m.id === SLUG).status).toBe("loading");
    expect(data.find((m: any) => m.id === "smollm2-360m-instruct").status).toBe("failed");
    expect(data.filter((m: any) => "device" in m)).toEqual([]);
  });

  it("retrieves one model, its id raw or percent-encoded", async () => {
    const { app } = await fakeApp();
    for (const url of [`/v1/models/${SLUG}`, `/v1/models/${encodeURIComponent(SLUG).replace(/-/g, "%2D")}`]) {
      const res = await app.inject({ method: "GET", url, headers: AUTH });
      expect(res.statusCode).toBe(200);
      expect(res.json().id).toBe(SLUG);
    }
  });

  it("retrieves a model by a common spelling (its source repository id, raw or percent-encoded), answering with its slug", async () => {
    const { app } = await fakeApp();
    for (const url of ["/v1/models/HuggingFaceTB/SmolLM2-135M-Instruct", "/v1/models/HuggingFaceTB%2FSmolLM2-135M-Instruct", "/v1/models/smollm2:135m"]) {
      const res = await app.inject({ method: "GET", url, headers: AUTH });
      expect(res.statusCode, url).toBe(200);
      expect(res.json()).toMatchObject({ id: SLUG, status: "serving" });
    }
  });

  it("answers 404 model_not_found for unknown ids, including ids with a slash", async () => {
    const { app } = await fakeApp();
    for (const url of ["/v1/models/gpt-4o", "/v1/models/HuggingFaceTB/SmolLM2-9B-Instruct", "/v1/models/HuggingFaceTB%2FSmolLM2-9B-Instruct"]) {
      const res = await app.inject({ method: "GET", url, headers: AUTH });
      expect(res.statusCode).toBe(404);
      expect(res.json().error).toMatchObject({ type: "invalid_request_error", code: "model_not_found", param: "model" });
    }
    const slash = await app.inject({ method: "GET", url: "/v1/models/a%2Fb", headers: AUTH });
    expect(slash.json().error.message).toContain("'a/b'");
  });

  it("answers without an Authorization header in local mode; an empty key is a 401", async () => {
    const { app } = await fakeApp({ fake: fakeModel() });
    expect((await app.inject({ method: "GET", url: "/v1/models" })).statusCode).toBe(200);
    expect((await app.inject({ method: "GET", url: "/v1/models", headers: { authorization: "Bearer " } })).statusCode).toBe(401);
  });
});
