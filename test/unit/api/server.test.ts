/** Cross-cutting behaviour: request ids, logs, /health, /metrics, client disconnects, draining. */
import { readFileSync } from "node:fs";
import { Writable } from "node:stream";
import { openDatabase } from "../../../src/catalogue/db.js";
import { sqliteKeyStore } from "../cloud/keys-support.js";
import pino from "pino";
import { describe, expect, it, vi } from "vitest";
import { drainApp } from "../../../src/api/app.js";
import { Lifecycle } from "../../../src/api/context.js";
import { ModelRegistry } from "../../../src/scheduler/index.js";
import { AUTH, fakeApp, fakeModel, sseEvents, SLUG } from "./fake-model.js";

const chat = (over: Record<string, unknown> = {}) => ({ model: SLUG, messages: [{ role: "user", content: "hi" }], ...over });

describe("request ids", () => {
  it("echoes the client's x-request-id, or makes one, on every answer", async () => {
    const { app } = await fakeApp();
    const answers = await Promise.all([
      app.inject({ method: "POST", url: "/v1/chat/completions", payload: chat(), headers: { ...AUTH, "x-request-id": "client-id-1" } }),
      app.inject({ method: "POST", url: "/v1/chat/completions", payload: chat({ stream: true }), headers: { ...AUTH, "x-request-id": "client-id-2" } }),
      app.inject({ method: "GET", url: "/v1/nowhere", headers: { "x-request-id": "client-id-3" } }),
      app.inject({ method: "POST", url: "/v1/chat/completions", payload: chat({ temperature: 9 }), headers: { ...AUTH, "x-request-id": "client-id-4" } }),
      app.inject({ method: "GET", url: "/v1/models", headers: { "x-request-id": "client-id-5" } }),
    ]);
    expect(answers.map((a) => a.headers["x-request-id"])).toEqual(["client-id-1", "client-id-2", "client-id-3", "client-id-4", "client-id-5"]);
    const fresh = await app.inject({ method: "GET", url: "/health" });
    const other = await app.inject({ method: "GET", url: "/health" });
    expect(fresh.headers["x-request-id"]).toMatch(/^req_[0-9a-f]{32}$/);
    expect(other.headers["x-request-id"]).not.toBe(fresh.headers["x-request-id"]);
    const weird = await app.inject({ method: "GET", url: "/health", headers: { "x-request-id": "has spaces" } });
    expect(weird.headers["x-request-id"]).toMatch(/^req_/);
  });

  it("logs with the request id", async () => {
    const lines: any[] = [];
    const sink = new Writable({
      write(chunk, _enc, done) {
        for (const line of String(chunk).split("\n").filter(Boolean)) lines.push(JSON.parse(line));
        done();
      },
    });
    const { app } = await fakeApp({ logger: pino({ level: "info" }, sink) });
    await app.inject({ method: "POST", url: "/v1/chat/completions", payload: chat({ temperature: 9 }), headers: { ...AUTH, "x-request-id": "log-me" } });
    const mine = lines.filter((l) => l.request_id === "log-me");
    expect(mine.length).toBeGreaterThanOrEqual(2);
    expect(mine.some((l) => l.code === "invalid_value")).toBe(true);
  });
});

describe("/health, /version and /metrics", () => {
  it("/version names the server and its version, with no key even in cloud mode", async () => {
    const { version } = JSON.parse(readFileSync(new URL("../../../package.json", import.meta.url), "utf8")) as { version: string };
    const { app } = await fakeApp({ auth: { mode: "cloud", keys: sqliteKeyStore(openDatabase({ path: ":memory:" })) } });
    const res = await app.inject({ method: "GET", url: "/version" });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ version, server: "kiln" });
    await app.close();
  });

  it("/health answers 503 while models load, then 200", async () => {
    const models = new ModelRegistry();
    models.expect(SLUG, "compiling");
    const { app } = await fakeApp({ models });
    const loading = await app.inject({ method: "GET", url: "/health" });
    expect(loading.statusCode).toBe(503);
    expect(loading.json()).toEqual({ status: "loading", models: { [SLUG]: "loading (compiling)" }, device: { name: "cpu", adapter: null, software: false } });
    models.serve(fakeModel().model);
    const ok = await app.inject({ method: "GET", url: "/health" });
    expect(ok.statusCode).toBe(200);
    expect(ok.json()).toEqual({ status: "ok", models: { [SLUG]: "serving" }, device: { name: "cpu", adapter: null, software: false } });
  });

  it("/metrics exposes requests, tokens, latency histograms and cancellations in Prometheus format", async () => {
    const { app } = await fakeApp();
    await app.inject({ method: "POST", url: "/v1/chat/completions", payload: chat(), headers: AUTH });
    await app.inject({ method: "POST", url: "/v1/chat/completions", payload: chat({ top_p: 7 }), headers: AUTH });
    const res = await app.inject({ method: "GET", url: "/metrics" });
    expect(res.headers["content-type"]).toMatch(/^text\/plain; version=0\.0\.4/);
    const text = res.body;
    expect(text).toContain('kiln_http_requests_total{method="POST",route="/v1/chat/completions",status="200"} 1');
    expect(text).toContain('kiln_http_requests_total{method="POST",route="/v1/chat/completions",status="400"} 1');
    expect(text).toMatch(/kiln_prompt_tokens_total\{model="smollm2-135m-instruct"\} \d+/);
    expect(text).toContain('kiln_completion_tokens_total{model="smollm2-135m-instruct"} 3');
    expect(text).toContain('kiln_time_to_first_token_seconds_count{model="smollm2-135m-instruct"} 1');
    expect(text).toContain('kiln_time_to_first_token_seconds_bucket{model="smollm2-135m-instruct",le="+Inf"} 1');
    expect(text).toContain('kiln_time_per_output_token_seconds_count{model="smollm2-135m-instruct"} 1');
    expect(text).toContain('kiln_requests_cancelled_total{model="smollm2-135m-instruct"} 0');
    expect(text).toContain("# TYPE kiln_time_to_first_token_seconds histogram");
    for (const line of text.trimEnd().split("\n")) expect(line).toMatch(/^(# (HELP|TYPE) \w+ .+|\w+(\{[^}]*\})? [-+0-9.eE]+|\w+(\{[^}]*\})? \+Inf)$/);
    expect(text).toContain('kiln_device_info{adapter="",device="cpu",software="false"} 1');
  });

  it("/health and /metrics name the device and its adapter", async () => {
    const { app } = await fakeApp({ device: { device: "webgpu", adapter: "Mesa lavapipe", software: true } });
    expect((await app.inject({ method: "GET", url: "/health" })).json().device).toEqual({ name: "webgpu", adapter: "Mesa lavapipe", software: true });
    const metrics = (await app.inject({ method: "GET", url: "/metrics" })).body;
    expect(metrics).toContain("# TYPE kiln_device_info gauge");
    expect(metrics).toContain('kiln_device_info{adapter="Mesa lavapipe",device="webgpu",software="true"} 1');
  });
});

describe("over real HTTP", () => {
  async function listening(fake = fakeModel({ script: Array(2000).fill(256), tokenDelayMs: 2, contextLength: 4096 })) {
    const lifecycle = new Lifecycle();
    const { app } = await fakeApp({ fake, lifecycle, sse: { keepAliveMs: 0 } });
    const url = await app.listen({ port: 0, host: "127.0.0.1" });
    return { app, fake, lifecycle, url };
  }

  it("stops generating when a streaming client disconnects, and counts the cancellation", async () => {
    const { app, fake, url, lifecycle } = await listening();
    try {
      const controller = new AbortController();
      const res = await fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: { ...AUTH, "content-type": "application/json" },
        body: JSON.stringify(chat({ stream: true, max_tokens: 2000 })),
        signal: controller.signal,
      });
      expect(res.status).toBe(200);
      const reader = res.body!.getReader();
      await reader.read();
      await reader.read();
      expect(fake.backend.computed).toBeGreaterThan(0);
      controller.abort();
      await new Promise((r) => setTimeout(r, 100));
      const computed = fake.backend.computed;
      await new Promise((r) => setTimeout(r, 100));
      expect(fake.backend.computed).toBe(computed);
      expect(computed).toBeLessThan(200);
      const metrics = await (await fetch(`${url}/metrics`)).text();
      expect(metrics).toContain('kiln_requests_cancelled_total{model="smollm2-135m-instruct"} 1');
      // Counted among the HTTP requests once, as the client-closed status (nginx's 499): nobody got an answer.
      expect(metrics).toMatch(/^kiln_http_requests_total\{method="POST",route="\/v1\/chat\/completions",status="499"\} 1$/m);
      expect(metrics).not.toMatch(/kiln_http_requests_total\{method="POST",route="\/v1\/chat\/completions",status="200"\}/);
      // The abandoned request is over for draining purposes too (only the /metrics call was counted and finished).
      await vi.waitFor(() => expect(lifecycle.inFlight).toBe(0));
    } finally {
      await app.close();
    }
  });

  it("stops generating when a non-streaming client disconnects", async () => {
    const { app, fake, url, lifecycle } = await listening();
    try {
      const controller = new AbortController();
      const pending = fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: { ...AUTH, "content-type": "application/json" },
        body: JSON.stringify(chat({ max_tokens: 2000 })),
        signal: controller.signal,
      }).catch(() => null);
      await new Promise((r) => setTimeout(r, 60));
      expect(fake.backend.computed).toBeGreaterThan(0);
      controller.abort();
      await pending;
      await new Promise((r) => setTimeout(r, 60));
      const computed = fake.backend.computed;
      await new Promise((r) => setTimeout(r, 60));
      expect(fake.backend.computed).toBe(computed);
      expect(computed).toBeLessThan(200);
      const metrics = await (await fetch(`${url}/metrics`)).text();
      expect(metrics).toContain('kiln_requests_cancelled_total{model="smollm2-135m-instruct"} 1');
      // Counted among the HTTP requests once, as the client-closed status (nginx's 499): nobody got an answer.
      expect(metrics).toMatch(/^kiln_http_requests_total\{method="POST",route="\/v1\/chat\/completions",status="499"\} 1$/m);
      expect(metrics).not.toMatch(/kiln_http_requests_total\{method="POST",route="\/v1\/chat\/completions",status="200"\}/);
      // The abandoned request is over for draining purposes too (only the /metrics call was counted and finished).
      await vi.waitFor(() => expect(lifecycle.inFlight).toBe(0));
    } finally {
      await app.close();
    }
  });

  it("drains: new requests get 503, the running stream finishes, then the server closes", async () => {
    const { app, lifecycle, url } = await listening(fakeModel({ script: Array(30).fill(256), tokenDelayMs: 5 }));
    const running = fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { ...AUTH, "content-type": "application/json" },
      body: JSON.stringify(chat({ stream: true })),
    }).then((r) => r.text());
    await new Promise((r) => setTimeout(r, 30));
    const closed = drainApp(app, lifecycle);
    // Still listening while the stream runs: a new connection is told 503, not refused.
    const late = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { ...AUTH, "content-type": "application/json" },
      body: JSON.stringify(chat()),
    });
    expect(late.status).toBe(503);
    expect(((await late.json()) as any).error.code).toBe("overloaded");
    expect(late.headers.get("retry-after")).toBe("5");
    const body = await running;
    const events = sseEvents(body) as any[];
    expect(events.at(-1)).toBe("[DONE]");
    expect(
      events
        .slice(0, -1)
        .map((e) => e.choices[0].delta.content ?? "")
        .join(""),
    ).toBe("Hello".repeat(30));
    const t0 = Date.now();
    await closed;
    expect(Date.now() - t0).toBeLessThan(2000);
    await expect(fetch(`${url}/health`)).rejects.toThrow();
  });

  it("answers 503 to new requests once draining, /health included", async () => {
    const lifecycle = new Lifecycle();
    const { app } = await fakeApp({ lifecycle });
    lifecycle.startDraining();
    const refused = await app.inject({ method: "POST", url: "/v1/chat/completions", payload: chat(), headers: AUTH });
    expect(refused.statusCode).toBe(503);
    expect(refused.json().error).toMatchObject({ type: "server_error", code: "overloaded", param: null });
    expect(refused.headers["retry-after"]).toBeDefined();
    expect(refused.headers.connection).toBe("close");
    const health = await app.inject({ method: "GET", url: "/health" });
    expect(health.statusCode).toBe(503);
    expect(health.json().status).toBe("draining");
  });

  it("sends keep-alive comments while a stream is idle", async () => {
    const fake = fakeModel({ script: [256, 257], tokenDelayMs: 60 });
    const { app } = await fakeApp({ fake, sse: { keepAliveMs: 20 } });
    const res = await app.inject({ method: "POST", url: "/v1/chat/completions", payload: chat({ stream: true }), headers: AUTH });
    expect(res.body).toContain(": keep-alive\n\n");
    expect(sseEvents(res.body).at(-1)).toBe("[DONE]");
  });
});
