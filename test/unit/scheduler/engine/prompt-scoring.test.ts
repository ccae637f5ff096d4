// Claim: a request that scores its prompt gets every prompt token's log probability from its own
// prefill chunks (each chunk asks the worker for the positions whose next token it knows), in one
// event per choice before anything else; it never reuses a cached prefix; maxTokens 0 computes the
// prompt and generates nothing; and scored prompts of several requests share the engine's steps.
import { describe, expect, it } from "vitest";
import { BatchEngine } from "../../../../src/scheduler/engine/batch-engine.js";
import type { GenerationEvent, GenerationRequest, GenerationStream, PromptEvent } from "../../../../src/scheduler/types.js";
import { fakePromptLogprob, fakeStepRunner } from "./fake-step-runner.js";

const vocab = [..."abcdefghijklmnopqrstuvwxyz", "<eos>"];
const EOS = 26;
const prompt = (length: number, salt = 0) => Array.from({ length }, (_, i) => (i * 7 + salt) % 26);

function setup(slots = 2) {
  const fake = fakeStepRunner({ slots, vocab, stopTokenIds: [EOS] });
  const engine = new BatchEngine(fake, fake, { name: "m", contextLength: fake.contextLength, stopTokenIds: [EOS], prefillChunk: 8 });
  return { fake, engine };
}

async function events(stream: GenerationStream): Promise<GenerationEvent[]> {
  const out: GenerationEvent[] = [];
  for await (const e of stream) out.push(e);
  return out;
}

const scored = (ids: number[], over: Partial<GenerationRequest> = {}): GenerationRequest => ({
  promptIds: ids,
  maxTokens: 2,
  sampling: { temperature: 0 },
  promptLogprobs: { top: 2 },
  ...over,
});

describe("prompt scoring in the engine", () => {
  it("scores every prompt token from the prefill chunks, the first with null, before the first delta", async () => {
    const { fake, engine } = setup();
    const ids = prompt(20, 1);
    const got = await events(engine.submit(scored(ids)));
    expect(got.map((e) => e.type)).toEqual(["prompt", "delta", "delta", "finish"]);
    const { logprobs } = got[0] as PromptEvent;
    expect(logprobs.map((e) => e.token)).toEqual(ids.map((i) => vocab[i]));
    expect(logprobs[0]).toMatchObject({ logprob: null, top: null });
    expect(logprobs.slice(1).map((e) => e.logprob)).toEqual(ids.slice(1).map(fakePromptLogprob));
    expect(logprobs[1].top!.map((t) => t.token)).toEqual([vocab[ids[1]], vocab[ids[1] + 1]]);
    // Chunks of 8, 8 and 4: each knows the token after its last position, but the prompt's end.
    const chunks = fake.calls.filter((c) => c.score);
    expect(chunks.map((c) => [c.tokensPerRow, c.score!.next])).toEqual([
      [8, ids[8]],
      [8, ids[16]],
      [4, -1],
    ]);
  });

  it("computes the whole prompt again rather than reuse a cached prefix", async () => {
    const { fake, engine } = setup(1);
    const ids = prompt(20, 2);
    await events(engine.submit({ promptIds: ids, maxTokens: 1, sampling: {} }));
    fake.calls.length = 0;
    await events(engine.submit(scored(ids)));
    expect(fake.calls.filter((c) => c.kind === "prefill").reduce((n, c) => n + c.tokensPerRow, 0)).toBe(20);
    expect(engine.stats.snapshot().prefix.hitTokens).toBe(0);
    fake.calls.length = 0;
    await events(engine.submit({ promptIds: ids, maxTokens: 1, sampling: {} }));
    expect(fake.calls.filter((c) => c.kind === "prefill").reduce((n, c) => n + c.tokensPerRow, 0)).toBe(4); // unscored: 16 reused
  });

  it("with maxTokens 0, computes and scores the prompt, samples nothing and finishes with length", async () => {
    const { fake, engine } = setup();
    const got = await events(engine.submit(scored(prompt(5), { maxTokens: 0, n: 2 })));
    expect(got.map((e) => `${e.type}${e.choice}`).sort()).toEqual(["finish0", "finish1", "prompt0", "prompt1"]);
    for (const e of got) if (e.type === "finish") expect(e).toMatchObject({ reason: "length", completionTokens: 0 });
    expect(fake.computed).toBe(0);
    expect(fake.calls.every((c) => c.forks === 0)).toBe(true);
    expect(fake.calls.filter((c) => c.score)).toHaveLength(1); // choice 1 shares choice 0's prefill
  });

  it("runs the scored prompts of requests submitted together in the same steps", async () => {
    const { fake, engine } = setup(2);
    const [a, b] = [prompt(6, 3), prompt(7, 4)];
    const [ea, eb] = await Promise.all([events(engine.submit(scored(a, { maxTokens: 0 }))), events(engine.submit(scored(b, { maxTokens: 0 })))]);
    expect(fake.calls.map((c) => c.score !== undefined)).toEqual([true, true]);
    expect(engine.stats.snapshot().steps).toBe(1);
    expect((ea[0] as PromptEvent).logprobs).toHaveLength(6);
    expect((eb[0] as PromptEvent).logprobs).toHaveLength(7);
  });
});
