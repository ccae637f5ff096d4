/**
 * A served model end to end on the real SmolLM2-135M: the worker thread, its KV pool and samplers
 * behind the batch engine (the path `kiln serve` and `kiln run` take), checked against the model
 * session run directly on this thread.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LoadedModel } from "../../../src/runtime/loaded-model.js";
import { ModelSession } from "../../../src/runtime/worker/model-session.js";
import { serveLoadedModel, type GenerationRequest, type SamplingParams, type ServedModel } from "../../../src/scheduler/index.js";
import { compiledArtifact } from "../../support/model.js";

let artifactDir: string;
let model: ServedModel;
const chat = (q: string) => model.chatPrompt([{ role: "user", content: q }]);

async function collect(served: ServedModel, request: GenerationRequest) {
  let text = "";
  let reason = "";
  let tokens = 0;
  for await (const e of served.engine.submit(request)) {
    if (e.type === "delta") text += e.text;
    else [reason, tokens] = [e.reason, e.completionTokens];
  }
  return { text, reason, tokens };
}
const ask = (promptIds: number[], maxTokens: number, sampling: SamplingParams = { temperature: 0 }): GenerationRequest => ({ promptIds, maxTokens, sampling });

beforeAll(async () => {
  artifactDir = (await compiledArtifact()).dir;
  model = serveLoadedModel(await LoadedModel.load(artifactDir, { threads: 2, slots: 1 }));
});

afterAll(async () => {
  await model?.close();
});

describe("a served SmolLM2-135M", () => {
  it("answers greedily with the tokens the model session gives run directly", async () => {
    const prompt = chat("What is the capital city of France? Answer in one word.");
    const served = await collect(model, ask(prompt, 12));
    expect(served.text).toContain("Paris");

    const direct = await ModelSession.load(artifactDir, { threads: 1 });
    let logits = await direct.forward(0, 1, prompt.length, prompt);
    const greedy: number[] = [];
    for (let i = 0; i < served.tokens; i++) {
      let best = 0;
      for (let j = 1; j < logits.length; j++) if (logits[j] > logits[best]) best = j;
      greedy.push(best);
      logits = await direct.forward(0, 1, 1, [best]);
    }
    await direct.release();
    expect(model.decode(greedy)).toBe(served.text);
  });

  it("stops at max tokens with 'length' and at the end-of-turn token with 'stop'", async () => {
    const short = await collect(model, ask(chat("Count from one to twenty."), 5));
    expect(short).toMatchObject({ reason: "length", tokens: 5 });
    const full = await collect(model, ask(chat("Say hello."), 200));
    expect(full.reason).toBe("stop");
    expect(full.tokens).toBeLessThan(200);
  });

  it("prefills in chunks across KV growth with the same result as one prefill", async () => {
    const long = chat("Here is a list: " + Array.from({ length: 60 }, (_, i) => `item ${i}`).join(", ") + ". What is the last item?");
    expect(long.length).toBeGreaterThan(300);
    const whole = await collect(model, ask(long, 12));
    const chunked = serveLoadedModel(await LoadedModel.load(artifactDir, { threads: 2, slots: 1 }), { prefillChunk: 100, stepTokens: 101 });
    try {
      expect((await collect(chunked, ask(long, 12))).text).toBe(whole.text);
      expect(chunked.engine.stats.snapshot().prefillTokens.count).toBeGreaterThanOrEqual(4); // 100-token calls, one per step
    } finally {
      await chunked.close();
    }
  });

  it("refuses a prompt that does not fit the context", () => {
    expect(() => model.engine.submit(ask(new Array(model.contextLength).fill(28), 1))).toThrow(/context/);
  });
});
