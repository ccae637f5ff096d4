/** The text runtime end to end on the real model: worker thread, KV cache, greedy and seeded sampling. */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generate, type FinishReason } from "../../../src/runtime/generate.js";
import { TextModel } from "../../../src/runtime/text-model.js";
import { TextRuntime } from "../../../src/runtime/text-runtime.js";
import type { SamplingParams } from "../../../src/runtime/sampling/index.js";
import { compiledArtifact } from "../../support/model.js";

async function collect(runtime: TextRuntime, prompt: number[], maxTokens: number, sampling: SamplingParams, prefillChunk?: number) {
  const tokens: number[] = [];
  const stream = generate(runtime.worker, prompt, { maxTokens, sampling, prefillChunk });
  let finish: FinishReason;
  for (;;) {
    const next = await stream.next();
    if (next.done) {
      finish = next.value;
      break;
    }
    tokens.push(next.value.token);
  }
  return { tokens, finish, text: runtime.tokenizer.decode(tokens) };
}

describe("text runtime on SmolLM2-135M", () => {
  let runtime: TextRuntime;
  let artifactDir: string;
  const chat = (q: string) => runtime.encodePrompt(runtime.renderChat([{ role: "user", content: q }]));

  beforeAll(async () => {
    artifactDir = (await compiledArtifact()).dir;
    runtime = await TextRuntime.load(artifactDir, { threads: 2 });
  });

  afterAll(async () => {
    await runtime?.close();
  });

  it("answers a question greedily on the worker thread", async () => {
    const out = await collect(runtime, chat("What is the capital city of France? Answer in one word."), 24, { temperature: 0 });
    expect(out.text).toContain("Paris");
  });

  it("gives the worker the same greedy tokens as the model run directly", async () => {
    const prompt = chat("Name three colours.");
    const viaWorker = await collect(runtime, prompt, 16, { temperature: 0 });
    const direct = await TextModel.load(artifactDir, { threads: 1 });
    let logits = await direct.forward(0, 1, prompt.length, prompt);
    const tokens: number[] = [];
    for (let i = 0; i < viaWorker.tokens.length; i++) {
      let best = 0;
      for (let j = 1; j < logits.length; j++) if (logits[j] > logits[best]) best = j;
      tokens.push(best);
      logits = await direct.forward(0, 1, 1, [best]);
    }
    await direct.release();
    expect(viaWorker.tokens).toEqual(tokens);
  });

  it("reproduces a sample with the same seed and varies with another", async () => {
    const prompt = chat("Write one sentence about the sea.");
    const a = await collect(runtime, prompt, 24, { temperature: 1, seed: 42 });
    const b = await collect(runtime, prompt, 24, { temperature: 1, seed: 42 });
    const c = await collect(runtime, prompt, 24, { temperature: 1, seed: 7 });
    expect(b.tokens).toEqual(a.tokens);
    expect(c.tokens).not.toEqual(a.tokens);
  });

  it("stops at max tokens with 'length' and at the end-of-turn token with 'stop'", async () => {
    const short = await collect(runtime, chat("Count from one to twenty."), 5, { temperature: 0 });
    expect(short.tokens).toHaveLength(5);
    expect(short.finish).toBe("length");
    const full = await collect(runtime, chat("Say hello."), 200, { temperature: 0 });
    expect(full.finish).toBe("stop");
    expect(full.tokens.length).toBeLessThan(200);
  });

  it("prefills in chunks across KV growth with the same result as one prefill", async () => {
    const long = chat("Here is a list: " + Array.from({ length: 60 }, (_, i) => `item ${i}`).join(", ") + ". What is the last item?");
    expect(long.length).toBeGreaterThan(300);
    const whole = await collect(runtime, long, 12, { temperature: 0 }, 1024);
    const chunked = await collect(runtime, long, 12, { temperature: 0 }, 100);
    expect(chunked.tokens).toEqual(whole.tokens);
  });

  it("refuses a prompt that does not fit the context", async () => {
    const tooLong = new Array(runtime.manifest.shape.contextLength).fill(28);
    await expect(collect(runtime, tooLong, 1, { temperature: 0 })).rejects.toThrow(/context/);
  });
});
