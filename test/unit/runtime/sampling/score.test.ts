import { describe, expect, it } from "vitest";
import { SequenceSampler } from "../../../../src/runtime/sampling/sampler.js";
import { scorePositions } from "../../../../src/runtime/sampling/score.js";
import { logSoftmax, randomLogits } from "./helpers.js";

describe("scorePositions", () => {
  const vocab = 3000;
  const rows = [0, 1, 2].map((seed) => randomLogits(vocab, seed));
  const logits = new Float32Array(rows.length * vocab);
  rows.forEach((r, i) => logits.set(r, i * vocab));

  it("gives each position its target's log-softmax and the top alternatives, most likely first", () => {
    const targets = [5, 17, 2999];
    const s = scorePositions(logits, vocab, targets, 3);
    expect(s.top).toBe(3);
    targets.forEach((t, p) => {
      const ref = logSoftmax(rows[p]);
      expect(s.logprobs[p]).toBeCloseTo(ref[t], 9);
      const best = [...ref.keys()].sort((a, b) => ref[b] - ref[a] || a - b).slice(0, 3);
      expect([...s.topIds.subarray(p * 3, p * 3 + 3)]).toEqual(best);
      best.forEach((id, i) => expect(s.topLogprobs[p * 3 + i]).toBeCloseTo(ref[id], 9));
    });
  });

  it("reports exactly what a greedy sampler reports for the same token, so a top choice equals its top entry", () => {
    for (let p = 0; p < rows.length; p++) {
      const sample = new SequenceSampler({ temperature: 0, logprobs: true, top_logprobs: 1 }).sample(rows[p]);
      const s = scorePositions(rows[p], vocab, [sample.token], 1);
      expect(s.logprobs[0]).toBe(sample.logprob);
      expect(s.topLogprobs[0]).toBe(s.logprobs[0]);
    }
  });

  it("ranks each target among the vocabulary only when asked (1 = likeliest, ties sharing the better rank)", () => {
    const targets = [5, 17, 2999];
    const want = targets.map((t, p) => 1 + rows[p].filter((v) => v > rows[p][t]).length);
    expect([...scorePositions(logits, vocab, targets, 2, true).ranks]).toEqual(want);
    expect([...scorePositions(logits, vocab, targets, 2).ranks]).toEqual([0, 0, 0]);
    const tied = Float32Array.from([1, 3, 3, 2]);
    expect([...scorePositions(tied, 4, [2], 1, true).ranks]).toEqual([1]);
  });

  it("scores no position for no target", () => {
    expect(scorePositions(new Float32Array(0), vocab, [], 2).logprobs).toHaveLength(0);
  });
});
