/**
 * The batch engine on the real model: batching must not change what a request gets beyond the
 * runtime's rounding. A request's prompt is always prefilled alone (one sequence per prefill
 * call), so its first token is exactly what it gets alone. Decode rows share model calls, and on
 * some CPUs onnxruntime's int8-activation kernels round a row differently depending on how many
 * rows share the call: its logits move by up to about one logit, and an int8 rounding flip
 * compounds over the 30 layers. So "as alone" is checked as llama.cpp parity is, by
 * log-probabilities: the batched tokens equal the solo run's until a near-tie, and there the
 * batched token is one of the solo run's close alternatives. A request read from the wrong slot,
 * a bad cache copy or a mixed-up sampler gives unrelated distributions and fails.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LoadedModel } from "../../../src/runtime/loaded-model.js";
import { serveLoadedModel, type BatchEngine, type EmittedTokenLogprob, type GenerationRequest, type SamplingParams, type ServedModel } from "../../../src/scheduler/index.js";
import { CHAT_PROMPTS, compiledArtifact } from "../../support/model.js";

const SLOTS = 16;
/** Nats: how far a log-probability may move under batching, and how close a near-tie is. */
const ROUNDING = 1.5;
let model: ServedModel;
let engine: BatchEngine;

const chat = (q: string) => model.chatPrompt([{ role: "user", content: q }]);
const ask = (q: string, maxTokens: number, sampling: SamplingParams = { temperature: 0 }, n = 1): GenerationRequest => ({
  promptIds: chat(q),
  maxTokens,
  sampling: { ...sampling, logprobs: true, top_logprobs: 5 },
  logprobs: { top: 5 },
  n,
});

async function run(request: GenerationRequest) {
  const texts: string[] = Array.from({ length: request.n ?? 1 }, () => "");
  const steps: EmittedTokenLogprob[][] = Array.from({ length: request.n ?? 1 }, () => []);
  const reasons: string[] = [];
  for await (const e of engine.submit(request)) {
    if (e.type === "delta") {
      texts[e.choice] += e.text;
      steps[e.choice].push(...(e.logprobs ?? []));
    } else reasons[e.choice] = e.reason;
  }
  return { text: texts[0], texts, steps: steps[0], allSteps: steps, reasons };
}

/** Why `batched` is not `alone` up to rounding, or null when it is. */
function beyondRounding(alone: EmittedTokenLogprob[], batched: EmittedTokenLogprob[]): string | null {
  let k = 0;
  for (; k < alone.length && k < batched.length && alone[k].token === batched[k].token; k++) {
    const moved = Math.abs(alone[k].logprob - batched[k].logprob);
    if (moved > ROUNDING) return `token ${k} (${JSON.stringify(alone[k].token)}): log-probability moved by ${moved.toFixed(2)} nats`;
  }
  if (k === alone.length && k === batched.length) return null;
  if (k === alone.length || k === batched.length) return null; // one ended (its end token carries no log-probability here): a divergence we cannot weigh
  const alt = alone[k].top.find((t) => t.token === batched[k].token);
  if (!alt) return `token ${k}: batched ${JSON.stringify(batched[k].token)} is not among the solo run's top 5`;
  if (alone[k].logprob - alt.logprob > ROUNDING) return `token ${k}: batched ${JSON.stringify(batched[k].token)} trails the solo choice by ${(alone[k].logprob - alt.logprob).toFixed(2)} nats`;
  return null;
}

beforeAll(async () => {
  model = serveLoadedModel(await LoadedModel.load((await compiledArtifact()).dir, { threads: 2, slots: SLOTS }));
  engine = model.engine;
});

afterAll(async () => {
  await model?.close();
});

describe("batch engine on SmolLM2-135M", () => {
  it("gives a request what it gets alone, up to rounding, when batched with three others", async () => {
    const requests = [
      ask("What is the capital city of France? Answer in one word.", 40),
      ask("Write a haiku about rain.", 48),
      ask("Here is a list: " + Array.from({ length: 60 }, (_, i) => `item ${i}`).join(", ") + ". What is the last item?", 24), // two prefill chunks
      ask("Explain recursion to a child.", 32),
    ];
    expect(requests[2].promptIds.length).toBeGreaterThan(256);
    const alone = [];
    for (const r of requests) alone.push(await run(r));
    expect(alone[0].text).toMatch(/Paris/);
    expect(beyondRounding(alone[1].steps, alone[3].steps)).not.toBeNull(); // the criterion tells requests apart
    const batched = await Promise.all(requests.map(run));
    for (let i = 0; i < requests.length; i++) {
      expect(batched[i].steps[0]).toEqual(alone[i].steps[0]); // prefilled alone: exactly the same first token
      expect(beyondRounding(alone[i].steps, batched[i].steps), `request ${i}`).toBeNull();
    }
  });

  it("reproduces seeded sampling exactly when run the same way", async () => {
    const seeded = ask("Write one sentence about the sea.", 32, { temperature: 0.9, seed: 1234 });
    const first = await run(seeded);
    expect((await run(seeded)).text).toBe(first.text);
    const other = await run({ ...seeded, sampling: { ...seeded.sampling, seed: 99 } });
    expect(other.text).not.toBe(first.text);
    // Beside others, its first token (sampled from its own prefill) is the same draw.
    const [batched] = await Promise.all([run(seeded), run(ask("Tell me a joke.", 32, { temperature: 1, seed: 5 })), run(ask("Why is the sky blue?", 16))]);
    expect(batched.steps[0]).toEqual(first.steps[0]);
  });

  it("gives n = 3 three choices from one prefill, each its own sampler stream", async () => {
    const sharedBefore = engine.stats.snapshot().sharedPromptTokens;
    const request = ask("Give me a name for a pet turtle.", 24, { temperature: 1, seed: 3 }, 3);
    const three = await run(request);
    expect(three.texts).toHaveLength(3);
    expect(three.texts.every((t) => t.length > 0)).toBe(true);
    expect(new Set(three.texts).size).toBeGreaterThan(1);
    expect(engine.stats.snapshot().sharedPromptTokens - sharedBefore).toBe(2 * request.promptIds.length);
    // Choice 0 draws from stream 0, as n = 1 does: the same first token from the same prefill logits.
    expect(three.allSteps[0][0]).toEqual((await run({ ...request, n: 1 })).steps[0]);
    const greedy = await run({ ...request, sampling: { temperature: 0, logprobs: true, top_logprobs: 5 } });
    expect(new Set(greedy.texts).size).toBe(1);
  });

  it("reuses whole cached prompt chunks without changing the result", async () => {
    const fruits = Array.from({ length: 150 }, (_, i) => `fruit ${i}`).join(", ");
    const first = ask(`Here are fruits: ${fruits}. Which fruit comes first?`, 16);
    const second = ask(`Here are fruits: ${fruits}. Which fruit comes last?`, 16);
    expect(first.promptIds.length).toBeGreaterThan(512);
    // The reference: a fresh model that reuses nothing.
    const plain = serveLoadedModel(await LoadedModel.load((await compiledArtifact()).dir, { threads: 2, slots: 1 }), { prefixReuse: "off" });
    let reference = "";
    for await (const e of plain.engine.submit(second)) if (e.type === "delta") reference += e.text;
    await plain.close();

    await run(first);
    const before = engine.stats.snapshot().prefix.hitTokens;
    expect((await run(second)).text).toBe(reference);
    let shared = 0;
    while (first.promptIds[shared] === second.promptIds[shared]) shared++;
    expect(engine.stats.snapshot().prefix.hitTokens - before).toBe(shared - (shared % 256)); // whole 256-token chunks
  });

  it("completes 16 concurrent generations, each as it would alone up to rounding", async () => {
    const requests = CHAT_PROMPTS.slice(0, 16).map((q) => ask(q, 32));
    const alone = [];
    for (const r of requests) alone.push(await run(r));
    let widest = 0;
    const stop = engine.stats.observe({ onStep: (s) => (widest = Math.max(widest, s.decodeRows)) });
    const batched = await Promise.all(requests.map(run));
    stop();
    expect(widest).toBe(16);
    for (let i = 0; i < requests.length; i++) {
      expect(batched[i].reasons[0]).toMatch(/^(stop|length)$/);
      expect(beyondRounding(alone[i].steps, batched[i].steps), `request ${i}`).toBeNull();
    }
    expect(engine.load).toEqual({ waiting: 0, running: 0 });
  });
});
