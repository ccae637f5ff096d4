// Claim: repetition_penalty works as in HF transformers and vLLM (each distinct token of the prompt
// or the output: logit > 0 ? logit / p : logit * p), after logit_bias and before presence/frequency
// penalties, is off by default, leaves logprobs raw and the row untouched, and is validated.
import { describe, expect, it } from "vitest";
import { resolveSamplingParams, usesPromptIds, validateSamplingParams } from "../../../../src/runtime/sampling/params.js";
import { SequenceSampler } from "../../../../src/runtime/sampling/sampler.js";
import { chiBound, chiSquare, logSoftmax, randomLogits, softmax } from "./helpers.js";

const greedy = (p: number | undefined, promptIds?: number[], extra = {}) =>
  new SequenceSampler({ temperature: 0, repetition_penalty: p, ...extra }, { promptIds });
const row = (...xs: number[]) => Float32Array.from(xs);

describe("repetition_penalty", () => {
  it("is off by default, at 1 and at null, whatever prompt ids are given", () => {
    for (const p of [undefined, 1]) expect(greedy(p, [0]).sample(row(2, 1.9)).token).toBe(0);
    expect(new SequenceSampler({ temperature: 0, repetition_penalty: null }, { promptIds: [0] }).sample(row(2, 1.9)).token).toBe(0);
    expect(resolveSamplingParams({}).repetitionPenalty).toBe(1);
  });

  it("divides positive logits and multiplies negative ones", () => {
    expect(greedy(2, [0]).sample(row(2, 1.2)).token).toBe(1); // 2 / 2 = 1 < 1.2
    expect(greedy(2, [0]).sample(row(2, 0.9)).token).toBe(0); // 1 > 0.9
    expect(greedy(2, [0]).sample(row(-1, -1.5)).token).toBe(1); // -1 * 2 = -2 < -1.5
    expect(greedy(0.5, [0]).sample(row(1, 1.5)).token).toBe(0); // below 1 favours repeats: 1 / 0.5 = 2
    expect(greedy(0.5, [0]).sample(row(-1, -0.6)).token).toBe(0); // -1 * 0.5 = -0.5 > -0.6
  });

  it("counts each prompt token once, however often it appears", () => {
    // Once: 2 / 2 = 1 > 0.9; three times would give 0.25.
    expect(greedy(2, [0, 0, 0]).sample(row(2, 0.9)).token).toBe(0);
    expect(greedy(2, [5, 0, 7, 0]).sample(row(2, 0.9)).token).toBe(0);
  });

  it("adds generated tokens to the penalized set, once each", () => {
    const s = greedy(2);
    const r = row(2, 0.9, 0.8);
    // The first pick is unpenalized; afterwards token 0 sits at 1, still above 0.9, however often it repeats.
    expect([0, 1, 2, 3, 4].map(() => s.sample(r).token)).toEqual([0, 0, 0, 0, 0]);
    const t = greedy(2);
    // Without a prompt, only what was generated counts.
    t.accept(1);
    expect(t.sample(row(1, 1.5)).token).toBe(0); // 1.5 / 2 = 0.75 < 1
  });

  it("comes after logit_bias and before presence and frequency penalties", () => {
    // Bias first: 1 - 2 = -1, then * 2 = -2 < -1.8. (Penalty first would give 0.5 - 2 = -1.5 > -1.8.)
    expect(greedy(2, [0], { logit_bias: { "0": -2 } }).sample(row(1, -1.8)).token).toBe(1);
    // Repetition first: 3 / 2 - 0.4 = 1.1 < 1.2. (Presence first would give (3 - 0.4) / 2 = 1.3.)
    const s = greedy(2, undefined, { presence_penalty: 0.4 });
    s.accept(0);
    expect(s.sample(row(3, 1.2)).token).toBe(1);
  });

  it("draws from the penalized distribution", () => {
    const raw = randomLogits(40, 5, 1.5);
    const prompt = [3, 3, 8, 12, 30];
    const generated = [8, 20, 20];
    const p = 1.7;
    const seen = new Set([...prompt, ...generated]);
    const expected = softmax(Array.from(raw, (x, i) => (seen.has(i) ? Math.fround(x > 0 ? x / p : x * p) : x)));
    const counts = new Array<number>(raw.length).fill(0);
    for (let i = 0; i < 40_000; i++) {
      const s = new SequenceSampler({ repetition_penalty: p, seed: i }, { promptIds: prompt });
      for (const t of generated) s.accept(t);
      counts[s.sample(raw).token]++;
    }
    const { chi2, dof, impossible } = chiSquare(counts, expected);
    expect(impossible).toBe(0);
    expect(chi2).toBeLessThan(chiBound(dof));
  });

  it("keeps logprobs raw and leaves the row as it was", () => {
    const raw = randomLogits(500, 9);
    const copy = raw.slice();
    const reference = logSoftmax(raw);
    const prompt = Array.from({ length: 200 }, (_, i) => (i * 7) % 500);
    const s = new SequenceSampler(
      { repetition_penalty: 1.9, logit_bias: { "7": 3, "14": -3 }, presence_penalty: 1, frequency_penalty: 0.5, logprobs: true, seed: 2 },
      { promptIds: prompt },
    );
    for (let i = 0; i < 30; i++) {
      const r = s.sample(raw);
      expect(r.logprob).toBeCloseTo(reference[r.token], 6);
      expect(raw).toEqual(copy);
    }
  });

  it("is validated: above 0, at most 2, a number", () => {
    for (const ok of [0.01, 1, 1.3, 2, null, undefined]) expect(validateSamplingParams({ repetition_penalty: ok })).toEqual([]);
    for (const bad of [0, -1, 2.01, Number.NaN, Infinity, "1.2"]) {
      const problems = validateSamplingParams({ repetition_penalty: bad });
      expect(problems.map((q) => q.param)).toEqual(["repetition_penalty"]);
      expect(problems[0].message).toMatch(/above 0 and at most 2/);
    }
    expect(() => new SequenceSampler({ repetition_penalty: 0 })).toThrow(/repetition_penalty/);
  });

  it("usesPromptIds: only when the penalty is on", () => {
    expect(usesPromptIds({})).toBe(false);
    expect(usesPromptIds({ repetition_penalty: null })).toBe(false);
    expect(usesPromptIds({ repetition_penalty: 1 })).toBe(false);
    expect(usesPromptIds({ repetition_penalty: 1.1 })).toBe(true);
    expect(usesPromptIds({ repetition_penalty: 0.9 })).toBe(true);
  });
});
