/**
 * Prompt scoring on the real server and model: `/v1/completions` with `echo`, `logprobs` and
 * `max_tokens: 0`, as lm-evaluation-harness sends it, against llama.cpp (node-llama-cpp) on the
 * same GGUF and the same token ids.
 *
 * - Perplexity of a text of our own: kiln's, from the prompt log-probabilities its prefill computes,
 *   within 2% of llama.cpp's, computed from llama.cpp's next-token distribution at every position.
 * - A token scored inside a prompt has the log-probability kiln reports when it generates that token
 *   greedily: exactly for the first generated token (both come from a prefill), and up to rounding
 *   for the later ones, which generation computes in one-token decode steps. With the default
 *   int8-activation numerics a decode row rounds differently from the same position inside a
 *   prefill (by up to half a nat here on text the model finds unlikely); with float activations
 *   (`--accuracy-level 0`) the two agree to 1e-4. A position shifted by one would be off by nats.
 * - Three prompts in one request score exactly as three requests alone.
 */
import { getLlama, type Llama, type LlamaModel } from "node-llama-cpp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readTokenizerSpec } from "../../../src/runtime/artifact/index.js";
import { Tokenizer } from "../../../src/runtime/text/index.js";
import { compiledArtifact, TEXT_SLUG, textGgufPath } from "../../support/model.js";
import { type RunningServer, startServer, stopServer } from "../../support/server.js";

/** Our own text (not from any corpus the model may have memorized verbatim). */
const TEXT = `The lighthouse keeper on Marrow Island kept two notebooks. In the first he wrote the weather \
every six hours: wind from the north-east, a falling glass, fog that came in low over the rocks \
and lifted again before noon. In the second he wrote down the ships he saw, with their colours, \
the time they passed, and a guess at where they were going. Most of the guesses were wrong, but he \
did not mind. The point, he told his daughter, was to look carefully enough to have a guess at all.

When the supply boat stopped coming in the winter of the storms, the island grew very quiet. The \
keeper rationed the lamp oil, mended the roof of the shed with planks from an old crate, and taught \
himself to bake bread without yeast. It was flat and heavy, but it was warm. In the evenings he \
read the notebooks from the beginning, and found that the weather of ten years had a shape to it: \
the wet springs came in pairs, and the calmest months were never the ones anyone expected. He \
began a third notebook for these patterns, and by the time the boat returned in March he had \
filled half of it.`;

interface Scored {
  tokens: string[];
  token_logprobs: Array<number | null>;
  top_logprobs: Array<Record<string, number> | null>;
}

let server: RunningServer;
let llama: Llama;
let model: LlamaModel;
let ids: number[];

async function completions(body: Record<string, unknown>): Promise<any> {
  const res = await fetch(`${server.baseURL}/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: "Bearer local" },
    body: JSON.stringify({ model: TEXT_SLUG, temperature: 0, ...body }),
  });
  const json = (await res.json()) as any;
  if (res.status !== 200) throw new Error(`${res.status}: ${JSON.stringify(json)}`);
  fingerprints.add(json.system_fingerprint);
  return json;
}

/** The artifact that answered each request: a server follows promotions, so a test checks it did not change under it. */
const fingerprints = new Set<string>();

/** kiln's log-probability of each prompt token after the first, from one scoring request. */
async function kilnScores(prompt: number[]): Promise<number[]> {
  const body = await completions({ prompt, echo: true, logprobs: 1, max_tokens: 0 });
  expect(body.choices[0]).toMatchObject({ text: expect.any(String), finish_reason: "length" });
  expect(body.usage).toMatchObject({
    prompt_tokens: prompt.length,
    completion_tokens: 0,
    total_tokens: prompt.length,
    prompt_tokens_details: { cached_tokens: 0 },
  });
  const lp = body.choices[0].logprobs as Scored;
  expect(lp.token_logprobs).toHaveLength(prompt.length);
  expect(lp.token_logprobs[0]).toBeNull();
  return lp.token_logprobs.slice(1) as number[];
}

/** llama.cpp's log-probability of each token after the first, from its full next-token distribution at every position. */
async function llamaScores(prompt: number[]): Promise<number[]> {
  // One thread: llama.cpp's spinning threads slow down badly when another process takes a core.
  const context = await model.createContext({ contextSize: 1024, threads: 1, flashAttention: false });
  const sequence = context.getSequence();
  const out: number[] = [];
  // In chunks: each position's distribution is a vocabulary-sized map, so only a few live at once.
  const CHUNK = 32;
  for (let start = 0; start < prompt.length - 1; start += CHUNK) {
    const end = Math.min(start + CHUNK, prompt.length - 1);
    const input = prompt.slice(start, end).map((t) => [t, { generateNext: { probabilities: true } }] as const);
    const results = await sequence.controlledEvaluate(input as never);
    for (let i = start; i < end; i++) out.push(Math.log(results[i - start]!.next.probabilities!.get(prompt[i + 1] as never)!));
  }
  await context.dispose();
  return out;
}

/** llama.cpp's rank of each token after the first in its next-token distribution (1 = likeliest). */
async function llamaRanks(prompt: number[]): Promise<number[]> {
  const context = await model.createContext({ contextSize: 1024, threads: 1, flashAttention: false });
  const sequence = context.getSequence();
  const input = prompt.slice(0, -1).map((t) => [t, { generateNext: { probabilities: true } }] as const);
  const results = await sequence.controlledEvaluate(input as never);
  const ranks = prompt.slice(1).map((target, i) => {
    const probabilities = results[i]!.next.probabilities! as Map<number, number>;
    const p = probabilities.get(target)!;
    let above = 0;
    for (const q of probabilities.values()) if (q > p) above++;
    return above + 1;
  });
  await context.dispose();
  return ranks;
}

const perplexity = (logprobs: number[]) => Math.exp(-logprobs.reduce((a, b) => a + b, 0) / logprobs.length);

beforeAll(async () => {
  const { dir } = await compiledArtifact();
  ids = Tokenizer.fromSpec(readTokenizerSpec(dir)).encode(TEXT);
  server = await startServer(TEXT_SLUG, ["--kv-memory-mb", "1024"]);
  llama = await getLlama({ gpu: false });
  model = await llama.loadModel({ modelPath: await textGgufPath() });
});

afterAll(async () => {
  await model?.dispose();
  await llama?.dispose();
  expect(await stopServer(server), server?.stderr()).toBe(0);
});

describe("prompt scoring on the real model", () => {
  it("gives a perplexity within 2% of llama.cpp's on the same GGUF and tokens", async () => {
    expect(ids.length).toBeGreaterThan(200);
    expect(ids.length).toBeLessThan(400);
    const kiln = await kilnScores(ids);
    const reference = await llamaScores(ids);
    const [pk, pl] = [perplexity(kiln), perplexity(reference)];
    console.log(
      `perplexity over ${ids.length} tokens: kiln ${pk.toFixed(4)} (${[...fingerprints].join(", ")}), llama.cpp ${pl.toFixed(4)}, ratio ${(pk / pl).toFixed(4)}`,
    );
    expect(Math.abs(pk / pl - 1)).toBeLessThan(0.02);
    // Token by token too: no position is off by much (the difference is rounding, not a shifted position).
    const worst = Math.max(...kiln.map((v, i) => Math.abs(v - reference[i])));
    expect(worst).toBeLessThan(1.5);
  });

  it("scores a token as kiln reports it when it generates that token greedily", async () => {
    const prompt = ids.slice(0, 40);
    const generated = await completions({ prompt, max_tokens: 16, logprobs: 1 });
    const gen = generated.choices[0].logprobs as Scored;
    // The generated text's ids: tokenized again and checked token for token against what was generated.
    const tokenizer = Tokenizer.fromSpec(readTokenizerSpec((await compiledArtifact()).dir));
    const continuation = tokenizer.encode(generated.choices[0].text);
    const scored = (await completions({ prompt: [...prompt, ...continuation], echo: true, logprobs: 1, max_tokens: 0 })).choices[0].logprobs as Scored;
    expect(scored.tokens.slice(prompt.length)).toEqual(gen.tokens);
    const diffs = gen.token_logprobs.map((v, i) => Math.abs((v as number) - (scored.token_logprobs[prompt.length + i] as number)));
    const mean = diffs.reduce((a, b) => a + b, 0) / diffs.length;
    console.log(
      `greedy vs scored logprobs over ${diffs.length} tokens: first |diff| ${diffs[0].toExponential(2)}, mean ${mean.toFixed(4)}, max ${Math.max(...diffs).toFixed(4)}`,
    );
    expect(diffs[0]).toBeLessThan(1e-4);
    expect(mean).toBeLessThan(0.15);
    for (const d of diffs) expect(d).toBeLessThan(1);
  });

  it("vLLM's prompt_logprobs: each token's log probability as echo gives it, its alternatives, and its rank as llama.cpp ranks it", async () => {
    const prompt = ids.slice(0, 60);
    const body = await completions({ prompt, max_tokens: 1, prompt_logprobs: 3, echo: true, logprobs: 2 });
    const scored = body.choices[0].prompt_logprobs as Array<Record<string, { logprob: number; rank: number; decoded_token: string }> | null>;
    const echo = body.choices[0].logprobs as Scored;
    expect(scored).toHaveLength(prompt.length);
    expect(scored[0]).toBeNull();
    // echo's alternatives stay at its own logprobs: 2.
    expect(Object.keys(echo.top_logprobs[1]!)).toHaveLength(2);
    const ranks: number[] = [];
    for (let i = 1; i < prompt.length; i++) {
      const own = scored[i]![String(prompt[i])];
      expect(own.logprob).toBe(echo.token_logprobs[i]);
      expect(own.decoded_token).toBe(echo.tokens[i]);
      const alternatives = Object.entries(scored[i]!).filter(([, e]) => e.rank <= 3);
      // The three likeliest with ranks 1..3, the prompt's token among them exactly when its rank is at most 3.
      expect(Object.keys(scored[i]!).length).toBe(own.rank <= 3 ? 3 : 4);
      expect(alternatives.map(([, e]) => e.rank).sort()).toEqual([1, 2, 3]);
      for (const [, e] of alternatives) if (e.rank > 1) expect(e.logprob).toBeLessThanOrEqual(alternatives.find(([, a]) => a.rank === e.rank - 1)![1].logprob);
      if (own.rank > 3) expect(own.logprob).toBeLessThanOrEqual(Math.min(...alternatives.map(([, e]) => e.logprob)));
      ranks.push(own.rank);
    }
    const reference = await llamaRanks(prompt);
    const off = ranks.map((r, i) => Math.abs(Math.log(r / reference[i])));
    console.log(`prompt token ranks, kiln / llama.cpp: ${ranks.map((r, i) => `${r}/${reference[i]}`).join(" ")}`);
    expect(ranks.filter((r, i) => (r === 1) === (reference[i] === 1)).length / ranks.length).toBeGreaterThanOrEqual(0.9);
    expect(Math.max(...off)).toBeLessThan(1.5);
    // Not streamed, as vLLM: a 400 naming it.
    const res = await fetch(`${server.baseURL}/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: TEXT_SLUG, prompt: "Hi", prompt_logprobs: 1, stream: true }),
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as any).error).toMatchObject({ code: "unsupported_value", param: "prompt_logprobs" });
  });

  it("scores three prompts in one request as it scores each alone", async () => {
    const prompts = [ids.slice(0, 50), ids.slice(60, 130), ids.slice(150, 180)];
    const together = await completions({ prompt: prompts, echo: true, logprobs: 2, max_tokens: 0 });
    expect(together.choices.map((c: any) => c.index)).toEqual([0, 1, 2]);
    expect(together.usage.prompt_tokens).toBe(50 + 70 + 30);
    for (let i = 0; i < 3; i++) {
      const alone = await completions({ prompt: prompts[i], echo: true, logprobs: 2, max_tokens: 0 });
      expect(together.choices[i].logprobs).toEqual(alone.choices[0].logprobs);
    }
    expect(fingerprints.size, [...fingerprints].join(", ")).toBe(1);
  });
});
