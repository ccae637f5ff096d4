// Claim: a sequence's open operation carries the request's whole prompt ids exactly when its
// sampling needs them (repetition_penalty on), even when most of the prompt is reused from the
// cache and never prefilled again, and never otherwise; each choice of n > 1 gets them.
import { describe, expect, it } from "vitest";
import type { OpenSlotOp, SlotOp } from "../../../../src/runtime/text-worker/protocol.js";
import { BatchEngine } from "../../../../src/scheduler/engine/batch-engine.js";
import type { GenerationRequest, GenerationStream } from "../../../../src/scheduler/types.js";
import { fakeStepRunner } from "./fake-step-runner.js";

const vocab = [..."abcdefghijklmnopqrstuvwxyz", "<eos>"];
const EOS = 26;
const prompt = (length: number, salt = 0) => Array.from({ length }, (_, i) => (i * 7 + salt) % 26);

function setup(slots = 1) {
  const fake = fakeStepRunner({ slots, vocab, stopTokenIds: [EOS] });
  const engine = new BatchEngine(fake, fake, { name: "m", contextLength: fake.contextLength, stopTokenIds: [EOS], prefillChunk: 8 });
  return { fake, engine };
}

async function drain(stream: GenerationStream): Promise<void> {
  for await (const _ of stream) void _;
}

const opens = (ops: SlotOp[]) => ops.filter((o): o is OpenSlotOp => o.op === "open");

describe("prompt ids in the open operation", () => {
  it("go along only with repetition_penalty on, whole even when the prefix is reused", async () => {
    const { fake, engine } = setup();
    const base = prompt(30, 3);
    const req = (sampling: GenerationRequest["sampling"], ids = base): GenerationRequest => ({ promptIds: ids, maxTokens: 3, sampling });
    await drain(engine.submit(req({})));
    await drain(engine.submit(req({ repetition_penalty: 1 })));
    await drain(engine.submit(req({ repetition_penalty: 1.3 })));
    const reused = [...base.slice(0, 25), 1, 2];
    await drain(engine.submit(req({ repetition_penalty: 0.8 }, reused)));
    const opened = fake.calls.flatMap((c) => opens(c.ops));
    expect(opened).toHaveLength(4);
    expect(opened[0].promptIds).toBeUndefined();
    expect(opened[1].promptIds).toBeUndefined();
    expect(opened[2].promptIds).toEqual(Int32Array.from(base));
    // 24 positions came from the cache, yet the sampler gets every prompt id.
    expect(opened[3].keepCached).toBe(24);
    expect(opened[3].promptIds).toEqual(Int32Array.from(reused));
  });

  it("each choice of an n > 1 request gets them", async () => {
    const { fake, engine } = setup(3);
    const ids = prompt(12, 5);
    await drain(engine.submit({ promptIds: ids, maxTokens: 2, n: 3, sampling: { repetition_penalty: 1.2, seed: 1 } }));
    const opened = fake.calls.flatMap((c) => opens(c.ops));
    expect(opened).toHaveLength(3);
    for (const op of opened) expect(op.promptIds).toEqual(Int32Array.from(ids));
  });
});
