/** POST /v1/chat/completions on a fake model: answer shape, SSE frames, stop strings, logprobs, n. */
import { describe, expect, it } from "vitest";
import type { SlotOp } from "../../../src/runtime/text-worker/protocol.js";
import { AUTH, fakeApp, fakeModel, NO_DETAILS, SLUG, sseEvents, word } from "./fake-model.js";

const chat = (over: Record<string, unknown> = {}) => ({ model: SLUG, messages: [{ role: "user", content: "hi" }], ...over });

async function ask(payload: Record<string, unknown>, fake = fakeModel()) {
  const { app } = await fakeApp({ fake });
  return app.inject({ method: "POST", url: "/v1/chat/completions", payload, headers: AUTH });
}

describe("chat completions", () => {
  it("answers with the contract's shape and tokenizer-count usage", async () => {
    const fake = fakeModel();
    const res = await ask(chat(), fake);
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body).toMatchObject({
      object: "chat.completion",
      model: SLUG,
      system_fingerprint: "fake-artifact-1",
      choices: [{ index: 0, message: { role: "assistant", content: "Hello world!", refusal: null }, logprobs: null, finish_reason: "stop" }],
    });
    expect(body.id).toMatch(/^chatcmpl-/);
    expect(body.created).toBeCloseTo(Date.now() / 1000, -1);
    expect(body.choices[0].message).not.toHaveProperty("tool_calls");
    const promptTokens = fake.model.chatPrompt([{ role: "user", content: "hi" }]).length;
    expect(body.usage).toEqual({
      prompt_tokens: promptTokens,
      completion_tokens: 3,
      total_tokens: promptTokens + 3,
      prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
      completion_tokens_details: NO_DETAILS,
    });
  });

  it("ends with finish_reason length at max_tokens (or max_completion_tokens)", async () => {
    expect((await ask(chat({ max_tokens: 2 }))).json().choices[0]).toMatchObject({ message: { content: "Hello world" }, finish_reason: "length" });
    expect((await ask(chat({ max_completion_tokens: 1 }))).json().choices[0]).toMatchObject({ message: { content: "Hello" }, finish_reason: "length" });
  });

  it("renders every role through the template: developer as system, text parts, tool turns", async () => {
    const fake = fakeModel();
    const res = await ask(
      chat({
        messages: [
          { role: "developer", content: "Be brief." },
          {
            role: "user",
            content: [
              { type: "text", text: "one" },
              { type: "text", text: "two" },
            ],
          },
          { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "f", arguments: "{}" } }] },
          { role: "tool", content: "42", tool_call_id: "call_1" },
          { role: "system", content: "sys", name: "boss" },
        ],
      }),
      fake,
    );
    expect(res.statusCode).toBe(200);
    expect(fake.rendered[0]).toEqual([
      { role: "system", content: "Be brief." },
      {
        role: "user",
        content: [
          { type: "text", text: "one" },
          { type: "text", text: "two" },
        ],
      },
      { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "f", arguments: "{}" } }] },
      { role: "tool", content: "42", tool_call_id: "call_1" },
      { role: "system", content: "sys", name: "boss" },
    ]);
  });

  it("passes the sampling parameters to the engine", async () => {
    const fake = fakeModel();
    await ask(
      chat({ temperature: 0.3, top_p: 0.9, top_k: 5, min_p: 0.1, seed: 7, presence_penalty: 1, frequency_penalty: -1, logit_bias: { "3": -100 } }),
      fake,
    );
    expect(fake.backend.samplings[0]).toMatchObject({
      temperature: 0.3,
      top_p: 0.9,
      top_k: 5,
      min_p: 0.1,
      seed: 7,
      presence_penalty: 1,
      frequency_penalty: -1,
      logit_bias: { "3": -100 },
    });
  });

  it("stops before a stop string split across tokens, and never sends it", async () => {
    const fake = fakeModel({ script: [word("Hello"), word("</s"), word(">"), word(" again")] });
    const res = await ask(chat({ stop: "</s>" }), fake);
    expect(res.json().choices[0]).toMatchObject({ message: { content: "Hello" }, finish_reason: "stop" });
    expect(res.json().usage.completion_tokens).toBe(3);
  });

  it("holds back a possible stop string while streaming, releasing it when it turns out not to be one", async () => {
    const fake = fakeModel({ script: [word("Hello"), word("</s"), word(" again"), word("</s"), word(">"), word("!")] });
    const res = await ask(chat({ stop: ["</s>", "never"], stream: true }), fake);
    const contents = sseEvents(res.body)
      .filter((e): e is any => typeof e === "object")
      .map((e) => e.choices[0]?.delta?.content)
      .filter((c) => c !== undefined);
    // "</s" waits for the next token; the trailing "n" of "again" waits too (it could start "never").
    expect(contents).toEqual(["", "Hello", "</s agai", "n"]);
    const events = sseEvents(res.body) as any[];
    expect(events.at(-2).choices[0].finish_reason).toBe("stop");
  });

  it("streams the contract's frames: role chunk, content chunks, finish chunk, usage chunk, [DONE]", async () => {
    const res = await ask(chat({ stream: true, stream_options: { include_usage: true } }));
    expect(res.statusCode).toBe(200);
    expect(res.headers["content-type"]).toBe("text/event-stream");
    expect(res.headers["x-request-id"]).toBeTruthy();
    expect(res.body).not.toMatch(/^event:/m);
    const events = sseEvents(res.body) as any[];
    expect(events.at(-1)).toBe("[DONE]");
    const chunks = events.slice(0, -1);
    const id = chunks[0].id;
    for (const c of chunks) {
      expect(c).toMatchObject({ id, object: "chat.completion.chunk", model: SLUG, system_fingerprint: "fake-artifact-1", created: chunks[0].created });
    }
    expect(chunks[0].choices).toEqual([{ index: 0, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }]);
    expect(chunks.slice(1, 4).map((c) => c.choices[0])).toEqual([
      { index: 0, delta: { content: "Hello" }, logprobs: null, finish_reason: null },
      { index: 0, delta: { content: " world" }, logprobs: null, finish_reason: null },
      { index: 0, delta: { content: "!" }, logprobs: null, finish_reason: null },
    ]);
    expect(chunks[4].choices).toEqual([{ index: 0, delta: {}, logprobs: null, finish_reason: "stop" }]);
    expect(chunks[5].choices).toEqual([]);
    expect(chunks[5].usage).toMatchObject({ completion_tokens: 3 });
    expect(chunks[5].usage.total_tokens).toBe(chunks[5].usage.prompt_tokens + 3);
    expect(chunks[5].usage).toMatchObject({ prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 }, completion_tokens_details: NO_DETAILS });
    for (const c of chunks.slice(0, 5)) expect(c.usage).toBeNull();
  });

  it("streams without a usage chunk (and without usage fields) unless asked", async () => {
    const events = sseEvents((await ask(chat({ stream: true }))).body) as any[];
    expect(events).toHaveLength(6);
    expect(events.slice(0, -1).every((e) => !("usage" in e))).toBe(true);
  });

  it("streamed chunks concatenate to the non-streamed text", async () => {
    const script = [word("Hello"), 0xe2, 0x82, 0xac, word(" world")]; // "€" split over three byte tokens
    const whole = (await ask(chat(), fakeModel({ script }))).json().choices[0].message.content;
    const streamed = (sseEvents((await ask(chat({ stream: true }), fakeModel({ script }))).body) as any[])
      .slice(0, -1)
      .map((e) => e.choices[0]?.delta?.content ?? "")
      .join("");
    expect(whole).toBe("Hello€ world");
    expect(streamed).toBe(whole);
  });

  it("reports an error after the first byte as a data: {error} event, then ends without [DONE]", async () => {
    // The prompt pass samples "Hello"; the first decode step's message never comes back (a worker crash).
    const fake = fakeModel({ failWhen: { match: (call) => call.rows > 0 && call.tokensPerRow === 1, error: new Error("worker crashed") } });
    const res = await ask(chat({ stream: true }), fake);
    expect(res.statusCode).toBe(200);
    const events = sseEvents(res.body) as any[];
    expect(events[1].choices[0].delta).toEqual({ content: "Hello" });
    expect(events.at(-1)).toEqual({ error: { message: expect.stringContaining("request id"), type: "server_error", param: null, code: null } });
    expect(events).not.toContain("[DONE]");
    expect(res.body).not.toContain("worker crashed");
  });

  it("answers an error before the first byte as ordinary JSON", async () => {
    // The prompt pass itself fails: no token, so no byte of the stream was sent.
    const fake = fakeModel({ failForwardOf: { opened: 1, message: "boom in the forward pass" } });
    const res = await ask(chat({ stream: true }), fake);
    expect(res.statusCode).toBe(500);
    expect(res.headers["content-type"]).toMatch(/^application\/json/);
    expect(res.json().error).toMatchObject({ type: "server_error", code: null, param: null });
    expect(res.body).not.toContain("boom");
  });

  it("records metrics and usage once per request, however its answer ends", async () => {
    const crash = () => ({
      failWhen: { match: (call: { rows: number; tokensPerRow: number }) => call.rows > 0 && call.tokensPerRow === 1, error: new Error("worker crashed") },
    });
    const cases: Array<[string, Record<string, unknown>, ReturnType<typeof fakeModel>, number]> = [
      ["whole", chat(), fakeModel(), 200],
      ["streamed", chat({ stream: true, stream_options: { include_usage: true } }), fakeModel(), 200],
      ["failed after the first byte", chat({ stream: true }), fakeModel(crash()), 200],
      ["failed before the first byte", chat({ stream: true }), fakeModel({ failForwardOf: { opened: 1, message: "boom" } }), 500],
      ["failed, not streamed", chat(), fakeModel(crash()), 500],
    ];
    for (const [what, payload, fake, status] of cases) {
      const records: unknown[] = [];
      const { app } = await fakeApp({ fake, usage: { record: (u) => records.push(u) } });
      const res = await app.inject({ method: "POST", url: "/v1/chat/completions", payload, headers: AUTH });
      expect(res.statusCode, what).toBe(status);
      expect(records, what).toHaveLength(1);
      const metrics = (await app.inject({ method: "GET", url: "/metrics" })).body;
      expect(metrics, what).toMatch(
        new RegExp(`kiln_prompt_tokens_total\\{model="${SLUG}"\\} ${fake.model.chatPrompt([{ role: "user", content: "hi" }]).length}\n`),
      );
    }
  });

  it("generates n choices side by side, indexed, with usage summed", async () => {
    const fake = fakeModel();
    const res = await ask(chat({ n: 3, max_tokens: 2, seed: 7 }), fake);
    const body = res.json();
    expect(body.choices.map((c: any) => [c.index, c.message.content, c.finish_reason])).toEqual([
      [0, "Hello world", "length"],
      [1, "Hello world", "length"],
      [2, "Hello world", "length"],
    ]);
    expect(body.usage.completion_tokens).toBe(6);
    // One prompt pass for all three; each choice samples with the seed's own stream i.
    expect(fake.backend.calls.filter((c) => c.kind === "prefill")).toHaveLength(1);
    expect(fake.backend.opened.map((s) => [s.sampling.seed, s.stream])).toEqual([
      [7, 0],
      [7, 1],
      [7, 2],
    ]);
    // Streamed, the choices' chunks interleave: every step gives each of them its next token.
    const events = sseEvents((await ask(chat({ n: 2, max_tokens: 2, stream: true }))).body) as any[];
    expect(events.slice(0, -1).map((e) => `${e.choices[0].index}:${JSON.stringify(e.choices[0].delta)}:${e.choices[0].finish_reason}`)).toEqual([
      '0:{"role":"assistant","content":""}:null',
      '0:{"content":"Hello"}:null',
      '1:{"role":"assistant","content":""}:null',
      '1:{"content":"Hello"}:null',
      '0:{"content":" world"}:null',
      "0:{}:length",
      '1:{"content":" world"}:null',
      "1:{}:length",
    ]);
  });

  it("returns logprobs when asked, streamed and not", async () => {
    const body = (await ask(chat({ logprobs: true, top_logprobs: 2 }))).json();
    expect(body.choices[0].logprobs.content).toHaveLength(3);
    expect(body.choices[0].logprobs.content[0]).toEqual({
      token: "Hello",
      logprob: -0.5,
      bytes: [72, 101, 108, 108, 111],
      top_logprobs: [
        { token: "Hello", logprob: -0.5, bytes: [72, 101, 108, 108, 111] },
        { token: "\u0000", logprob: -3, bytes: [0] },
      ],
    });
    expect(body.choices[0].logprobs.refusal).toBeNull();
    const events = sseEvents((await ask(chat({ logprobs: true, stream: true }))).body) as any[];
    expect(events[1].choices[0].logprobs.content).toEqual([{ token: "Hello", logprob: -0.5, bytes: [72, 101, 108, 108, 111], top_logprobs: [] }]);
  });
});

describe("where the prompt ends: add_generation_prompt and continue_final_message (vLLM's)", () => {
  const bytes = (text: string) => new TextEncoder().encode(text).length;
  const prefill = [
    { role: "user", content: "hi" },
    { role: "assistant", content: "Sure, the" },
  ];

  it("continues the last message, an assistant's, from its text; or ends right after the messages", async () => {
    const continued = await ask(chat({ messages: prefill, continue_final_message: true, add_generation_prompt: false }));
    expect(continued.statusCode).toBe(200);
    expect(continued.json().usage.prompt_tokens).toBe(bytes("<user>hi<assistant>Sure, the"));
    expect(continued.json().choices[0].message.content).toBe("Hello world!");
    const bare = await ask(chat({ add_generation_prompt: false }));
    expect(bare.json().usage.prompt_tokens).toBe(bytes("<user>hi"));
    const usual = await ask(chat({ add_generation_prompt: true, continue_final_message: false }));
    expect(usual.json().usage.prompt_tokens).toBe(bytes("<user>hi<assistant>"));
  });

  it("refuses a continuation of anything but an assistant's text, or beside a new turn's opening, naming the field", async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ continue_final_message: true }, "continue_final_message"],
      [{ messages: prefill, continue_final_message: true, add_generation_prompt: true }, "add_generation_prompt"],
      [
        {
          messages: [prefill[0], { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: "{}" } }] }],
          continue_final_message: true,
        },
        "continue_final_message",
      ],
    ];
    for (const [over, param] of cases) {
      const res = await ask(chat(over));
      expect(res.statusCode, JSON.stringify(over)).toBe(400);
      expect(res.json().error, JSON.stringify(over)).toMatchObject({ code: "invalid_value", param });
    }
  });
});

describe("min_tokens and ignore_eos (vLLM's)", () => {
  /** The sampling parameters the worker was asked to open the first sequence with. */
  const samplingSent = (fake: ReturnType<typeof fakeModel>) =>
    fake.backend.calls.flatMap((c) => c.ops).find((op): op is Extract<SlotOp, { op: "open" }> => op.op === "open")!.sampling;

  it("reach the sampler, on chat and on completions", async () => {
    let fake = fakeModel();
    expect((await ask(chat({ min_tokens: 2, max_tokens: 5 }), fake)).statusCode).toBe(200);
    expect(samplingSent(fake)).toMatchObject({ min_tokens: 2 });
    fake = fakeModel();
    const { app } = await fakeApp({ fake });
    const res = await app.inject({ method: "POST", url: "/v1/completions", payload: { model: SLUG, prompt: "hi", ignore_eos: true }, headers: AUTH });
    expect(res.statusCode).toBe(200);
    expect(samplingSent(fake)).toMatchObject({ ignore_eos: true });
  });

  it("are 400s beside an output held to a grammar, and min_tokens above the budget, naming the field", async () => {
    const cases: Array<[Record<string, unknown>, string, string]> = [
      [{ ignore_eos: true, response_format: { type: "json_object" } }, "unsupported_value", "ignore_eos"],
      [{ min_tokens: 3, guided_choice: ["a", "b"] }, "unsupported_value", "min_tokens"],
      [{ min_tokens: 9, max_tokens: 4 }, "invalid_value", "min_tokens"],
      [{ min_tokens: -1 }, "invalid_value", "min_tokens"],
      [{ ignore_eos: "yes" }, "invalid_type", "ignore_eos"],
    ];
    for (const [over, code, param] of cases) {
      const res = await ask(chat(over));
      expect(res.statusCode, JSON.stringify(over)).toBe(400);
      expect(res.json().error, JSON.stringify(over)).toMatchObject({ code, param });
    }
    const { app } = await fakeApp();
    const over = await app.inject({ method: "POST", url: "/v1/completions", payload: { model: SLUG, prompt: "hi", min_tokens: 20 }, headers: AUTH });
    expect(over.json().error).toMatchObject({ code: "invalid_value", param: "min_tokens" });
    expect(over.json().error.message).toMatch(/more than the 16 tokens/);
  });
});

describe("truncate_prompt_tokens (vLLM's)", () => {
  const completions = async (payload: Record<string, unknown>) => {
    const { app } = await fakeApp({ fake: fakeModel({ contextLength: 512 }) });
    try {
      return await app.inject({ method: "POST", url: "/v1/completions", payload: { model: SLUG, ...payload }, headers: AUTH });
    } finally {
      await app.close();
    }
  };
  const ids = Array.from({ length: 600 }, (_, i) => 1 + (i % 20));

  it("keeps the last tokens asked for, or with -1 as many as leave room for the completion", async () => {
    const kept = await completions({ prompt: ids, max_tokens: 10, truncate_prompt_tokens: 100 });
    expect(kept.json().usage.prompt_tokens).toBe(100);
    const fitted = await completions({ prompt: ids, max_tokens: 10, truncate_prompt_tokens: -1 });
    expect(fitted.statusCode, fitted.body).toBe(200);
    expect(fitted.json().usage.prompt_tokens).toBe(502);
    // Without it the same prompt is too long.
    expect((await completions({ prompt: ids, max_tokens: 10 })).json().error).toMatchObject({ code: "context_length_exceeded" });
    // A shorter prompt is left whole.
    expect((await completions({ prompt: ids.slice(0, 7), max_tokens: 1, truncate_prompt_tokens: 100 })).json().usage.prompt_tokens).toBe(7);
  });
});

describe("prompt_logprobs (vLLM's)", () => {
  it("chat: the rendered prompt scored at the answer's top level, each token by id with its rank and alternatives", async () => {
    const res = await ask(chat({ max_tokens: 2, prompt_logprobs: 1 }));
    expect(res.statusCode, res.body).toBe(200);
    const scored = res.json().prompt_logprobs;
    expect(scored[0]).toBeNull();
    expect(scored.length).toBe(res.json().usage.prompt_tokens);
    // The fake scores each token as its own likeliest alternative.
    for (const entry of scored.slice(1)) {
      const [[id, e]] = Object.entries(entry) as Array<[string, any]>;
      expect(Object.keys(entry)).toHaveLength(1);
      expect(e).toMatchObject({ rank: 1, decoded_token: String.fromCharCode(Number(id)) });
    }
    expect(res.json().choices[0]).not.toHaveProperty("prompt_logprobs");
  });

  it("is a 400 beside stream, on chat and completions, and on the Responses API", async () => {
    const { app } = await fakeApp();
    try {
      for (const [url, body] of [
        ["/v1/chat/completions", chat({ prompt_logprobs: 1, stream: true })],
        ["/v1/completions", { model: SLUG, prompt: "hi", prompt_logprobs: 1, stream: true }],
        ["/v1/responses", { model: SLUG, input: "hi", prompt_logprobs: 1 }],
      ] as const) {
        const res = await app.inject({ method: "POST", url, payload: body, headers: AUTH });
        expect(res.statusCode, url).toBe(400);
        expect(res.json().error.param, url).toBe("prompt_logprobs");
      }
    } finally {
      await app.close();
    }
  });
});
