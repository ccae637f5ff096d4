/**
 * The batch engine on the real model: batching must not change what a request gets. Greedy and
 * seeded results are the same alone or beside others, n choices share one prefill, and sixteen
 * concurrent generations each match their solo run.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TextRuntime } from "../../../src/runtime/text-runtime.js";
import { BatchEngine } from "../../../src/scheduler/batch-engine.js";
import { workerStepBackend } from "../../../src/scheduler/step-backend.js";
import type { GenerationRequest, SamplingParams } from "../../../src/scheduler/types.js";
import { CHAT_PROMPTS, compiledArtifact } from "../../support/model.js";

const SLOTS = 16;
let runtime: TextRuntime;
let engine: BatchEngine;

const chat = (q: string) => runtime.encodePrompt(runtime.renderChat([{ role: "user", content: q }]));
const ask = (q: string, maxTokens: number, sampling: SamplingParams = { temperature: 0 }, n = 1): GenerationRequest => ({ promptIds: chat(q), maxTokens, sampling, n });

async function run(request: GenerationRequest) {
  const texts: string[] = Array.from({ length: request.n ?? 1 }, () => "");
  const reasons: string[] = [];
  const tokens: number[] = [];
  for await (const e of engine.submit(request)) {
    if (e.type === "delta") texts[e.choice] += e.text;
    else {
      reasons[e.choice] = e.reason;
      tokens[e.choice] = e.completionTokens;
    }
  }
  return { text: texts[0], texts, reasons, tokens };
}

beforeAll(async () => {
  runtime = await TextRuntime.load((await compiledArtifact()).dir, { threads: 2, slots: SLOTS });
  engine = new BatchEngine(workerStepBackend(runtime), { name: "smollm2", maxRunning: SLOTS });
});

afterAll(async () => {
  await engine?.close();
  await runtime?.close();
});

describe("batch engine on SmolLM2-135M", () => {
  it("gives a request the same greedy text alone and batched with three others", async () => {
    const requests = [
      ask("What is the capital city of France? Answer in one word.", 40),
      ask("Write a haiku about rain.", 48),
      ask("Here is a list: " + Array.from({ length: 60 }, (_, i) => `item ${i}`).join(", ") + ". What is the last item?", 24), // two prefill chunks
      ask("Explain recursion to a child.", 32),
    ];
    expect(requests[2].promptIds.length).toBeGreaterThan(256);
    const alone = await run(requests[0]);
    expect(alone.text).toMatch(/Paris/);
    const batched = await Promise.all(requests.map(run));
    expect(batched[0].text).toBe(alone.text);
    expect(batched[0].tokens).toEqual(alone.tokens);
    for (let i = 1; i < requests.length; i++) expect(batched[i].text).toBe((await run(requests[i])).text);
  });

  it("reproduces seeded sampling, alone or batched", async () => {
    const seeded = ask("Write one sentence about the sea.", 32, { temperature: 0.9, seed: 1234 });
    const first = await run(seeded);
    const again = await run(seeded);
    const [batched] = await Promise.all([run(seeded), run(ask("Tell me a joke.", 32, { temperature: 1, seed: 5 })), run(ask("Why is the sky blue?", 16))]);
    expect(again.text).toBe(first.text);
    expect(batched.text).toBe(first.text);
    const other = await run({ ...seeded, sampling: { temperature: 0.9, seed: 99 } });
    expect(other.text).not.toBe(first.text);
  });

  it("gives n = 3 three choices from one prefill; choice 0 is what n = 1 gives", async () => {
    const sharedBefore = engine.stats.snapshot().sharedPromptTokens;
    const request = ask("Give me a name for a pet turtle.", 24, { temperature: 1, seed: 3 }, 3);
    const three = await run(request);
    expect(three.texts).toHaveLength(3);
    expect(three.texts.every((t) => t.length > 0)).toBe(true);
    expect(new Set(three.texts).size).toBeGreaterThan(1);
    expect(engine.stats.snapshot().sharedPromptTokens - sharedBefore).toBe(2 * request.promptIds.length);
    expect(three.texts[0]).toBe((await run({ ...request, n: 1 })).text);
    const greedy = await run({ ...request, sampling: { temperature: 0 } });
    expect(new Set(greedy.texts).size).toBe(1);
  });

  it("reuses whole cached prompt chunks without changing the result", async () => {
    const fruits = Array.from({ length: 150 }, (_, i) => `fruit ${i}`).join(", ");
    const first = ask(`Here are fruits: ${fruits}. Which fruit comes first?`, 16);
    const second = ask(`Here are fruits: ${fruits}. Which fruit comes last?`, 16);
    expect(first.promptIds.length).toBeGreaterThan(512);
    // The reference: a fresh runtime that reuses nothing.
    const fresh = await TextRuntime.load((await compiledArtifact()).dir, { threads: 2, slots: 1 });
    const plain = new BatchEngine(workerStepBackend(fresh), { name: "plain", prefixReuse: "off" });
    let reference = "";
    for await (const e of plain.submit(second)) if (e.type === "delta") reference += e.text;
    await plain.close();
    await fresh.close();

    await run(first);
    const before = engine.stats.snapshot().prefix.hitTokens;
    expect((await run(second)).text).toBe(reference);
    let shared = 0;
    while (first.promptIds[shared] === second.promptIds[shared]) shared++;
    expect(engine.stats.snapshot().prefix.hitTokens - before).toBe(shared - (shared % 256)); // whole 256-token chunks
  });

  it("completes 16 concurrent generations, each as it would alone", async () => {
    const requests = CHAT_PROMPTS.slice(0, 16).map((q) => ask(q, 32));
    const alone: string[] = [];
    for (const r of requests) alone.push((await run(r)).text);
    let widest = 0;
    const stop = engine.stats.observe({ onStep: (s) => (widest = Math.max(widest, s.decodeRows)) });
    const batched = await Promise.all(requests.map(run));
    stop();
    expect(widest).toBe(16);
    for (let i = 0; i < requests.length; i++) {
      expect(batched[i].reasons[0]).toMatch(/^(stop|length)$/);
      expect(batched[i].text).toBe(alone[i]);
    }
    expect(engine.load).toEqual({ waiting: 0, running: 0 });
  });
});
