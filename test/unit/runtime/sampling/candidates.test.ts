// Claim: a sequence sampled from a device's candidates (the top 64 after its own logit adjustments,
// as the GPU graph returns them) picks what the CPU sampler picks from the whole row, with the same
// log-probabilities, whenever top_k keeps no more than the candidates: greedy and seeded, with
// logit_bias, repetition, presence and frequency penalties; and its adjustments merge per token.
import { describe, expect, it } from "vitest";
import { type CandidateRow, SequenceSampler, type SamplingParams } from "../../../../src/runtime/sampling/index.js";
import { Xoshiro128ss } from "../../../../src/runtime/sampling/prng.js";

const VOCAB = 500;
const K = 64;

function randomRow(seed: number): Float32Array {
  const rng = Xoshiro128ss.fromSeed(seed, 0);
  return Float32Array.from({ length: VOCAB }, () => (rng.nextFloat() - 0.5) * 12);
}

/** What the device computes for a row: adjustments applied as the graph does, then its top K, top 20 and normalizer. */
function deviceRow(logits: Float32Array, sampler: SequenceSampler): CandidateRow {
  const a = sampler.logitAdjustments(VOCAB);
  const adjusted = logits.slice();
  for (let i = 0; i < a.ids.length; i++) {
    const v = logits[a.ids[i]] + a.bias[i];
    adjusted[a.ids[i]] = (v > 0 ? v / a.repetition[i] : v * a.repetition[i]) - a.subtract[i];
  }
  const byAdjusted = [...adjusted.keys()].sort((x, y) => adjusted[y] - adjusted[x] || x - y).slice(0, K);
  const byRaw = [...logits.keys()].sort((x, y) => logits[y] - logits[x] || x - y).slice(0, 20);
  let max = -Infinity;
  for (const v of logits) max = Math.max(max, v);
  let sum = 0;
  for (const v of logits) sum += Math.exp(v - max);
  return {
    ids: byAdjusted,
    adjusted: byAdjusted.map((i) => adjusted[i]),
    raw: byAdjusted.map((i) => logits[i]),
    logNormalizer: max + Math.log(sum),
    topIds: byRaw,
    topLogits: byRaw.map((i) => logits[i]),
  };
}

describe("sampling from device candidates", () => {
  const cases: Array<[string, SamplingParams]> = [
    ["greedy", { temperature: 0 }],
    ["seeded top_k", { temperature: 0.9, top_k: 40, seed: 3 }],
    ["seeded top_k + top_p + min_p", { temperature: 1.2, top_k: 50, top_p: 0.9, min_p: 0.01, seed: 11 }],
    [
      "penalties and bias",
      { temperature: 0.7, top_k: 30, seed: 5, presence_penalty: 1.5, frequency_penalty: 0.5, repetition_penalty: 1.3, logit_bias: { 7: 5, 9: -100 } },
    ],
  ];
  for (const [name, params] of cases) {
    it(`draws what the CPU sampler draws: ${name}`, () => {
      const cpu = new SequenceSampler({ ...params, logprobs: true, top_logprobs: 5 }, { promptIds: [1, 2, 3] });
      const gpu = new SequenceSampler({ ...params, logprobs: true, top_logprobs: 5 }, { promptIds: [1, 2, 3] });
      for (let step = 0; step < 30; step++) {
        const logits = randomRow(step);
        const want = cpu.sample(logits.slice());
        const got = gpu.sampleCandidates(deviceRow(logits, gpu), VOCAB);
        expect(got.token, `step ${step}`).toBe(want.token);
        expect(got.logprob).toBeCloseTo(want.logprob!, 6);
        expect(got.top!.map((t) => t.token)).toEqual(want.top!.map((t) => t.token));
      }
    });
  }

  it("merges bias, repetition and penalties into one entry per token", () => {
    const s = new SequenceSampler({ logit_bias: { 4: 2 }, repetition_penalty: 1.5, presence_penalty: 1, frequency_penalty: 0.25 }, { promptIds: [4, 8] });
    s.accept(4);
    s.accept(4);
    const a = s.logitAdjustments(VOCAB);
    const at = a.ids.indexOf(4);
    expect(a.ids.filter((id) => id === 4)).toHaveLength(1);
    expect([a.bias[at], a.repetition[at], a.subtract[at]]).toEqual([2, 1.5, 1 + 0.25 * 2]);
    expect(a.repetition[a.ids.indexOf(8)]).toBe(1.5);
  });
});

describe("min_tokens and ignore_eos keep the model's end tokens out", () => {
  const END = [7, 11];
  /** A row whose likeliest token is an end token, then 3. */
  const row = () => {
    const logits = new Float32Array(VOCAB);
    logits[7] = 9;
    logits[3] = 5;
    return logits;
  };

  it("until min_tokens are generated, on the whole row and as the device's adjustments", () => {
    const s = new SequenceSampler({ temperature: 0, min_tokens: 2 }, { endIds: END });
    expect(s.logitAdjustments(VOCAB)).toMatchObject({ ids: END, bias: [-Infinity, -Infinity] });
    const logits = row();
    expect(s.sample(logits).token).toBe(3);
    expect(logits[7]).toBe(9); // restored
    expect(sampleFromDevice(s, row())).toBe(3);
    // Two generated: the end token is the likeliest again.
    expect(s.logitAdjustments(VOCAB).ids).toEqual([]);
    expect(s.sample(row()).token).toBe(7);
  });

  it("always with ignore_eos; with neither, or no end ids given, nothing changes", () => {
    const ignoring = new SequenceSampler({ temperature: 0, ignore_eos: true }, { endIds: END });
    for (let i = 0; i < 5; i++) expect(ignoring.sample(row()).token).toBe(3);
    expect(new SequenceSampler({ temperature: 0 }, { endIds: END }).sample(row()).token).toBe(7);
    expect(new SequenceSampler({ temperature: 0, ignore_eos: true }).sample(row()).token).toBe(7);
  });

  it("stop_token_ids are held back until min_tokens too, but ignore_eos leaves them in force", () => {
    const stopRow = () => {
      const logits = row();
      logits[5] = 12;
      return logits;
    };
    const s = new SequenceSampler({ temperature: 0, min_tokens: 1, stop_token_ids: [5] }, { endIds: END });
    expect(s.logitAdjustments(VOCAB)).toMatchObject({ ids: [...END, 5], bias: [-Infinity, -Infinity, -Infinity] });
    expect(sampleFromDevice(s, stopRow())).toBe(3);
    expect(s.sample(stopRow()).token).toBe(5);
    const ignoring = new SequenceSampler({ temperature: 0, ignore_eos: true, stop_token_ids: [5] }, { endIds: END });
    expect(ignoring.logitAdjustments(VOCAB)).toMatchObject({ ids: END });
    expect(ignoring.sample(stopRow()).token).toBe(5);
  });

  it("bad_words_ids: the token that would complete a banned sequence is kept out, on the row and in the device's adjustments", () => {
    // Banned: 3 alone, and 5 right after 4, 9.
    const s = new SequenceSampler({ temperature: 0, bad_words_ids: [[3], [4, 9, 5]] });
    const prefer = (...order: number[]) => {
      const logits = new Float32Array(VOCAB);
      order.forEach((id, i) => (logits[id] = 10 - i));
      return logits;
    };
    expect(s.logitAdjustments(VOCAB)).toMatchObject({ ids: [3], bias: [-Infinity] });
    expect(s.sample(prefer(3, 4)).token).toBe(4);
    expect(s.sample(prefer(9)).token).toBe(9);
    expect(s.logitAdjustments(VOCAB)).toMatchObject({ ids: [3, 5], bias: [-Infinity, -Infinity] });
    expect(sampleFromDevice(s, prefer(5, 6))).toBe(6);
    // After 6 the sequence 4, 9 no longer ends the output: 5 may come.
    expect(s.sample(prefer(5)).token).toBe(5);
  });

  /** Greedy from the device's candidates for `logits`, as a GPU step would give them. */
  function sampleFromDevice(s: SequenceSampler, logits: Float32Array): number {
    return s.sampleCandidates(deviceRow(logits, s), VOCAB).token;
  }
});
