/**
 * The batch engine on the real model: batching must not change what a request gets beyond the
 * runtime's rounding (see test/support/rounding.ts for why "as alone" is checked by
 * log-probabilities and not by exact text), n choices share one prefill, prefix reuse changes
 * nothing, and sixteen concurrent generations each match their solo run.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LoadedModel } from "../../../src/runtime/loaded-model.js";
import {
  serveLoadedModel,
  type BatchEngine,
  type EmittedTokenLogprob,
  type GenerationRequest,
  type SamplingParams,
  type ServedModel,
} from "../../../src/scheduler/index.js";
import { CHAT_PROMPTS, compiledArtifact } from "../../support/model.js";
import { beyondRounding } from "../../support/rounding.js";

const SLOTS = 16;
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
    } else if (e.type === "finish") reasons[e.choice] = e.reason;
  }
  return { text: texts[0], texts, steps: steps[0], allSteps: steps, reasons };
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
