/**
 * Ollama's native API on a fake model: lines of JSON while streaming (the default) ending with a
 * `done` line that carries the reason, counts and durations; one object with `stream: false`;
 * `options` reaching the sampler with Ollama's defaults; `format`, tools and thinking as on chat;
 * errors as `{"error": "..."}` with the right status, mid-stream too; the model listings.
 */
import { describe, expect, it } from "vitest";
import { keepAliveMs } from "../../../src/api/protocol/ollama.js";
import type { OpenSlotOp } from "../../../src/runtime/text-worker/protocol.js";
import { AUTH, EOS, fakeApp, fakeModel, FIM, SLUG, word } from "./fake-model.js";
import { fakeHidden } from "../scheduler/engine/fake-step-runner.js";

const bytes = (text: string) => [...new TextEncoder().encode(text)];
const HELLO = [word("Hello"), word(" world"), word("!")];

async function post(url: string, payload: Record<string, unknown>, fake = fakeModel({ script: HELLO })) {
  const { app } = await fakeApp({ fake });
  const res = await app.inject({ method: "POST", url, payload, headers: AUTH });
  return { res, fake };
}

/** The lines of an NDJSON body, parsed (each must be one JSON object). */
function lines(body: string): Array<Record<string, any>> {
  expect(body.endsWith("\n")).toBe(true);
  return body
    .slice(0, -1)
    .split("\n")
    .map((l) => JSON.parse(l) as Record<string, any>);
}

const chat = (over: Record<string, unknown> = {}) => ({ model: SLUG, messages: [{ role: "user", content: "hi" }], ...over });

describe("POST /api/chat", () => {
  it("streams lines of JSON by default: the text's pieces, then a done line with the reason, counts and durations", async () => {
    const { res } = await post("/api/chat", chat());
    expect(res.statusCode).toBe(200);
    expect(res.headers["content-type"]).toBe("application/x-ndjson");
    const all = lines(res.body);
    const last = all.at(-1)!;
    expect(all.slice(0, -1).every((l) => l.done === false && l.message.role === "assistant" && l.model === SLUG)).toBe(true);
    expect(
      all
        .slice(0, -1)
        .map((l) => l.message.content)
        .join(""),
    ).toBe("Hello world!");
    expect(last).toMatchObject({
      model: SLUG,
      message: { role: "assistant", content: "" },
      done: true,
      done_reason: "stop",
      prompt_eval_count: "<user>hi<assistant>".length,
      eval_count: 3,
    });
    for (const key of ["total_duration", "load_duration", "prompt_eval_duration", "eval_duration"]) expect(last[key], key).toBeGreaterThanOrEqual(0);
    expect(last.total_duration).toBeGreaterThanOrEqual(last.eval_duration);
    expect(new Date(last.created_at).toISOString()).toBe(last.created_at);
  });

  it("answers one object with stream false; num_predict is the budget and ends it with 'length'", async () => {
    const { res } = await post("/api/chat", chat({ stream: false, options: { num_predict: 2 } }));
    expect(res.headers["content-type"]).toMatch(/^application\/json/);
    expect(res.json()).toMatchObject({ message: { role: "assistant", content: "Hello world" }, done: true, done_reason: "length", eval_count: 2 });
  });

  it("options reach the sampler, with Ollama's defaults where left out; runtime options are named back as ignored", async () => {
    const fake = fakeModel({ script: HELLO });
    await post("/api/chat", chat({ stream: false }), fake);
    expect(fake.backend.samplings[0]).toMatchObject({ temperature: 0.8, top_k: 40, top_p: 0.9 });
    const tuned = fakeModel({ script: HELLO });
    const { res } = await post(
      "/api/chat",
      chat({ stream: false, options: { temperature: 0, top_k: 0, top_p: 1, seed: 7, repeat_penalty: 1.3, min_p: 0.05, num_ctx: 4096, num_thread: 2 } }),
      tuned,
    );
    expect(tuned.backend.samplings[0]).toMatchObject({ temperature: 0, top_p: 1, seed: 7, repetition_penalty: 1.3, min_p: 0.05 });
    expect(tuned.backend.samplings[0].top_k ?? -1).toBe(-1);
    expect(res.headers["x-kiln-ignored-fields"]).toBe("options.num_ctx, options.num_thread");
    const stopped = await post("/api/chat", chat({ stream: false, options: { stop: [" world"] } }));
    expect(stopped.res.json()).toMatchObject({ message: { content: "Hello" }, done_reason: "stop" });
  });

  it("format: 'json' holds the answer to a JSON object, a schema to the schema", async () => {
    const opened = (fake: ReturnType<typeof fakeModel>) =>
      fake.backend.calls.flatMap((c) => c.ops).find((op): op is OpenSlotOp => op.op === "open")?.constraint;
    const json = await post("/api/chat", chat({ stream: false, format: "json" }), fakeModel({ script: bytes("{}") }));
    expect(opened(json.fake)).toEqual({ type: "json_object" });
    const schema = { type: "object", properties: { age: { type: "integer" } }, required: ["age"] };
    const typed = await post("/api/chat", chat({ stream: false, format: schema }), fakeModel({ script: bytes('{"age": 3}') }));
    expect(opened(typed.fake)).toEqual({ type: "json_schema", schema: JSON.stringify(schema) });
    expect(typed.res.json().message.content).toBe('{"age": 3}');
    // Beside tools: calls alone, or content in the format alone.
    const tools = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }];
    const both = await post("/api/chat", chat({ stream: false, format: schema, tools }), fakeModel({ script: bytes('{"age": 3}') }));
    expect(both.res.json().message.content).toBe('{"age": 3}');
    const answer = JSON.parse((opened(both.fake) as { format: string }).format) as { type: string; elements: unknown[] };
    expect(answer).toMatchObject({
      type: "or",
      elements: [
        { type: "json_schema", json_schema: schema },
        { type: "tag", begin: "<tool_call>\n" },
      ],
    });
  });

  it("tool calls come whole, arguments as an object, after the text; a history with calls and results renders", async () => {
    const tools = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }];
    const text = 'Checking. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
    const whole = await post("/api/chat", chat({ stream: false, tools }), fakeModel({ script: bytes(text) }));
    expect(whole.res.json().message).toEqual({
      role: "assistant",
      content: "Checking.",
      tool_calls: [{ id: expect.stringMatching(/^call_/), function: { index: 0, name: "get_weather", arguments: { city: "Paris" } } }],
    });
    const streamed = lines((await post("/api/chat", chat({ tools }), fakeModel({ script: bytes(text) }))).res.body);
    expect(streamed.map((l) => l.message.content).join("")).toBe("Checking.");
    expect(streamed.filter((l) => l.message.tool_calls).map((l) => l.message.tool_calls[0].function)).toEqual([
      { index: 0, name: "get_weather", arguments: { city: "Paris" } },
    ]);
    const history = [
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: "", tool_calls: [{ function: { name: "get_weather", arguments: { city: "Paris" } } }] },
      { role: "tool", tool_name: "get_weather", content: "sunny" },
    ];
    const replay = await post("/api/chat", chat({ stream: false, tools, messages: history }), fakeModel({ script: bytes("Sunny.") }));
    expect(replay.res.statusCode, replay.res.body).toBe(200);
    const [, call, result] = replay.fake.rendered[0] as Array<Record<string, any>>;
    expect(call.tool_calls[0]).toEqual({ id: expect.any(String), type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } });
    expect(result).toMatchObject({ role: "tool", content: "sunny", tool_call_id: call.tool_calls[0].id, name: "get_weather" });
  });

  it("a reasoning model's thinking is message.thinking, apart from the content, streamed and not; think false switches it off", async () => {
    const reasoner = () => fakeModel({ script: bytes("<think>\nHmm.\n</think>\n\nHi."), reasoning: { switchable: true } });
    const whole = await post("/api/chat", chat({ stream: false }), reasoner());
    expect(whole.res.json().message).toEqual({ role: "assistant", content: "Hi.", thinking: "\nHmm.\n" });
    const streamed = lines((await post("/api/chat", chat(), reasoner())).res.body);
    expect(streamed.map((l) => l.message.thinking ?? "").join("")).toBe("\nHmm.\n");
    expect(streamed.map((l) => l.message.content).join("")).toBe("Hi.");
    const off = await post("/api/chat", chat({ stream: false, think: false }), reasoner());
    expect(off.fake.renderedVariables[0]).toEqual({ enable_thinking: false });
  });

  it("an empty message list loads the model: done at once, with done_reason 'load'", async () => {
    const { res, fake } = await post("/api/chat", { model: SLUG, messages: [] });
    expect(res.json()).toMatchObject({ model: SLUG, message: { role: "assistant", content: "" }, done: true, done_reason: "load" });
    expect(fake.backend.calls).toHaveLength(0);
  });

  it("logprobs: each line's tokens with their log probabilities and alternatives", async () => {
    const { res } = await post("/api/chat", chat({ stream: false, logprobs: true, top_logprobs: 1 }));
    const lp = res.json().logprobs as Array<{ token: string; logprob: number; top_logprobs: unknown[] }>;
    expect(lp.map((e) => e.token)).toEqual(["Hello", " world", "!"]);
    expect(lp.every((e) => e.top_logprobs.length === 1 && e.logprob <= 0)).toBe(true);
  });
});

describe("POST /api/generate", () => {
  it("renders the prompt (and system) through the chat template, or takes it raw", async () => {
    const { res, fake } = await post("/api/generate", { model: SLUG, prompt: "hi", system: "be brief", stream: false });
    expect(res.json()).toMatchObject({ model: SLUG, response: "Hello world!", done: true, done_reason: "stop", eval_count: 3 });
    expect(fake.rendered[0]).toEqual([
      { role: "system", content: "be brief" },
      { role: "user", content: "hi" },
    ]);
    const raw = await post("/api/generate", { model: SLUG, prompt: "abc", raw: true, stream: false });
    expect(raw.fake.rendered).toHaveLength(0);
    expect(raw.res.json().prompt_eval_count).toBe(3);
    const streamed = lines((await post("/api/generate", { model: SLUG, prompt: "hi" })).res.body);
    expect(streamed.map((l) => l.response).join("")).toBe("Hello world!");
    expect(streamed.at(-1)).toMatchObject({ done: true, response: "" });
  });

  it("suffix fills in the middle on a model with the markers, and is a 400 on one without", async () => {
    const fim = fakeModel({ script: HELLO, fillsInMiddle: true });
    await post("/api/generate", { model: SLUG, prompt: "ab", suffix: "yz", stream: false }, fim);
    const prompt = fim.backend.calls.filter((c) => c.kind === "prefill").flatMap((c) => c.tokens);
    expect(prompt).toEqual([FIM.prefix, ...bytes("ab"), FIM.suffix, ...bytes("yz"), FIM.middle]);
    const plain = await post("/api/generate", { model: SLUG, prompt: "ab", suffix: "yz" });
    expect(plain.res.statusCode).toBe(400);
    expect(plain.res.json().error).toMatch(/does not support insert/);
  });

  it("an empty prompt loads the model; keep_alive 0 (unload) on a model the server was started with is refused with the reason", async () => {
    expect((await post("/api/generate", { model: SLUG })).res.json()).toMatchObject({ response: "", done: true, done_reason: "load" });
    const unload = await post("/api/generate", { model: SLUG, keep_alive: 0 });
    expect(unload.res.statusCode).toBe(400);
    expect(unload.res.json().error).toMatch(/--model/);
  });
});

describe("keep_alive", () => {
  it("reads seconds and Go durations as Ollama does; negative keeps the model; anything else is a 400", () => {
    expect([300, "300", "5m", "1h30m", "1.5s", "250ms", "0", 0, "0s"].map((v) => keepAliveMs(v))).toEqual([
      300_000, 300_000, 300_000, 5_400_000, 1500, 250, 0, 0, 0,
    ]);
    expect([-1, "-1", "-1m"].map((v) => keepAliveMs(v))).toEqual([Infinity, Infinity, Infinity]);
    expect(keepAliveMs(undefined)).toBeUndefined();
    for (const bad of ["5 minutes", "m", "1d", ""]) expect(() => keepAliveMs(bad), bad).toThrow(/keep_alive/);
  });
});

describe("Ollama's errors and listings", () => {
  it("errors are {error: message} with the status of the same error on /v1", async () => {
    const cases: Array<[string, Record<string, unknown>, number, RegExp]> = [
      ["/api/chat", { model: "nope", messages: [{ role: "user", content: "hi" }] }, 404, /does not exist/],
      ["/api/chat", { messages: [] }, 400, /model/],
      ["/api/chat", chat({ options: { temperature: -1 } }), 400, /temperature/],
      ["/api/chat", chat({ options: { typical_p: 0.5 } }), 400, /typical/],
      ["/api/chat", chat({ messages: [{ role: "robot", content: "x" }] }), 400, /role/],
      ["/api/chat", chat({ messages: [{ role: "user", content: "x", images: ["aGk="] }] }), 400, /images/],
      ["/api/chat", chat({ think: true }), 400, /think/],
      ["/api/chat", chat({ format: { type: "object", properties: { a: { type: "string", pattern: "[^é]" } } } }), 400, /format/],
      ["/api/generate", { model: SLUG, prompt: "x", template: "{{ .Prompt }}" }, 400, /template/],
      ["/api/generate", { model: SLUG, prompt: "x", context: [1, 2] }, 400, /context/],
      ["/api/generate", { model: SLUG, prompt: "x", raw: true, suffix: "y" }, 400, /raw/],
      ["/api/pull", { model: SLUG }, 400, /only the models it was started with/],
      ["/api/push", { model: SLUG }, 501, /no model registry/],
      ["/api/embed", { model: SLUG, input: "x", truncate: false, dimensions: 9 }, 400, /dimensions/],
      ["/api/embed", { model: SLUG, input: ["x", ""] }, 400, /empty/],
      ["/api/embed", { model: SLUG, input: "x".repeat(600), truncate: false }, 400, /context length/],
      ["/api/embeddings", { model: SLUG, prompt: 5 }, 400, /prompt/],
      ["/api/nothing", {}, 404, /Unknown request URL/],
    ];
    for (const [url, payload, status, message] of cases) {
      const { res } = await post(url, payload);
      expect(res.statusCode, `${url} ${JSON.stringify(payload)}: ${res.body}`).toBe(status);
      const body = res.json();
      expect(Object.keys(body)).toEqual(["error"]);
      expect(typeof body.error).toBe("string");
      expect(body.error).toMatch(message);
    }
    const { app } = await fakeApp({ fake: fakeModel() });
    const bad = await app.inject({ method: "POST", url: "/api/chat", payload: "{nope", headers: { ...AUTH, "content-type": "application/json" } });
    expect(bad.statusCode).toBe(400);
    expect(typeof bad.json().error).toBe("string");
  });

  it("a failure after the first line ends the stream with an {error} line", async () => {
    // The prompt pass samples "Hello"; the first decode step's message never comes back (a worker crash).
    const fake = fakeModel({ script: HELLO, failWhen: { match: (call) => call.rows > 0 && call.tokensPerRow === 1, error: new Error("worker crashed") } });
    const { res } = await post("/api/chat", chat(), fake);
    expect(res.statusCode).toBe(200);
    const all = lines(res.body);
    expect(all[0].message.content).toBe("Hello");
    expect(all.at(-1)).toEqual({ error: expect.stringContaining("request id") });
    expect(res.body).not.toContain("worker crashed");
  });

  it("/api/version, /api/tags, /api/ps and /api/show describe the server and its model", async () => {
    const { app } = await fakeApp({ fake: fakeModel() });
    const get = async (url: string) => (await app.inject({ method: "GET", url, headers: AUTH })).json();
    expect((await get("/api/version")).version).toMatch(/^\d+\.\d+\.\d+/);
    // The fake model is served but not in a loader's store: it is listed as running.
    const running = await get("/api/ps");
    expect(running.models).toEqual([
      expect.objectContaining({
        name: SLUG,
        model: SLUG,
        size_vram: 0,
        details: expect.objectContaining({ format: "gguf", family: "llama", parameter_size: "135M" }),
      }),
    ]);
    expect((await get("/api/tags")).models.map((m: { name: string }) => m.name)).toEqual([SLUG]);
    const shown = (await app.inject({ method: "POST", url: "/api/show", payload: { model: SLUG }, headers: AUTH })).json();
    expect(shown.capabilities).toEqual(["completion", "tools"]);
    expect(Date.parse(shown.modified_at)).toBeGreaterThan(Date.parse("2025-01-01"));
    expect(Date.parse(running.models[0].modified_at ?? shown.modified_at)).toBeGreaterThan(Date.parse("2025-01-01"));
    // A model the server does not serve is dated by the server's start, in milliseconds like any other.
    const catalogueOnly = await app.inject({ method: "POST", url: "/api/show", payload: { model: "llama-3-2-1b-instruct" }, headers: AUTH });
    expect(Date.parse(catalogueOnly.json().modified_at)).toBeGreaterThan(Date.parse("2025-01-01"));
    // Showing a model the server does not have is a 404; showing one does not load it.
    const unknown = await app.inject({ method: "POST", url: "/api/show", payload: { model: "nope" }, headers: AUTH });
    expect(unknown.statusCode).toBe(404);
    expect(shown.details).toMatchObject({ quantization_level: "Q4_1" });
  });
});

describe("Ollama's embeddings", () => {
  const unit = (v: ArrayLike<number>) => Array.from(v, (x) => x / Math.hypot(...Array.from(v)));

  it("/api/embed answers unit-length vectors in input order, cuts a long input to its first tokens, and counts them", async () => {
    const { res } = await post("/api/embed", { model: SLUG, input: ["ab", "x".repeat(600)], options: { num_ctx: 64 } });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(Object.keys(body)).toEqual(["model", "embeddings", "total_duration", "load_duration", "prompt_eval_count"]);
    expect(body.model).toBe(SLUG);
    expect(body.prompt_eval_count).toBe(3 + 511);
    // The fake pools the last position: "ab" then the EOS its vocabulary asks for, at position 2; the long input's last kept "x" at 510.
    const want = [unit(fakeHidden(EOS, 2)), unit(fakeHidden("x".charCodeAt(0), 510))];
    body.embeddings.forEach((v: number[], i: number) => v.forEach((x, j) => expect(x).toBeCloseTo(want[i][j], 6)));
    expect(res.headers["x-kiln-ignored-fields"]).toBe("options.num_ctx");
    const cut = await post("/api/embed", { model: SLUG, input: "ab", dimensions: 2 });
    expect(cut.res.json().embeddings[0]).toHaveLength(2);
    const none = await post("/api/embed", { model: SLUG });
    expect(none.res.json()).toMatchObject({ embeddings: [], prompt_eval_count: 0 });
  });

  it("/api/embeddings answers one vector as pooled, and an empty one for no prompt", async () => {
    const { res } = await post("/api/embeddings", { model: SLUG, prompt: "ab" });
    expect(res.json()).toEqual({ embedding: Array.from(fakeHidden(EOS, 2)) });
    const empty = await post("/api/embeddings", { model: SLUG, prompt: "" });
    expect(empty.res.json()).toEqual({ embedding: [] });
  });
});

describe("Ollama's chat too long for the context", () => {
  // The fake renders `<role>content` per message, then `<assistant>`: one token per byte, a context of 512.
  const turns = Array.from({ length: 12 }, (_, i) => [
    { role: "user", content: `question ${i} `.padEnd(60, "q") },
    { role: "assistant", content: `answer ${i} `.padEnd(60, "a") },
  ]).flat();
  const history = [{ role: "system", content: "Be brief." }, ...turns, { role: "user", content: "last question" }];
  const rendered = (messages: Array<{ role: string; content: string }>) =>
    messages.map((m) => `<${m.role}>${m.content}`).join("").length + "<assistant>".length;

  it("keeps the system messages and as many of the latest turns as fit, from a user message, as Ollama cuts it", async () => {
    const fake = fakeModel({ script: HELLO });
    const { res } = await post("/api/chat", { model: SLUG, messages: history, stream: false }, fake);
    expect(res.statusCode).toBe(200);
    // The history was rendered a few times (a bisection over its user turns); the answer's prompt is the kept one.
    expect(fake.rendered.length).toBeLessThan(8);
    const kept = fake.rendered.find((r) => rendered(r as never) === res.json().prompt_eval_count)!;
    expect(kept[0]).toEqual({ role: "system", content: "Be brief." });
    expect(kept[1].role).toBe("user");
    expect(kept.slice(1)).toEqual(history.slice(history.length - (kept.length - 1)));
    const length = rendered(kept as never);
    expect(length).toBeLessThan(512);
    // One more turn (the question and answer before) would not have fitted.
    const from = history.length - (kept.length - 1);
    expect(rendered([history[0], ...history.slice(from - 2)])).toBeGreaterThanOrEqual(512);
  });

  it("refuses it with truncate false, and a last turn too long for the context either way", async () => {
    const refused = await post("/api/chat", { model: SLUG, messages: history, truncate: false, stream: false });
    expect(refused.res.statusCode).toBe(400);
    expect(refused.res.json().error).toMatch(/context length/);
    const tooLong = await post("/api/chat", { model: SLUG, messages: [...history.slice(0, -1), { role: "user", content: "x".repeat(600) }], stream: false });
    expect(tooLong.res.statusCode).toBe(400);
    expect(tooLong.res.json().error).toMatch(/last turn/);
  });
});
