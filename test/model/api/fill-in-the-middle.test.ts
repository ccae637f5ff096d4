/**
 * Completions' `suffix` on a model whose vocabulary has fill-in-the-middle markers, over real HTTP,
 * against llama.cpp (node-llama-cpp) on the same GGUF file. No model that kiln can fetch here has
 * the markers, so the weights are a small random-weight llama carrying SmolLM2's tokenizer with three
 * of its unused control tokens renamed to StarCoder's `<fim_prefix>`, `<fim_suffix>` and
 * `<fim_middle>` (llama.cpp finds them by those texts, as kiln does). The reference prompt is the one
 * node-llama-cpp's own infill completion evaluates; kiln must feed the same token ids (its
 * `prompt_logprobs` name them), score them as llama.cpp does, and start its answer from llama.cpp's
 * distribution after the middle marker. F32 weights: no rounding flips, so the bound is tight.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { getLlama, LlamaCompletion, type Llama, type LlamaModel } from "node-llama-cpp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GgmlType, GgufValueType } from "../../../src/compiler/gguf/types.js";
import { meta, type MetaValue } from "../../fixtures/gguf/write-gguf.js";
import { type TinyModelTypes, writeTinyModel } from "../../fixtures/synthetic/tiny-model.js";
import { type RunningServer, startServer, stopServer } from "../../support/server.js";
import { syntheticTokenizer } from "../../support/synthetic-parity.js";

const FILE = "fim-tiny.gguf";
const SLUG = "fim-tiny";
/** SmolLM2's `<jupyter_start>`, `<jupyter_text>`, `<jupyter_code>`: control tokens no prompt here uses. */
const MARKERS: Array<[number, string]> = [
  [11, "<fim_prefix>"],
  [12, "<fim_suffix>"],
  [13, "<fim_middle>"],
];
const PREFIX = "def add(a, b):\n    return";
const SUFFIX = "\n\nprint(add(1, 2))\n";
/** Largest |log p_kiln - log p_llama.cpp| allowed, F32 weights (float summation order only). */
const LIMIT = 0.02;

const F32 = GgmlType.F32;
let dir: string;
let server: RunningServer | undefined;
let llama: Llama;
let model: LlamaModel;
/** The prompt node-llama-cpp's infill completion evaluates, and llama.cpp's log-probabilities along it. */
let reference: { prompt: number[]; next: Array<Map<number, number>> };

/** SmolLM2's tokenizer with the three markers in place of unused control tokens. */
async function fimTokenizer(): Promise<Array<[string, MetaValue]>> {
  return (await syntheticTokenizer()).map(([key, value]): [string, MetaValue] => {
    if (key !== "tokenizer.ggml.tokens" || value.type !== GgufValueType.ARRAY) return [key, value];
    const tokens = value.items.map((v) => v as string);
    for (const [id, text] of MARKERS) tokens[id] = text;
    return [key, meta.arr(GgufValueType.STRING, tokens)];
  });
}

/** Log-probabilities after each prompt position (id -> log p), from llama.cpp with no sampling. */
async function llamaLogprobs(prompt: number[]): Promise<Array<Map<number, number>>> {
  const context = await model.createContext({ contextSize: 256, threads: 2, flashAttention: false });
  try {
    const sequence = context.getSequence();
    const out = await sequence.controlledEvaluate(prompt.map((t) => [t, { generateNext: { probabilities: true } }]) as never);
    return prompt.map((_, i) => {
      const probabilities = (out[i] as { next: { probabilities: Map<number, number> } }).next.probabilities;
      return new Map([...probabilities].map(([t, p]) => [Number(t), Math.log(p)]));
    });
  } finally {
    await context.dispose();
  }
}

async function completions(body: Record<string, unknown>): Promise<Response> {
  return fetch(`${server!.baseURL}/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: SLUG, ...body }),
  });
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "kiln-fim-"));
  const same: Omit<TinyModelTypes, "embedding" | "output"> = { attnQ: F32, attnK: F32, attnV: F32, attnOutput: F32, ffnGate: F32, ffnUp: F32, ffnDown: F32 };
  const spec = {
    architecture: "llama",
    seed: 77,
    layers: 2,
    hidden: 64,
    heads: 4,
    kvHeads: 2,
    ffn: 128,
    // Past llama.cpp's batch of 2,048, so that /infill has room for files as context.
    contextLength: 4096,
    ropeTheta: 10000,
    rmsEps: 1e-5,
  } as const;
  await writeTinyModel(join(dir, FILE), { ...spec, types: { embedding: F32, output: F32, ...same } }, await fimTokenizer());
  llama = await getLlama({ gpu: false });
  model = await llama.loadModel({ modelPath: join(dir, FILE) });
  const context = await model.createContext({ contextSize: 256, threads: 2, flashAttention: false });
  const sequence = context.getSequence();
  const completion = new LlamaCompletion({ contextSequence: sequence });
  expect(completion.infillSupported).toBe(true);
  await completion.generateInfillCompletion(PREFIX, SUFFIX, { maxTokens: 1, temperature: 0 });
  const evaluated = [...sequence.contextTokens];
  await context.dispose();
  // What the one generated token left in the context is not prompt: the prompt ends at the middle marker.
  const prompt = evaluated.slice(0, evaluated.lastIndexOf(13 as never) + 1).map(Number);
  reference = { prompt, next: await llamaLogprobs(prompt) };
  server = await startServer(`./${FILE}`, ["--max-running", "2"], { cwd: dir });
}, 300_000);

afterAll(async () => {
  expect(await stopServer(server)).toBe(0);
  await model?.dispose();
  await llama?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

describe("completions with suffix on a model with fill-in-the-middle markers", () => {
  it("llama.cpp's infill prompt is prefix marker, prefix, suffix marker, suffix, middle marker", () => {
    const { prompt } = reference;
    expect([prompt[0], prompt.at(-1)]).toEqual([11, 13]);
    expect(prompt.filter((t) => t === 12)).toHaveLength(1);
    const suffixAt = prompt.indexOf(12);
    expect(model.detokenize(prompt.slice(1, suffixAt) as never)).toBe(PREFIX);
    expect(model.detokenize(prompt.slice(suffixAt + 1, -1) as never)).toBe(SUFFIX);
  });

  it("feeds llama.cpp's prompt ids and scores them as llama.cpp does", async () => {
    const res = await completions({ prompt: PREFIX, suffix: SUFFIX, max_tokens: 1, temperature: 0, prompt_logprobs: 1 });
    expect(res.status, await res.clone().text()).toBe(200);
    const body = (await res.json()) as {
      usage: { prompt_tokens: number };
      choices: Array<{ prompt_logprobs: Array<Record<string, { logprob: number; rank: number }> | null> }>;
    };
    const scored = body.choices[0].prompt_logprobs;
    expect(body.usage.prompt_tokens).toBe(reference.prompt.length);
    expect(scored).toHaveLength(reference.prompt.length);
    expect(scored[0]).toBeNull();
    let worst = 0;
    for (let i = 1; i < scored.length; i++) {
      const token = reference.prompt[i];
      // The prompt's own token comes first among the entries; a sampled alternative may follow it.
      const entry = scored[i]![String(token)];
      expect(entry, `position ${i}: kiln scored other ids ${Object.keys(scored[i]!)}`).toBeDefined();
      worst = Math.max(worst, Math.abs(entry.logprob - reference.next[i - 1].get(token)!));
    }
    console.log(JSON.stringify({ suffixPromptTokens: reference.prompt.length, worstPromptLogprobDiff: worst }));
    expect(worst).toBeLessThan(LIMIT);
  });

  it("answers from llama.cpp's distribution after the middle marker, streamed or not", async () => {
    const after = reference.next.at(-1)!;
    const top = [...after.entries()].sort((a, b) => b[1] - a[1]).slice(0, 5);
    const res = await completions({ prompt: PREFIX, suffix: SUFFIX, max_tokens: 1, temperature: 0, logprobs: 5 });
    const body = (await res.json()) as { choices: Array<{ text: string; logprobs: { tokens: string[]; top_logprobs: Array<Record<string, number>> } }> };
    const kilnTop = body.choices[0].logprobs.top_logprobs[0];
    const text = (id: number) => model.detokenize([id] as never, true);
    for (const [id, logprob] of top) {
      expect(kilnTop[text(id)], `kiln's top 5 lacks ${JSON.stringify(text(id))}`).toBeDefined();
      expect(Math.abs(kilnTop[text(id)] - logprob)).toBeLessThan(LIMIT);
    }
    expect(body.choices[0].text).toBe(text(top[0][0]));
    const streamed = await completions({ prompt: PREFIX, suffix: SUFFIX, max_tokens: 4, temperature: 0, stream: true });
    const sse = await streamed.text();
    expect(sse.trimEnd().endsWith("data: [DONE]")).toBe(true);
    const pieces = sse
      .split("\n\n")
      .filter((b) => b.startsWith("data: {"))
      .map((b) => JSON.parse(b.slice(6)) as { choices: Array<{ text: string }> });
    expect(pieces.map((p) => p.choices[0]?.text ?? "").join("")).toMatch(new RegExp(`^${escapeRegExp(text(top[0][0]))}`));
  });

  it("the same prompt without a suffix is another prompt: no markers", async () => {
    const res = await completions({ prompt: PREFIX, max_tokens: 1, prompt_logprobs: 0 });
    const body = (await res.json()) as { usage: { prompt_tokens: number }; choices: Array<{ prompt_logprobs: Array<Record<string, unknown> | null> }> };
    const ids = body.choices[0].prompt_logprobs.slice(1).map((p) => Number(Object.keys(p!)[0]));
    expect(ids).not.toContain(11);
    expect(body.usage.prompt_tokens).toBe(reference.prompt.indexOf(12) - 1);
  });
});

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

describe("llama.cpp's /infill on the same model", () => {
  it("/props names the vocabulary's BOS and EOS tokens and the chat template as llama.cpp reads them from the GGUF", async () => {
    const props = (await (await fetch(`${server!.root}/props?model=${SLUG}`)).json()) as Record<string, any>;
    expect(props).toMatchObject({ bos_token: model.tokens.bosString, eos_token: model.tokens.eosString, model_path: SLUG });
    expect(props.chat_template).toBe(model.fileInfo.metadata.tokenizer.chat_template ?? "");
    expect(props.default_generation_settings.n_ctx).toBeGreaterThan(2048);
  });

  it("prompts as llama.cpp's server does (repository marker, snippet, prefix, suffix) and scores the first token as llama.cpp does", async () => {
    const file = { filename: "util.py", text: "def helper():\n    pass\n" };
    const res = await fetch(`${server!.root}/infill`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: SLUG, input_prefix: PREFIX, input_suffix: SUFFIX, input_extra: [file], n_predict: 1, temperature: 0, n_probs: 5 }),
    });
    expect(res.status, await res.clone().text()).toBe(200);
    const body = (await res.json()) as { tokens_evaluated: number; completion_probabilities: Array<{ top_logprobs: Array<{ id: number; logprob: number }> }> };
    // format_prompt_infill's layout, assembled here with llama.cpp's own tokenizer: SmolLM2's `<reponame>` (id 4) is its
    // repository marker, and with no file separator in the vocabulary each file follows a snippet line.
    const tokens = (text: string) => [...model.tokenize(text)].map(Number);
    const expected = [
      4,
      ...tokens("myproject\n"),
      ...tokens("\n\n--- snippet ---\n\n"),
      ...tokens(file.text),
      11,
      ...tokens(PREFIX),
      12,
      ...tokens(SUFFIX),
      13,
    ];
    expect(body.tokens_evaluated).toBe(expected.length);
    const after = (await llamaLogprobs(expected)).at(-1)!;
    const top = [...after.entries()].sort((a, b) => b[1] - a[1]).slice(0, 5);
    const kiln = body.completion_probabilities[0].top_logprobs;
    expect(kiln.map((t) => t.id)).toEqual(top.map(([id]) => id));
    const diffs = top.map(([, logprob], i) => Math.abs(kiln[i].logprob - logprob));
    console.log(JSON.stringify({ infillPromptTokens: expected.length, worstTop5Diff: Math.max(...diffs) }));
    for (const diff of diffs) expect(diff).toBeLessThan(LIMIT);
  });
});
