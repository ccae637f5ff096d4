/**
 * kiln's compiled SmolLM2 against llama.cpp (node-llama-cpp) on the same GGUF file.
 *
 * Oracle settings: llama.cpp on the CPU, 2 threads, flash attention off (its non-flash path has the
 * rounding points kiln's "llama.cpp" numerics reproduce: Q8_1/Q8_0 activation blocks with fp16
 * scales, fp16 KV cache, fp16 query and attention probabilities).
 *
 * Why agreement is measured teacher-forced: this model's activations have large outliers, so a
 * difference in float summation order flips an int8 activation rounding and the flip grows over
 * 30 layers. llama.cpp against itself (flash attention on vs off, the same model and prompts) agrees
 * token for token over 64 greedy tokens on only 4 to 6 of these 20 prompts, and how many depends on
 * the CPU, so free-running greedy agreement is not measured. What is required is that at every step
 * along llama.cpp's own greedy path kiln predicts llama.cpp's token, except at near-ties, that the
 * first-step top-5 sets agree, and that kiln's first-step log-probabilities are as close to
 * llama.cpp's as llama.cpp's flash-attention path is.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { getLlama, type Llama, type LlamaModel } from "node-llama-cpp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ARTIFACT_FILES, readTokenizerSpec } from "../../../src/runtime/artifact/index.js";
import { TextSession } from "../../../src/runtime/text-worker/session.js";
import { ChatTemplate, Tokenizer } from "../../../src/runtime/text/index.js";
import { CHAT_PROMPTS, compiledArtifact, textGgufPath } from "../../support/model.js";

const STEPS = 64;
/** A step where llama.cpp's own top-2 log-probabilities are closer than this is a near-tie. */
const NEAR_TIE = 0.5;

interface Reference {
  prompt: number[];
  tokens: number[];
  /** llama.cpp's log-probability gap between its first and second choice at each step. */
  margins: number[];
  firstTop: Array<[number, number]>;
}

interface Agreement {
  top5SetsEqual: number;
  maxLogitDiff: number;
  forcedSteps: number;
  forcedAgree: number;
  forcedDisagreeOutsideTies: number;
}

const argmax = (a: Float32Array) => {
  let best = 0;
  for (let i = 1; i < a.length; i++) if (a[i] > a[best]) best = i;
  return best;
};

function logSoftmax(a: Float32Array): Float32Array {
  let max = -Infinity;
  for (const v of a) max = Math.max(max, v);
  let sum = 0;
  for (const v of a) sum += Math.exp(v - max);
  const lse = Math.log(sum) + max;
  return Float32Array.from(a, (v) => v - lse);
}

function topIds(a: Float32Array, n: number): number[] {
  return [...a.keys()].sort((x, y) => a[y] - a[x]).slice(0, n);
}

async function llamaReference(model: LlamaModel, prompts: number[][]): Promise<Reference[]> {
  const context = await model.createContext({ contextSize: 1024, threads: 2, flashAttention: false });
  const refs: Reference[] = [];
  const sequence = context.getSequence();
  for (const prompt of prompts) {
    await sequence.clearHistory();
    const ref: Reference = { prompt, tokens: [], margins: [], firstTop: [] };
    for await (const out of sequence.evaluateWithMetadata(prompt as never, { probabilities: true }, { temperature: 0 })) {
      const probs = [...out.probabilities.entries()];
      if (ref.tokens.length === 0) ref.firstTop = probs.slice(0, 5).map(([t, p]) => [Number(t), Math.log(p)]);
      if (model.isEogToken(out.token)) break;
      ref.tokens.push(Number(out.token));
      ref.margins.push(Math.log(probs[0][1]) - Math.log(probs[1][1]));
      if (ref.tokens.length >= STEPS) break;
    }
    refs.push(ref);
  }
  await context.dispose();
  return refs;
}

/**
 * llama.cpp against its own reference: flash attention on, the reference path evaluated teacher-forced
 * in one batch. This is the noise floor: two llama.cpp computations of the same model.
 */
async function llamaSelfAgreement(model: LlamaModel, refs: Reference[]): Promise<Agreement> {
  const context = await model.createContext({ contextSize: 1024, threads: 2, flashAttention: true });
  const sequence = context.getSequence();
  const result: Agreement = { top5SetsEqual: 0, maxLogitDiff: 0, forcedSteps: 0, forcedAgree: 0, forcedDisagreeOutsideTies: 0 };
  for (const ref of refs) {
    await sequence.clearHistory();
    const path = [...ref.prompt, ...ref.tokens];
    const input = path.map((t, i) => (i >= ref.prompt.length - 1 && i < path.length - 1 ? ([t, { generateNext: { probabilities: true } }] as const) : t));
    const outputs = await sequence.controlledEvaluate(input as never);
    for (let j = 0; j < ref.tokens.length; j++) {
      const probs = [...outputs[ref.prompt.length - 1 + j]!.next.probabilities!.entries()];
      if (j === 0) {
        const top = new Set(probs.slice(0, 5).map(([t]) => Number(t)));
        if (ref.firstTop.every(([t]) => top.has(t))) result.top5SetsEqual++;
        const byToken = new Map(probs.map(([t, p]) => [Number(t), Math.log(p)]));
        for (const [t, logp] of ref.firstTop) result.maxLogitDiff = Math.max(result.maxLogitDiff, Math.abs((byToken.get(t) ?? -Infinity) - logp));
      }
      const agree = Number(probs[0][0]) === ref.tokens[j];
      result.forcedSteps++;
      if (agree) result.forcedAgree++;
      else if (ref.margins[j] >= NEAR_TIE) result.forcedDisagreeOutsideTies++;
    }
  }
  await context.dispose();
  return result;
}

async function measure(kiln: TextSession, refs: Reference[]): Promise<Agreement> {
  const result: Agreement = { top5SetsEqual: 0, maxLogitDiff: 0, forcedSteps: 0, forcedAgree: 0, forcedDisagreeOutsideTies: 0 };
  for (const ref of refs) {
    kiln.kv.truncate(0, 0);
    let logits = await kiln.forward(0, 1, ref.prompt.length, ref.prompt);
    const lp = logSoftmax(logits);
    const kilnTop = new Set(topIds(logits, 5));
    if (ref.firstTop.every(([t]) => kilnTop.has(t))) result.top5SetsEqual++;
    for (const [t, logp] of ref.firstTop) result.maxLogitDiff = Math.max(result.maxLogitDiff, Math.abs(lp[t] - logp));
    for (let j = 0; j < ref.tokens.length; j++) {
      const agree = argmax(logits) === ref.tokens[j];
      result.forcedSteps++;
      if (agree) result.forcedAgree++;
      else if (ref.margins[j] >= NEAR_TIE) result.forcedDisagreeOutsideTies++;
      logits = await kiln.forward(0, 1, 1, [ref.tokens[j]]);
    }
  }
  return result;
}

describe("compiled SmolLM2 vs llama.cpp on the same GGUF", () => {
  let llama: Llama;
  let model: LlamaModel;
  let refs: Reference[];
  const results: Record<string, Agreement> = {};

  beforeAll(async () => {
    const artifact = await compiledArtifact({ numerics: "llama.cpp" });
    const tokenizer = Tokenizer.fromSpec(readTokenizerSpec(artifact.dir));
    const template = new ChatTemplate(readFileSync(join(artifact.dir, ARTIFACT_FILES.chatTemplate), "utf8"));
    const prompts = CHAT_PROMPTS.map((p) =>
      tokenizer.encode(template.render([{ role: "user", content: p }], { addGenerationPrompt: true }), { parseSpecial: true }),
    );
    llama = await getLlama({ gpu: false });
    model = await llama.loadModel({ modelPath: await textGgufPath() });
    refs = await llamaReference(model, prompts);
    results["llama.cpp flash attention"] = await llamaSelfAgreement(model, refs);
    for (const numerics of ["llama.cpp", "fast"] as const) {
      const compiled = await compiledArtifact({ numerics });
      const kiln = await TextSession.load(compiled.dir, { threads: 2 });
      results[numerics] = await measure(kiln, refs);
      await kiln.release();
    }
    console.log("agreement with llama.cpp over 20 chat prompts:\n" + JSON.stringify(results, null, 1));
    // Two compiles from scratch and 20 × 64 llama.cpp steps: 5-11 minutes on a busy 2-core machine.
  }, 1_800_000);

  afterAll(async () => {
    await model?.dispose();
    await llama?.dispose();
  });

  it("predicts llama.cpp's next token along its greedy path, missing only near-ties", () => {
    const r = results["llama.cpp"];
    expect(r.forcedSteps).toBeGreaterThan(800);
    expect(r.forcedAgree / r.forcedSteps).toBeGreaterThanOrEqual(0.93);
    expect(r.forcedDisagreeOutsideTies).toBeLessThanOrEqual(2);
  });

  it("agrees with llama.cpp at least as well as llama.cpp's own flash-attention path does", () => {
    const kiln = results["llama.cpp"];
    const self = results["llama.cpp flash attention"];
    expect(kiln.top5SetsEqual).toBeGreaterThanOrEqual(self.top5SetsEqual - 2);
    expect(kiln.maxLogitDiff).toBeLessThanOrEqual(Math.max(0.5, 1.5 * self.maxLogitDiff));
    expect(kiln.forcedAgree / kiln.forcedSteps).toBeGreaterThanOrEqual(self.forcedAgree / self.forcedSteps - 0.02);
  });

  it("keeps the fast artifact close to llama.cpp too", () => {
    const r = results.fast;
    expect(r.forcedAgree / r.forcedSteps).toBeGreaterThanOrEqual(0.9);
    expect(r.maxLogitDiff).toBeLessThan(1.5);
  });
});
