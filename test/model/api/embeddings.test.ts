/**
 * Embeddings on the real model and server, against llama.cpp (node-llama-cpp's embedding context)
 * on the same GGUF and token ids. llama.cpp's embedding of a generative model is its output norm at
 * the input's last position; kiln's "last" pooling is the same tensor of its own graph.
 *
 * - Float activations (the accuracy-level 0 artifact): cosine to llama.cpp at least 0.9995 (0.99975
 *   measured). The default int8-activation artifact rounds each layer's input: at least 0.99 each
 *   and 0.995 on average (0.9956 to 0.9991 measured). The previous position's state, what an
 *   off-by-one would answer, is at 0.26-0.75, so the bounds tell a right vector from a wrong one.
 * - "mean" pooling (`--pooling mean`) is the average of llama.cpp's last-position embeddings of every
 *   prefix of the input (each position of a causal model sees only its prefix).
 * - An input longer than a prefill chunk pools across chunks; the official openai client (which
 *   asks for base64) and the ollama client decode the same vectors; a client that goes away
 *   cancels the inputs not yet computed.
 */
import { getLlama, type Llama, type LlamaEmbeddingContext, type LlamaModel } from "node-llama-cpp";
import { Ollama } from "ollama";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TextSession } from "../../../src/runtime/text-worker/session.js";
import { compiledArtifact, TEXT_SLUG, textGgufPath } from "../../support/model.js";
import { type RunningServer, startServer, stopServer } from "../../support/server.js";

const TEXTS = [
  "The cat sat on the mat.",
  "A dog lay on the rug.",
  "Quarterly revenue rose 5% on strong demand for cloud services.",
  "hello",
  "def add(a, b):\n    return a + b",
  "La tour Eiffel est à Paris.",
];

let server: RunningServer;
let meanServer: RunningServer;
let llama: Llama;
let model: LlamaModel;
let reference: LlamaEmbeddingContext;

async function post(base: string, path: string, body: Record<string, unknown>, signal?: AbortSignal): Promise<any> {
  const res = await fetch(`${base}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), signal });
  const json = (await res.json()) as any;
  if (res.status !== 200) throw new Error(`${res.status}: ${JSON.stringify(json)}`);
  return json;
}

/** kiln's pooled vectors (not normalized) and its token ids of each text. */
async function kilnEmbeddings(base: string, texts: string[]): Promise<Array<{ vector: number[]; ids: number[] }>> {
  const body = await post(base, "/embeddings", { model: TEXT_SLUG, input: texts, normalize: false });
  return Promise.all(
    texts.map(async (text, i) => ({
      vector: body.data[i].embedding as number[],
      ids: (await post(base, "/tokenize", { model: TEXT_SLUG, prompt: text })).tokens as number[],
    })),
  );
}

function cosine(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  return dot / Math.sqrt(na * nb);
}

/** llama.cpp's embedding of exactly these token ids: its output norm at the last one. */
async function llamaLast(ids: number[]): Promise<readonly number[]> {
  return (await reference.getEmbeddingFor(ids as never)).vector;
}

beforeAll(async () => {
  [server, meanServer] = await Promise.all([startServer(TEXT_SLUG), startServer(TEXT_SLUG, ["--pooling", "mean"])]);
  llama = await getLlama({ gpu: false });
  model = await llama.loadModel({ modelPath: await textGgufPath() });
  reference = await model.createEmbeddingContext({ contextSize: 1024, threads: 2 });
  // SmolLM2's vocabulary adds neither BOS nor EOS, so node-llama-cpp embeds the ids it is given as they are.
  expect([model.tokens.shouldPrependBosToken, model.tokens.shouldAppendEosToken]).toEqual([false, false]);
});

afterAll(async () => {
  await reference?.dispose();
  await model?.dispose();
  await llama?.dispose();
  expect(await stopServer(server), server?.stderr()).toBe(0);
  expect(await stopServer(meanServer), meanServer?.stderr()).toBe(0);
});

describe("embeddings against llama.cpp", () => {
  it("with float activations, the graph's hidden output at the last position is llama.cpp's embedding", async () => {
    const session = await TextSession.load((await compiledArtifact({ accuracyLevel: 0 })).dir, { slots: 1 });
    try {
      const width = session.manifest.shape.hidden;
      for (const text of TEXTS) {
        const ids = model.tokenize(text) as unknown as number[];
        session.kv.truncate(0, 0);
        await session.forward(0, 1, ids.length, ids);
        const last = session.lastHidden.subarray((ids.length - 1) * width, ids.length * width);
        expect(cosine(last, await llamaLast(ids)), text).toBeGreaterThan(0.9995);
      }
    } finally {
      await session.release();
    }
  });

  it("the served default ('last' pooling, int8 activations) is llama.cpp's embedding up to rounding", async () => {
    const kiln = await kilnEmbeddings(server.baseURL, TEXTS);
    const cosines: number[] = [];
    for (const { vector, ids } of kiln) cosines.push(cosine(vector, await llamaLast(ids)));
    const mean = cosines.reduce((a, b) => a + b, 0) / cosines.length;
    console.log(`last pooling, cosine to llama.cpp: ${cosines.map((c) => c.toFixed(4)).join(" ")} (mean ${mean.toFixed(4)})`);
    for (const c of cosines) expect(c).toBeGreaterThan(0.99);
    expect(mean).toBeGreaterThan(0.995);
  });

  it("'mean' pooling averages llama.cpp's embeddings of every prefix", async () => {
    const kiln = await kilnEmbeddings(meanServer.baseURL, TEXTS.slice(0, 3));
    for (const { vector, ids } of kiln) {
      const states = await Promise.all(ids.map((_, k) => llamaLast(ids.slice(0, k + 1))));
      const average = vector.map((_, j) => states.reduce((s, v) => s + v[j], 0) / states.length);
      const c = cosine(vector, average);
      console.log(`mean pooling, ${ids.length} tokens: cosine ${c.toFixed(4)}`);
      expect(c).toBeGreaterThan(0.99);
    }
  });

  it("pools an input longer than a prefill chunk as llama.cpp embeds it whole", async () => {
    const text = Array.from({ length: 40 }, (_, i) => `Line ${i}: the quick brown fox jumps over the lazy dog.`).join("\n");
    const [{ vector, ids }] = await kilnEmbeddings(server.baseURL, [text]);
    expect(ids.length).toBeGreaterThan(512); // three chunks of 256
    const c = cosine(vector, await llamaLast(ids));
    console.log(`${ids.length} tokens: cosine ${c.toFixed(4)}`);
    expect(c).toBeGreaterThan(0.99);
  });
});

describe("embedding clients", () => {
  it("the official openai client (base64) and the ollama client decode kiln's unit vectors", async () => {
    const client = new OpenAI({ baseURL: server.baseURL, apiKey: "any" });
    const viaOpenai = await client.embeddings.create({ model: TEXT_SLUG, input: TEXTS.slice(0, 2) });
    const floats = await post(server.baseURL, "/embeddings", { model: TEXT_SLUG, input: TEXTS.slice(0, 2) });
    expect(viaOpenai.usage.prompt_tokens).toBe(floats.usage.prompt_tokens);
    viaOpenai.data.forEach((d, i) => {
      expect(d.embedding).toHaveLength(576);
      d.embedding.forEach((x, j) => expect(x).toBeCloseTo(floats.data[i].embedding[j], 6));
    });
    const ollama = new Ollama({ host: server.root });
    const viaOllama = await ollama.embed({ model: TEXT_SLUG, input: TEXTS.slice(0, 2) });
    viaOllama.embeddings.forEach((v, i) => {
      expect(Math.hypot(...v)).toBeCloseTo(1, 5);
      v.forEach((x, j) => expect(x).toBeCloseTo(floats.data[i].embedding[j], 6));
    });
  });

  it("a client that goes away cancels the inputs not yet computed", async () => {
    const steps = async () => {
      const text = await (await fetch(`${server.root}/metrics`)).text();
      return Number(text.match(new RegExp(`^kiln_engine_steps_total\\{model="${TEXT_SLUG}"\\} (\\S+)$`, "m"))?.[1] ?? NaN);
    };
    // 64 inputs of about 330 tokens (two prefill chunks each): 16 in the engine at once hold 5,000 tokens, seconds of work.
    const input = Array.from({ length: 64 }, (_, i) => `Input ${i}: ${"a long sentence about nothing in particular, ".repeat(40)}`);
    const abort = new AbortController();
    const asked = post(server.baseURL, "/embeddings", { model: TEXT_SLUG, input }, abort.signal).catch((err: Error) => err);
    await new Promise((r) => setTimeout(r, 1500));
    abort.abort();
    expect(await asked).toBeInstanceOf(Error);
    await new Promise((r) => setTimeout(r, 1000)); // the step in flight ends
    const settled = await steps();
    await new Promise((r) => setTimeout(r, 1500));
    // Work left running (ten steps of 512 tokens) would take several more steps in 1.5 s.
    expect(await steps()).toBe(settled);
    // The server still answers.
    expect((await post(server.baseURL, "/embeddings", { model: TEXT_SLUG, input: "still here" })).data).toHaveLength(1);
  });
});
