/**
 * A served model end to end on the real SmolLM2-135M: the worker thread, its KV pool and samplers
 * behind the batch engine (the path `kiln serve` and `kiln run` take), checked against the model
 * session run directly on this thread.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LoadedModel } from "../../../src/runtime/loaded-model.js";
import { TextSession } from "../../../src/runtime/text-worker/session.js";
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
    else if (e.type === "finish") [reason, tokens] = [e.reason, e.completionTokens];
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
  it("answers greedily with the tokens the text session gives run directly", async () => {
    const prompt = chat("What is the capital city of France? Answer in one word.");
    const served = await collect(model, ask(prompt, 12));
    expect(served.text).toContain("Paris");

    const direct = await TextSession.load(artifactDir, { threads: 1 });
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

  it("repetition_penalty counts the prompt's tokens: greedy equals the text session run directly with the penalty", async () => {
    const prompt = chat("Repeat exactly: the cat sat on the mat, the cat sat on the mat.");
    const p = 1.6;
    const served = await collect(model, ask(prompt, 16, { temperature: 0, repetition_penalty: p }));
    const direct = await TextSession.load(artifactDir, { threads: 1 });
    const seen = new Set(prompt);
    let logits = await direct.forward(0, 1, prompt.length, prompt);
    const greedy: number[] = [];
    for (let i = 0; i < served.tokens; i++) {
      const row = Float32Array.from(logits);
      for (const id of seen) row[id] = row[id] > 0 ? row[id] / p : row[id] * p;
      let best = 0;
      for (let j = 1; j < row.length; j++) if (row[j] > row[best]) best = j;
      greedy.push(best);
      seen.add(best);
      logits = await direct.forward(0, 1, 1, [best]);
    }
    await direct.release();
    expect(served.tokens).toBeGreaterThan(0);
    expect(model.decode(greedy)).toBe(served.text);
    expect(served.text).not.toBe((await collect(model, ask(prompt, 16))).text);
  });

  it("a structural tag through the worker: free text until the trigger, then only valid calls", async () => {
    const begin = '<tool_call>\n{"name": "get_weather", "arguments": ';
    const end = "}\n</tool_call>";
    const schema = { type: "object", properties: { city: { type: "string", maxLength: 20 } }, required: ["city"], additionalProperties: false };
    const tag = { type: "tag", begin, content: { type: "json_schema", json_schema: schema }, end };
    const argsOf = (text: string) =>
      text
        .split(begin)
        .slice(1)
        .filter((part) => part.includes(end))
        .map((part) => JSON.parse(part.slice(0, part.indexOf(end))) as { city: unknown });
    const promptIds = chat("What is the weather in Paris? Call get_weather by writing <tool_call> and the call.");
    const auto = { type: "structural_tag" as const, format: JSON.stringify({ type: "triggered_tags", triggers: ["<tool_call>"], tags: [tag] }) };
    for (let seed = 1; seed <= 3; seed++) {
      const { text } = await collect(model, { promptIds, maxTokens: 48, sampling: { temperature: 1, seed }, constraint: auto });
      for (const args of argsOf(text)) expect(Object.keys(args)).toEqual(["city"]);
    }
    const forced = {
      type: "structural_tag" as const,
      format: JSON.stringify({ type: "tags_with_separator", tags: [tag], separator: "\n", at_least_one: true }),
    };
    const { text } = await collect(model, { promptIds, maxTokens: 80, sampling: { temperature: 0 }, constraint: forced });
    expect(text.startsWith(begin)).toBe(true);
    expect(typeof argsOf(text)[0].city).toBe("string");
  });

  it("refuses a prompt that does not fit the context", () => {
    expect(() => model.engine.submit(ask(new Array(model.contextLength).fill(28), 1))).toThrow(/context/);
  });
});
