/** POST /v1/completions (legacy) on a fake model. */
import { describe, expect, it } from "vitest";
import { AUTH, FIM, fakeApp, fakeModel, NO_DETAILS, SLUG, sseEvents, word } from "./fake-model.js";

const long = Array.from({ length: 40 }, (_, i) => word(i % 2 ? " world" : "Hello"));

async function complete(payload: Record<string, unknown>, fake = fakeModel({ script: long })) {
  const { app } = await fakeApp({ fake });
  return app.inject({ method: "POST", url: "/v1/completions", payload: { model: SLUG, ...payload }, headers: AUTH });
}

describe("completions", () => {
  it("defaults to 16 tokens and finish_reason length", async () => {
    const body = (await complete({ prompt: "Once upon a time" })).json();
    expect(body).toMatchObject({ object: "text_completion", model: SLUG, system_fingerprint: "fake-artifact-1" });
    expect(body.id).toMatch(/^cmpl-/);
    expect(body.choices).toHaveLength(1);
    expect(body.choices[0]).toMatchObject({ index: 0, logprobs: null, finish_reason: "length" });
    expect(body.usage).toEqual({
      prompt_tokens: 16,
      completion_tokens: 16,
      total_tokens: 32,
      prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
      completion_tokens_details: NO_DETAILS,
    });
  });

  it("passes temperature (default 1 in the runtime) and stop strings (one or up to four)", async () => {
    const fake = fakeModel({ script: long });
    const one = (await complete({ prompt: "x", stop: " world" }, fake)).json();
    expect(one.choices[0]).toMatchObject({ text: "Hello", finish_reason: "stop" });
    const many = (await complete({ prompt: "x", stop: ["zz", "Hello world", "q", "r"] })).json();
    expect(many.choices[0]).toMatchObject({ text: "", finish_reason: "stop" });
    expect(fake.backend.samplings[0].temperature ?? 1).toBe(1);
  });

  it("stop_reason (vLLM's): the stop string or stop token id that ended a choice, streamed or not; absent otherwise", async () => {
    const byString = (await complete({ prompt: "x", stop: ["zz", " world"] })).json();
    expect(byString.choices[0]).toMatchObject({ text: "Hello", finish_reason: "stop", stop_reason: " world" });
    const byToken = (await complete({ prompt: "x", stop_token_ids: [word(" world")] })).json();
    expect(byToken.choices[0]).toMatchObject({ text: "Hello", finish_reason: "stop", stop_reason: word(" world") });
    const streamed = sseEvents((await complete({ prompt: "x", stop: " world", stream: true })).body) as any[];
    expect(streamed.at(-2).choices[0]).toMatchObject({ finish_reason: "stop", stop_reason: " world" });
    const byLength = (await complete({ prompt: "x", max_tokens: 2 })).json();
    expect(byLength.choices[0].finish_reason).toBe("length");
    expect("stop_reason" in byLength.choices[0]).toBe(false);
    const { app } = await fakeApp({ fake: fakeModel({ script: long }) });
    const chat = await app.inject({
      method: "POST",
      url: "/v1/chat/completions",
      payload: { model: SLUG, messages: [{ role: "user", content: "x" }], stop: " world" },
      headers: AUTH,
    });
    expect(chat.json().choices[0]).toMatchObject({ message: { content: "Hello" }, finish_reason: "stop", stop_reason: " world" });
  });

  it("takes a prompt as a string, an array of one string or token ids", async () => {
    expect((await complete({ prompt: ["ab"] })).json().usage.prompt_tokens).toBe(2);
    expect((await complete({ prompt: [1, 2, 3] })).json().usage.prompt_tokens).toBe(3);
  });

  it("echoes the prompt when asked", async () => {
    expect((await complete({ prompt: "Say: ", max_tokens: 1, echo: true })).json().choices[0].text).toBe("Say: Hello");
    const events = sseEvents((await complete({ prompt: "Say: ", max_tokens: 1, echo: true, stream: true })).body) as any[];
    expect(
      events
        .slice(0, -1)
        .map((e) => e.choices[0].text)
        .join(""),
    ).toBe("Say: Hello");
  });

  it("returns legacy logprobs", async () => {
    const body = (await complete({ prompt: "x", max_tokens: 2, logprobs: 1 })).json();
    expect(body.choices[0].logprobs).toEqual({
      tokens: ["Hello", " world"],
      token_logprobs: [-0.5, -1.5],
      top_logprobs: [{ Hello: -0.5 }, { " world": -1.5 }],
      text_offset: [0, 5],
    });
  });

  it("streams text_completion chunks ending with [DONE], with a usage chunk when asked", async () => {
    const res = await complete({ prompt: "x", max_tokens: 3, stream: true, stream_options: { include_usage: true } });
    expect(res.headers["content-type"]).toBe("text/event-stream");
    const events = sseEvents(res.body) as any[];
    expect(events.at(-1)).toBe("[DONE]");
    const chunks = events.slice(0, -1);
    for (const c of chunks) expect(c).toMatchObject({ id: chunks[0].id, object: "text_completion", model: SLUG });
    expect(chunks.slice(0, 4).map((c) => [c.choices[0].text, c.choices[0].finish_reason])).toEqual([
      ["Hello", null],
      [" world", null],
      ["Hello", null],
      ["", "length"],
    ]);
    expect(chunks[4]).toMatchObject({ choices: [], usage: { prompt_tokens: 1, completion_tokens: 3, total_tokens: 4 } });
  });

  it("continuous_usage_stats (vLLM's): every chunk carries the usage so far, and the usage chunk the whole", async () => {
    const res = await complete({ prompt: "x", max_tokens: 3, stream: true, stream_options: { include_usage: true, continuous_usage_stats: true } });
    const chunks = (sseEvents(res.body) as any[]).slice(0, -1);
    expect(chunks.map((c) => [c.choices[0]?.text ?? null, c.usage])).toEqual([
      ["Hello", { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 }],
      [" world", { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 }],
      ["Hello", { prompt_tokens: 1, completion_tokens: 3, total_tokens: 4 }],
      ["", { prompt_tokens: 1, completion_tokens: 3, total_tokens: 4 }],
      [null, expect.objectContaining({ prompt_tokens: 1, completion_tokens: 3, total_tokens: 4, prompt_tokens_details: expect.anything() })],
    ]);
    // Without include_usage it asks for nothing: the chunks carry no usage.
    const plain = await complete({ prompt: "x", max_tokens: 3, stream: true, stream_options: { continuous_usage_stats: true } });
    for (const c of (sseEvents(plain.body) as any[]).slice(0, -1)) expect(c).not.toHaveProperty("usage");
  });

  it("usage details: cached_tokens counts the prompt tokens the prefix cache served, streamed and not", async () => {
    const fake = fakeModel({ script: long, contextLength: 2048 });
    const { app } = await fakeApp({ fake });
    try {
      const ask = (over: Record<string, unknown> = {}) =>
        app.inject({ method: "POST", url: "/v1/completions", payload: { model: SLUG, prompt: "x".repeat(600), max_tokens: 2, ...over }, headers: AUTH });
      const first = (await ask()).json();
      expect(first.usage).toEqual({
        prompt_tokens: 600,
        completion_tokens: 2,
        total_tokens: 602,
        prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
        completion_tokens_details: NO_DETAILS,
      });
      // Exact reuse keeps whole 256-token prefill chunks: 512 of the 600 come from the cache.
      const second = (await ask()).json();
      expect(second.usage.prompt_tokens_details).toEqual({ cached_tokens: 512, audio_tokens: 0 });
      expect(second.usage.prompt_tokens).toBe(600);
      const streamed = sseEvents((await ask({ stream: true, stream_options: { include_usage: true } })).body) as any[];
      expect(streamed.at(-2).usage).toMatchObject({ prompt_tokens: 600, prompt_tokens_details: { cached_tokens: 512 }, completion_tokens_details: NO_DETAILS });
      // n choices of one prompt count its cached tokens once, as prompt_tokens counts it once.
      const many = (await ask({ n: 3 })).json();
      expect(many.usage).toMatchObject({ prompt_tokens: 600, prompt_tokens_details: { cached_tokens: 512 } });
      const metrics = await app.inject({ method: "GET", url: "/metrics", headers: AUTH });
      expect(metrics.body).toMatch(/kiln_prefix_cache_hit_tokens_total\{model="smollm2-135m-instruct"\} (\d+)/);
    } finally {
      await app.close();
    }
  });

  describe("suffix (fill in the middle)", () => {
    const prefillTokens = (fake: ReturnType<typeof fakeModel>) => fake.backend.calls.filter((c) => c.kind === "prefill").flatMap((c) => c.tokens);
    const enc = (text: string) => [...new TextEncoder().encode(text)];

    it("puts each prompt, text or token ids, between the model's markers with the suffix after it", async () => {
      const fake = fakeModel({ script: long, fillsInMiddle: true });
      const body = (await complete({ prompt: "ab", suffix: "yz", max_tokens: 2 }, fake)).json();
      expect(prefillTokens(fake)).toEqual([FIM.prefix, ...enc("ab"), FIM.suffix, ...enc("yz"), FIM.middle]);
      expect(body.usage.prompt_tokens).toBe(7);
      expect(body.choices[0]).toMatchObject({ text: "Hello world", finish_reason: "length" });
      const ids = fakeModel({ script: long, fillsInMiddle: true });
      await complete({ prompt: [[10, 11], [12]], suffix: "", max_tokens: 1 }, ids);
      const seen = ids.backend.calls.filter((c) => c.kind === "prefill").map((c) => c.tokens);
      expect(seen).toEqual(
        expect.arrayContaining([
          [FIM.prefix, 10, 11, FIM.suffix, FIM.middle],
          [FIM.prefix, 12, FIM.suffix, FIM.middle],
        ]),
      );
    });

    it("streams an infill as any completion", async () => {
      const fake = fakeModel({ script: long, fillsInMiddle: true });
      const events = sseEvents((await complete({ prompt: "ab", suffix: "yz", max_tokens: 2, stream: true }, fake)).body) as any[];
      expect(events.at(-1)).toBe("[DONE]");
      expect(
        events
          .slice(0, -1)
          .map((e) => e.choices[0]?.text ?? "")
          .join(""),
      ).toBe("Hello world");
      expect(prefillTokens(fake)[0]).toBe(FIM.prefix);
    });

    it("an empty suffix is a plain completion on a model without markers; any other is a 400 naming suffix", async () => {
      const plain = fakeModel({ script: long });
      expect((await complete({ prompt: "ab", suffix: "", max_tokens: 1 }, plain)).statusCode).toBe(200);
      expect(prefillTokens(plain)).toEqual(enc("ab"));
      const res = await complete({ prompt: "ab", suffix: "yz" });
      expect(res.statusCode).toBe(400);
      expect(res.json().error).toMatchObject({ code: "unsupported_value", param: "suffix" });
      expect(res.json().error.message).toMatch(/cannot fill in the middle/);
    });

    it("echo and truncate_prompt_tokens cannot go with an infill", async () => {
      const fim = () => fakeModel({ script: long, fillsInMiddle: true });
      const echo = await complete({ prompt: "ab", suffix: "yz", echo: true }, fim());
      expect(echo.json().error).toMatchObject({ code: "unsupported_value", param: "echo" });
      const truncate = await complete({ prompt: "ab", suffix: "yz", truncate_prompt_tokens: 4 }, fim());
      expect(truncate.json().error).toMatchObject({ code: "unsupported_value", param: "truncate_prompt_tokens" });
    });

    it("a prompt and suffix too long for the context together are refused before tokenizing", async () => {
      const fake = fakeModel({ script: long, fillsInMiddle: true, contextLength: 64 });
      const res = await complete({ prompt: "a".repeat(40), suffix: "b".repeat(40) }, fake);
      expect(res.statusCode).toBe(400);
      expect(res.json().error).toMatchObject({ code: "context_length_exceeded", param: "prompt" });
    });
  });
});
