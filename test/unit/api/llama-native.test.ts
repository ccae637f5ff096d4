/**
 * llama.cpp server's own `/completion` and `/infill` on a fake model: its answer shape (`content`,
 * `stop_type` and `stopping_word`, counts, `timings`, `completion_probabilities`), llama.cpp's
 * sampling defaults, its streamed `data:` events, the infill prompt, and errors in its shape.
 */
import { describe, expect, it } from "vitest";
import type { OpenSlotOp } from "../../../src/runtime/text-worker/protocol.js";
import { AUTH, EOS, fakeApp, fakeModel, FIM, SLUG, sseEvents, word } from "./fake-model.js";
import { fakeHidden } from "../scheduler/engine/fake-step-runner.js";

const bytes = (text: string) => [...new TextEncoder().encode(text)];
const HELLO = [word("Hello"), word(" world"), word("!")];

async function post(url: string, payload: Record<string, unknown>, fake = fakeModel({ script: HELLO })) {
  const { app } = await fakeApp({ fake });
  const res = await app.inject({ method: "POST", url, payload, headers: AUTH });
  return { res, fake };
}

const prefillTokens = (fake: ReturnType<typeof fakeModel>) => fake.backend.calls.filter((c) => c.kind === "prefill").flatMap((c) => c.tokens);

describe("POST /completion", () => {
  it("answers llama.cpp's object: the text, why it stopped, the counts and the timings", async () => {
    const { res, fake } = await post("/completion", { prompt: "abc" });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body).toMatchObject({
      index: 0,
      content: "Hello world!",
      stop: true,
      model: SLUG,
      tokens_predicted: 3,
      tokens_evaluated: 3,
      prompt: "abc",
      stop_type: "eos",
      stopping_word: "",
      truncated: false,
      has_new_line: false,
    });
    for (const key of [
      "cache_n",
      "prompt_n",
      "prompt_ms",
      "prompt_per_token_ms",
      "prompt_per_second",
      "predicted_n",
      "predicted_ms",
      "predicted_per_token_ms",
      "predicted_per_second",
    ]) {
      expect(typeof body.timings[key], key).toBe("number");
    }
    expect(body.timings).toMatchObject({ prompt_n: 3, predicted_n: 3 });
    // llama.cpp's sampling defaults where the request leaves them out; a request without `model` gets the one served.
    expect(fake.backend.samplings[0]).toMatchObject({ temperature: 0.8, top_k: 40, top_p: 0.95, min_p: 0.05 });
    expect(body.generation_settings).toMatchObject({ temperature: 0.8, top_k: 40, top_p: 0.95, min_p: 0.05, n_predict: expect.any(Number) });
  });

  it("names a stop word, and a budget's end; takes token ids, a logit bias list and n_probs", async () => {
    const word_ = (await post("/completion", { prompt: "abc", stop: [" world"] })).res.json();
    expect(word_).toMatchObject({ content: "Hello", stop_type: "word", stopping_word: " world" });
    expect((await post("/completion", { prompt: "abc", n_predict: 2 })).res.json()).toMatchObject({ content: "Hello world", stop_type: "limit" });
    const { res, fake } = await post("/completion", {
      prompt: [97, 98],
      logit_bias: [
        [5, false],
        [6, 2.5],
      ],
      n_probs: 1,
      seed: -1,
    });
    expect(prefillTokens(fake)).toEqual([97, 98]);
    expect(fake.backend.samplings[0].logit_bias).toEqual({ 5: -100, 6: 2.5 });
    expect(fake.backend.samplings[0].seed).toBeUndefined();
    const probs = res.json().completion_probabilities as Array<{ id: number; token: string; logprob: number; top_logprobs: unknown[] }>;
    expect(probs.map((p) => [p.id, p.token])).toEqual(HELLO.map((id, i) => [id, ["Hello", " world", "!"][i]]));
    expect(probs.every((p) => p.top_logprobs.length === 1)).toBe(true);
  });

  it("streams data: events of the text, then one with stop true and everything else; no [DONE]", async () => {
    const { res } = await post("/completion", { prompt: "abc", stream: true });
    const events = sseEvents(res.body) as Array<Record<string, any>>;
    expect(events).not.toContain("[DONE]");
    expect(events.slice(0, -1).every((e) => e.stop === false)).toBe(true);
    expect(
      events
        .slice(0, -1)
        .map((e) => e.content)
        .join(""),
    ).toBe("Hello world!");
    expect(events.at(-1)).toMatchObject({ stop: true, content: "", stop_type: "eos", tokens_predicted: 3 });
  });

  it("response_fields keeps only those paths of the final answer, flattened as llama.cpp's editor plugins read them", async () => {
    const fields = ["content", "timings/prompt_n", "timings/predicted_n", "tokens_cached", "timings/nope", "nope"];
    const { res } = await post("/completion", { prompt: "abc", response_fields: fields });
    expect(res.json()).toEqual({ content: "Hello world!", "timings/prompt_n": 3, "timings/predicted_n": 3, tokens_cached: 6 });
    const streamed = sseEvents((await post("/completion", { prompt: "abc", response_fields: fields, stream: true })).res.body) as Array<
      Record<string, unknown>
    >;
    expect(streamed.at(-1)).toEqual({ content: "", "timings/prompt_n": 3, "timings/predicted_n": 3, tokens_cached: 6 });
    expect(streamed[0]).toMatchObject({ content: "Hello", stop: false });
  });

  it("grammar and json_schema hold the answer; a bad one is a 400 in llama.cpp's error shape", async () => {
    const opened = (fake: ReturnType<typeof fakeModel>) =>
      fake.backend.calls.flatMap((c) => c.ops).find((op): op is OpenSlotOp => op.op === "open")?.constraint;
    const grammar = await post("/completion", { prompt: "x", grammar: 'root ::= "yes" | "no"' }, fakeModel({ script: bytes("yes") }));
    expect(opened(grammar.fake)).toEqual({ type: "grammar", grammar: 'root ::= "yes" | "no"' });
    const bad = await post("/completion", { prompt: "x", grammar: "root ::= item" });
    expect(bad.res.statusCode).toBe(400);
    expect(bad.res.json()).toEqual({ error: { code: 400, message: expect.stringContaining("never defined"), type: "invalid_request_error" } });
  });

  it("refuses samplers kiln does not have, unknown models and missing prompts in llama.cpp's shape; names runtime fields as ignored", async () => {
    const cases: Array<[Record<string, unknown>, number]> = [
      [{ prompt: "x", mirostat: 2 }, 400],
      [{ prompt: "x", xtc_probability: 0.5 }, 400],
      [{ prompt: "x", model: "nope" }, 404],
      [{ n_predict: 4 }, 400],
      [{ prompt: [] }, 400],
    ];
    for (const [payload, status] of cases) {
      const { res } = await post("/completion", payload);
      expect(res.statusCode, JSON.stringify(payload)).toBe(status);
      expect(res.json().error).toMatchObject({ code: status, message: expect.any(String), type: expect.any(String) });
    }
    const { res } = await post("/completion", { prompt: "x", cache_prompt: true, id_slot: 0 });
    expect(res.headers["x-kiln-ignored-fields"]).toBe("cache_prompt, id_slot");
  });

  it("n_indent: the answer ends after the indentation of the first later line indented less, with stop_type limit", async () => {
    const code = "x + 1;\n    return x;\n  }\n  next();\n";
    const fake = () => fakeModel({ script: bytes(code) });
    const cut = (await post("/completion", { prompt: "x", n_indent: 4 }, fake())).res;
    expect(cut.json()).toMatchObject({ content: "x + 1;\n    return x;\n  ", stop_type: "limit" });
    expect(cut.headers["x-kiln-ignored-fields"]).toBeUndefined();
    expect((await post("/completion", { prompt: "x", n_indent: 2 }, fake())).res.json()).toMatchObject({ content: code, stop_type: "eos" });
  });

  it("t_max_predict_ms: past the limit, the answer ends at a token holding a line break, with stop_type limit", async () => {
    const lines = "one\ntwo\nthree\nfour\nfive\nsix\n";
    const slow = () => fakeModel({ script: bytes(lines), tokenDelayMs: 15 });
    const limited = (await post("/completion", { prompt: "x", t_max_predict_ms: 40 }, slow())).res.json();
    expect(limited.stop_type).toBe("limit");
    expect(limited.content.endsWith("\n")).toBe(true);
    expect(lines.startsWith(limited.content)).toBe(true);
    expect(limited.content.length).toBeLessThan(lines.length);
    // Without it (or at 0), the whole answer.
    for (const payload of [{ prompt: "x" }, { prompt: "x", t_max_predict_ms: 0 }]) {
      const { res } = await post("/completion", payload, slow());
      expect(res.json()).toMatchObject({ content: lines, stop_type: "eos" });
      expect(res.headers["x-kiln-ignored-fields"]).toBeUndefined();
    }
  });
});

describe("GET /props", () => {
  it("describes the one text model served: its context, default settings and slots", async () => {
    const { app } = await fakeApp({ fake: fakeModel({ script: HELLO }) });
    const res = await app.inject({ method: "GET", url: "/props", headers: AUTH });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({
      default_generation_settings: { n_ctx: 512, params: { n_predict: -1, temperature: 0.8, top_k: 40, top_p: 0.95, min_p: 0.05 } },
      total_slots: 4,
      model_path: SLUG,
      modalities: { vision: false, audio: false },
      build_info: expect.stringMatching(/^kiln /),
    });
    expect((await app.inject({ method: "GET", url: `/props?model=${SLUG}`, headers: AUTH })).json().model_path).toBe(SLUG);
    const missing = await app.inject({ method: "GET", url: "/props?model=nope", headers: AUTH });
    expect(missing.statusCode).toBe(404);
    expect(missing.json().error).toMatchObject({ code: 404, type: "not_found_error" });
  });
});

describe("GET /slots", () => {
  it("shows each KV slot: the one a request holds with its counts, the others free", async () => {
    const { app } = await fakeApp({ fake: fakeModel({ script: HELLO, tokenDelayMs: 20 }) });
    const slots = async () => (await app.inject({ method: "GET", url: "/slots", headers: AUTH })).json() as Array<Record<string, any>>;
    const idle = await slots();
    expect(idle.map((s) => [s.id, s.id_task, s.is_processing, s.n_ctx])).toEqual([0, 1, 2, 3].map((id) => [id, -1, false, 512]));
    const running = app.inject({ method: "POST", url: "/completion", payload: { prompt: "Hi", n_predict: 3 }, headers: AUTH });
    let busy: Array<Record<string, any>> = [];
    for (let i = 0; i < 100 && !busy.some((s) => s.is_processing); i++) {
      busy = await slots();
      await new Promise((r) => setTimeout(r, 5));
    }
    const held = busy.filter((s) => s.is_processing);
    expect(held).toHaveLength(1);
    expect(held[0]).toMatchObject({ id_task: expect.any(Number), params: { n_predict: 3 }, next_token: { has_next_token: true } });
    expect(held[0].id_task).toBeGreaterThanOrEqual(0);
    expect(held[0].next_token.n_decoded + held[0].next_token.n_remain).toBe(3);
    expect(held[0].n_prompt_tokens).toBeGreaterThan(0);
    expect((await running).statusCode).toBe(200);
    expect((await slots()).every((s) => !s.is_processing)).toBe(true);
    expect((await app.inject({ method: "GET", url: "/slots?model=nope", headers: AUTH })).statusCode).toBe(404);
  });
});

describe("POST /infill", () => {
  it("prompts with the files as context, then prefix, prompt and suffix between the model's markers", async () => {
    const fake = fakeModel({ script: HELLO, fillsInMiddle: true });
    const { res } = await post(
      "/infill",
      { input_prefix: "ab", input_suffix: "yz", prompt: "c", input_extra: [{ filename: "f.py", text: "q" }, { text: "r" }] },
      fake,
    );
    expect(res.json()).toMatchObject({ content: "Hello world!", stop: true });
    expect(prefillTokens(fake)).toEqual([...bytes("f.py:q"), ...bytes("tmp:r"), FIM.prefix, ...bytes("abc"), FIM.suffix, ...bytes("yz"), FIM.middle]);
  });

  it("is a 400 on a model without fill-in-the-middle markers", async () => {
    const { res } = await post("/infill", { input_prefix: "a", input_suffix: "b" });
    expect(res.statusCode).toBe(400);
    expect(res.json().error.message).toMatch(/Infill is not supported/);
  });
});

describe("llama.cpp's /embedding", () => {
  const last = (text: string) => Array.from(fakeHidden(EOS, bytes(text).length));

  it("answers each input as {index, embedding: [vector]}, Euclidean by default, scaled as embd_normalize says", async () => {
    for (const url of ["/embedding", "/embeddings"]) {
      const { res } = await post(url, { content: ["ab", "abc"] });
      expect(res.statusCode).toBe(200);
      const body = res.json();
      expect(body.map((e: any) => [e.index, e.embedding.length])).toEqual([
        [0, 1],
        [1, 1],
      ]);
      const v = last("ab");
      const length = Math.hypot(...v);
      body[0].embedding[0].forEach((x: number, j: number) => expect(x).toBeCloseTo(v[j] / length, 6));
    }
    const v = last("ab");
    const raw = (await post("/embedding", { content: "ab", embd_normalize: -1 })).res.json();
    expect(raw[0].embedding[0]).toEqual(v);
    const int16 = (await post("/embedding", { input: "ab", embd_normalize: 0 })).res.json();
    expect(Math.max(...int16[0].embedding[0].map(Math.abs))).toBeCloseTo(32760, 2);
    const taxicab = (await post("/embedding", { content: "ab", embd_normalize: 1 })).res.json();
    expect(taxicab[0].embedding[0].reduce((s: number, x: number) => s + Math.abs(x), 0)).toBeCloseTo(1, 5);
  });

  it("takes token ids, and refuses what has nothing to embed with a 400 naming the field", async () => {
    const ids = (await post("/embedding", { content: [104, 105], embd_normalize: -1 })).res.json();
    expect(ids[0].embedding[0]).toEqual(Array.from(fakeHidden(105, 1)));
    for (const [payload, param] of [
      [{}, "content"],
      [{ content: "" }, "content"],
      [{ content: [] }, "content"],
      [{ input: ["a", ""] }, "input"],
      [{ content: "a", embd_normalize: -2 }, "embd_normalize"],
    ] as const) {
      const { res } = await post("/embedding", payload);
      expect(res.statusCode, JSON.stringify(payload)).toBe(400);
      expect(res.json().error.message).toMatch(new RegExp(param));
    }
  });
});
