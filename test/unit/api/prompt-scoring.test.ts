/**
 * Prompt scoring and several prompts on /v1/completions, on the fake model: `echo` with integer
 * `logprobs` returns the prompt's tokens first (the first with nulls), then the completion's, in
 * the legacy shape; `max_tokens: 0` scores only; every prompt shape of the reference API, the
 * prompts run together, choices numbered prompt-major, usage summed. The fake model scores prompt
 * token t at `fakePromptLogprob(t)`, as its own top alternative.
 */
import { describe, expect, it } from "vitest";
import { fakePromptLogprob } from "../scheduler/engine/fake-step-runner.js";
import { AUTH, fakeApp, fakeModel, NO_DETAILS, SLUG, sseEvents, type FakeModel, word } from "./fake-model.js";

const ids = (text: string) => [...new TextEncoder().encode(text)];
const lp = (text: string) => ids(text).map(fakePromptLogprob);

async function complete(payload: Record<string, unknown>, fake: FakeModel = fakeModel()) {
  const { app } = await fakeApp({ fake });
  const res = await app.inject({ method: "POST", url: "/v1/completions", payload: { model: SLUG, ...payload }, headers: AUTH });
  await app.close();
  return res;
}

/** What lm-evaluation-harness's local-completions reads from one choice (`parse_logprobs`): the continuation's log-likelihood and whether it is greedy. */
function lmEvalParse(
  logprobs: { token_logprobs: Array<number | null>; top_logprobs: Array<Record<string, number> | null> },
  ctxlen: number,
  dropLast: boolean,
) {
  const end = dropLast ? -1 : undefined;
  const tokens = logprobs.token_logprobs.slice(ctxlen, end) as number[];
  const tops = logprobs.top_logprobs.slice(ctxlen, end) as Array<Record<string, number>>;
  return { sum: tokens.reduce((a, b) => a + b, 0), greedy: tokens.every((t, i) => t === Math.max(...Object.values(tops[i]))) };
}

describe("completions: prompt scoring (echo + logprobs)", () => {
  it("returns the prompt's tokens first, the first with null logprob and null top, then the completion's", async () => {
    const res = await complete({ prompt: "abc", echo: true, logprobs: 1, max_tokens: 2 });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body.choices[0]).toMatchObject({ index: 0, text: "abcHello world", finish_reason: "length" });
    expect(body.choices[0].logprobs).toEqual({
      tokens: ["a", "b", "c", "Hello", " world"],
      token_logprobs: [null, fakePromptLogprob(98), fakePromptLogprob(99), -0.5, -1.5],
      top_logprobs: [null, { b: fakePromptLogprob(98) }, { c: fakePromptLogprob(99) }, { Hello: -0.5 }, { " world": -1.5 }],
      text_offset: [0, 1, 2, 3, 8],
    });
    expect(body.usage).toEqual({
      prompt_tokens: 3,
      completion_tokens: 2,
      total_tokens: 5,
      prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
      completion_tokens_details: NO_DETAILS,
    });
  });

  it("max_tokens 0 scores the prompt only: finish_reason length, no completion tokens", async () => {
    const fake = fakeModel();
    const body = (await complete({ prompt: "Say hi", echo: true, logprobs: 0, max_tokens: 0 }, fake)).json();
    expect(body.choices[0]).toMatchObject({ text: "Say hi", finish_reason: "length" });
    expect(body.choices[0].logprobs.tokens).toEqual([..."Say hi"]);
    expect(body.choices[0].logprobs.token_logprobs).toEqual([null, ...lp("Say hi").slice(1)]);
    expect(body.choices[0].logprobs.top_logprobs).toEqual([null, {}, {}, {}, {}, {}]);
    expect(body.choices[0].logprobs.text_offset).toEqual([0, 1, 2, 3, 4, 5]);
    expect(body.usage).toEqual({
      prompt_tokens: 6,
      completion_tokens: 0,
      total_tokens: 6,
      prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
      completion_tokens_details: NO_DETAILS,
    });
    expect(fake.backend.computed).toBe(0); // nothing sampled
  });

  it("max_tokens 0 without logprobs echoes the prompt, and without echo answers empty text", async () => {
    expect((await complete({ prompt: "abc", echo: true, max_tokens: 0 })).json().choices[0]).toMatchObject({
      text: "abc",
      logprobs: null,
      finish_reason: "length",
    });
    expect((await complete({ prompt: "abc", max_tokens: 0 })).json().choices[0]).toMatchObject({ text: "", finish_reason: "length" });
  });

  it("logprobs without echo scores nothing of the prompt", async () => {
    const fake = fakeModel();
    const body = (await complete({ prompt: "abc", logprobs: 1, max_tokens: 1 }, fake)).json();
    expect(body.choices[0].logprobs.tokens).toEqual(["Hello"]);
    expect(fake.backend.calls.some((c) => c.score)).toBe(false);
  });

  it("streams the prompt's logprobs in the first chunk, with the echoed text, then the completion's", async () => {
    const res = await complete({ prompt: "abc", echo: true, logprobs: 1, max_tokens: 2, stream: true, stream_options: { include_usage: true } });
    const chunks = (sseEvents(res.body) as any[]).slice(0, -1);
    expect(chunks[0].choices[0]).toEqual({
      index: 0,
      text: "abc",
      logprobs: {
        tokens: ["a", "b", "c"],
        token_logprobs: [null, fakePromptLogprob(98), fakePromptLogprob(99)],
        top_logprobs: [null, { b: fakePromptLogprob(98) }, { c: fakePromptLogprob(99) }],
        text_offset: [0, 1, 2],
      },
      finish_reason: null,
    });
    expect(chunks.slice(1, 4).map((c) => [c.choices[0].text, c.choices[0].logprobs?.text_offset ?? null, c.choices[0].finish_reason])).toEqual([
      ["Hello", [3], null],
      [" world", [8], null],
      ["", null, "length"],
    ]);
    expect(chunks[4]).toMatchObject({ choices: [], usage: { prompt_tokens: 3, completion_tokens: 2 } });
  });

  it("streams max_tokens 0: the scored prompt, then the finish, per choice", async () => {
    const res = await complete({ prompt: ["ab", "xyz"], echo: true, logprobs: 1, max_tokens: 0, stream: true });
    const chunks = (sseEvents(res.body) as any[]).slice(0, -1);
    for (const index of [0, 1]) {
      const mine = chunks.filter((c) => c.choices[0].index === index).map((c) => c.choices[0]);
      expect(mine.map((c) => [c.text, c.logprobs?.tokens ?? null, c.finish_reason])).toEqual([
        [index === 0 ? "ab" : "xyz", index === 0 ? ["a", "b"] : ["x", "y", "z"], null],
        ["", null, "length"],
      ]);
    }
  });
});

describe("completions: several prompts", () => {
  it("takes every prompt shape: a string, strings, token ids, lists of token ids", async () => {
    expect((await complete({ prompt: "ab", max_tokens: 1 })).json().usage.prompt_tokens).toBe(2);
    expect((await complete({ prompt: ["ab", "cde"], max_tokens: 1 })).json().usage.prompt_tokens).toBe(5);
    expect((await complete({ prompt: [1, 2, 3], max_tokens: 1 })).json().usage.prompt_tokens).toBe(3);
    const lists = (
      await complete({
        prompt: [
          [104, 105],
          [1, 2, 3],
        ],
        max_tokens: 1,
        echo: true,
      })
    ).json();
    expect(lists.usage.prompt_tokens).toBe(5);
    expect(lists.choices[0].text).toBe("hiHello"); // token ids echo their decoded text
  });

  it("numbers choices prompt-major (index = prompt * n + choice) and sums usage (prompt tokens once per prompt)", async () => {
    const fake = fakeModel({ script: (prompt) => [prompt[0], word("!")] });
    const body = (await complete({ prompt: ["a1", "b22", "c"], n: 2, max_tokens: 2, echo: true }, fake)).json();
    expect(body.choices.map((c: any) => [c.index, c.text])).toEqual([
      [0, "a1a!"],
      [1, "a1a!"],
      [2, "b22b!"],
      [3, "b22b!"],
      [4, "cc!"],
      [5, "cc!"],
    ]);
    expect(body.usage).toEqual({
      prompt_tokens: 6,
      completion_tokens: 12,
      total_tokens: 18,
      prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
      completion_tokens_details: NO_DETAILS,
    });
  });

  it("submits the prompts together: their prefills share the first step", async () => {
    const fake = fakeModel();
    await complete({ prompt: ["abc", "defg", "hi"], max_tokens: 1 }, fake);
    const first = fake.backend.calls.slice(0, 3);
    expect(first.map((c) => c.kind)).toEqual(["prefill", "prefill", "prefill"]);
    expect(new Set(first.map((c) => c.seqIds[0])).size).toBe(3);
  });

  it("streams each prompt's choices under their own index, each opening with its echo", async () => {
    const res = await complete({ prompt: ["ab", "cd"], n: 2, max_tokens: 1, echo: true, stream: true });
    const chunks = (sseEvents(res.body) as any[]).slice(0, -1);
    for (const index of [0, 1, 2, 3]) {
      const texts = chunks.filter((c) => c.choices[0].index === index).map((c) => c.choices[0].text);
      expect(texts).toEqual([index < 2 ? "ab" : "cd", "Hello", ""]);
    }
  });

  it("scores a batch of token-id prompts as lm-evaluation-harness asks (echo, logprobs 1, max_tokens 0 or 1, temperature 0)", async () => {
    const prompts = [ids("The cat"), ids("A dog ran"), ids("Hi!")];
    for (const maxTokens of [0, 1]) {
      const res = await complete({ prompt: prompts, echo: true, logprobs: 1, max_tokens: maxTokens, temperature: 0, seed: 1234 });
      expect(res.statusCode).toBe(200);
      const body = res.json();
      expect(body.choices.map((c: any) => c.index)).toEqual([0, 1, 2]);
      body.choices.forEach((c: any, i: number) => {
        expect(c.logprobs.tokens).toHaveLength(prompts[i].length + maxTokens);
        expect(c.logprobs.token_logprobs[0]).toBeNull();
        // The continuation is the prompt's last two tokens (ctxlen = length - 2).
        const parsed = lmEvalParse(c.logprobs, prompts[i].length - 2, maxTokens === 1);
        expect(parsed.sum).toBeCloseTo(fakePromptLogprob(prompts[i].at(-2)!) + fakePromptLogprob(prompts[i].at(-1)!), 12);
        expect(parsed.greedy).toBe(true);
      });
      expect(body.usage.prompt_tokens).toBe(7 + 9 + 3);
      expect(body.usage.completion_tokens).toBe(3 * maxTokens);
    }
  });

  it("fails the whole request when one prompt fails, and stops the others", async () => {
    const fake = fakeModel({ failForwardOf: { opened: 2, message: "boom" }, script: Array.from({ length: 30 }, () => word("Hello")) });
    const res = await complete({ prompt: ["abc", "def", "ghi"], max_tokens: 30 }, fake);
    expect(res.statusCode).toBe(500);
    await fake.model.engine.close();
    expect(fake.model.engine.load).toEqual({ waiting: 0, running: 0 });
    expect(fake.backend.computed).toBeLessThan(60);
  });

  it("queues all of its prompts or none: a full queue refuses the request and keeps none of it", async () => {
    const fake = fakeModel({ maxWaiting: 1 });
    const res = await complete({ prompt: ["a", "b", "c", "d", "e", "f"], max_tokens: 1 }, fake);
    expect(res.statusCode).toBe(503);
    await fake.model.engine.close();
    expect(fake.backend.computed).toBe(0);
  });

  it("refuses a prompt list past the limit, an empty one, and mixed shapes, naming prompt", async () => {
    for (const prompt of [Array.from({ length: 65 }, () => "a"), [], [[]], ["a", 1], [[1], "a"]]) {
      const res = await complete({ prompt, max_tokens: 1 });
      expect(res.statusCode).toBe(400);
      expect(res.json().error.param).toMatch(/^prompt/);
    }
    expect((await complete({ prompt: Array.from({ length: 64 }, () => "a"), max_tokens: 1 })).statusCode).toBe(200);
  });
});
