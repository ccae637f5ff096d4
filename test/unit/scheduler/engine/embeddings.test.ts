// Claim: a request with `embed` computes its prompt and pools its final hidden states into one
// EmbeddingEvent before its finish, generating nothing: "mean" averages every position (each chunk
// pooled, never a cached prefix, whose positions would be missing), "last" takes the prompt's last
// position (a cached prefix is fine: the last position is always computed); several inputs share
// steps, one chunk a step while other sequences decode; a request that also asks for tokens or
// choices is refused.
import { describe, expect, it } from "vitest";
import { BatchEngine } from "../../../../src/scheduler/engine/batch-engine.js";
import type { EmbeddingEvent, GenerationEvent, GenerationRequest, GenerationStream, Pooling } from "../../../../src/scheduler/types.js";
import { FAKE_HIDDEN_WIDTH, fakeHidden, fakeStepRunner } from "./fake-step-runner.js";

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

const embedding = (ids: number[], pooling: Pooling, over: Partial<GenerationRequest> = {}): GenerationRequest => ({
  promptIds: ids,
  maxTokens: 0,
  sampling: {},
  embed: { pooling },
  ...over,
});

/** What the fake's hidden states pool to over a whole prompt. */
function expected(ids: number[], pooling: Pooling): number[] {
  const states = ids.map((t, p) => fakeHidden(t, p));
  if (pooling === "last") return [...states.at(-1)!];
  return Array.from({ length: FAKE_HIDDEN_WIDTH }, (_, i) => states.reduce((s, v) => s + v[i], 0) / ids.length);
}

describe("embeddings in the engine", () => {
  it("pools the mean over every chunk of a long prompt, and generates nothing", async () => {
    const { fake, engine } = setup();
    const ids = prompt(20, 1);
    const got = await events(engine.submit(embedding(ids, "mean")));
    expect(got.map((e) => e.type)).toEqual(["embedding", "finish"]);
    expect([...(got[0] as EmbeddingEvent).embedding]).toEqual(expected(ids, "mean").map(Math.fround));
    expect(got[1]).toMatchObject({ reason: "length", completionTokens: 0 });
    expect(fake.calls.map((c) => [c.tokensPerRow, c.embed?.pooling])).toEqual([
      [8, "mean"],
      [8, "mean"],
      [4, "mean"],
    ]);
    expect(fake.computed).toBe(0);
  });

  it("takes the last position's state, pooled by the prompt's last chunk only", async () => {
    const { fake, engine } = setup();
    const ids = prompt(20, 2);
    const got = await events(engine.submit(embedding(ids, "last")));
    expect([...(got[0] as EmbeddingEvent).embedding]).toEqual(expected(ids, "last"));
    expect(fake.calls.map((c) => c.embed?.pooling ?? null)).toEqual([null, null, "last"]);
  });

  it("computes a mean's whole prompt again, where the last position needs only what is not cached", async () => {
    const { fake, engine } = setup(1);
    const ids = prompt(20, 3);
    await events(engine.submit({ promptIds: ids, maxTokens: 1, sampling: {} }));
    const prefillTokens = () => fake.calls.filter((c) => c.kind === "prefill").reduce((n, c) => n + c.tokensPerRow, 0);
    fake.calls.length = 0;
    const mean = await events(engine.submit(embedding(ids, "mean")));
    expect(prefillTokens()).toBe(20);
    expect([...(mean[0] as EmbeddingEvent).embedding]).toEqual(expected(ids, "mean").map(Math.fround));
    fake.calls.length = 0;
    const last = await events(engine.submit(embedding(ids, "last")));
    expect(prefillTokens()).toBe(4); // 16 reused
    expect([...(last[0] as EmbeddingEvent).embedding]).toEqual(expected(ids, "last"));
  });

  it("runs several inputs in the same steps, each with its own vector", async () => {
    const { engine } = setup(2);
    const [a, b] = [prompt(6, 4), prompt(7, 5)];
    const [ea, eb] = await Promise.all([events(engine.submit(embedding(a, "mean"))), events(engine.submit(embedding(b, "mean")))]);
    expect(engine.stats.snapshot().steps).toBe(1);
    expect([...(ea[0] as EmbeddingEvent).embedding]).toEqual(expected(a, "mean").map(Math.fround));
    expect([...(eb[0] as EmbeddingEvent).embedding]).toEqual(expected(b, "mean").map(Math.fround));
  });

  it("yields to decoding: while a sequence decodes, one embedding chunk a step", async () => {
    const { fake, engine } = setup(4);
    const chat = engine.submit({ promptIds: prompt(3, 6), maxTokens: 12, sampling: {} })[Symbol.asyncIterator]();
    await chat.next(); // decoding from here on
    const inputs = Promise.all([7, 8, 9].map((salt) => events(engine.submit(embedding(prompt(5, salt), "last")))));
    while (!(await chat.next()).done);
    await inputs;
    const kinds = fake.calls.map((c) => (c.embed ? "embed" : c.kind)).join(" ");
    expect(kinds).not.toMatch(/embed embed/);
    expect(kinds.match(/embed/g)).toHaveLength(3);
    // Without decoding, they share one step.
    fake.calls.length = 0;
    await Promise.all([1, 2, 3].map((salt) => events(engine.submit(embedding(prompt(5, salt), "last")))));
    expect(fake.calls.map((c) => c.kind)).toEqual(["prefill", "prefill", "prefill"]);
  });

  it("refuses an embedding that asks for new tokens or several choices", () => {
    const { engine } = setup();
    expect(() => engine.submit(embedding(prompt(3), "last", { maxTokens: 1 }))).toThrow(/no new tokens and one choice/);
    expect(() => engine.submit(embedding(prompt(3), "last", { n: 2 }))).toThrow(/no new tokens and one choice/);
  });

  it("fails the request when the worker answers a pooling call without its vector", async () => {
    const { fake, engine } = setup();
    const step = fake.step.bind(fake);
    fake.step = async (call) => {
      const result = await step(call);
      delete result.pooled;
      return result;
    };
    await expect(events(engine.submit(embedding(prompt(5), "last")))).rejects.toThrow(/no pooled hidden states/);
  });
});
