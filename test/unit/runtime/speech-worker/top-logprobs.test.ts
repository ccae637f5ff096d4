import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TopLogprobs } from "../../../../src/runtime/speech-worker/top-logprobs.js";

/** log-softmax in float64, the reference the float32 kernel is held to. */
function logSoftmax(row: Float32Array): number[] {
  let max = -Infinity;
  for (const x of row) max = Math.max(max, x);
  let sum = 0;
  for (const x of row) sum += Math.exp(x - max);
  return Array.from(row, (x) => x - max - Math.log(sum));
}

describe("TopLogprobs", () => {
  let top: TopLogprobs;
  beforeAll(async () => {
    top = await TopLogprobs.create(1);
  });
  afterAll(async () => {
    await top.release();
  });

  it("gives each row's k likeliest tokens, likeliest first, with their log-probabilities", async () => {
    const vocab = 5000;
    const rows = 3;
    let seed = 7;
    const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31) * 30 - 10;
    const logits = Float32Array.from({ length: rows * vocab }, random);
    for (let i = 0; i < 100; i++) logits[vocab + i] = -Infinity; // masked by the rules
    const result = await top.run(logits, rows, vocab, 10);
    expect(result.k).toBe(10);
    for (let r = 0; r < rows; r++) {
      const row = logits.subarray(r * vocab, (r + 1) * vocab);
      const expected = logSoftmax(row);
      const order = [...expected.keys()].sort((a, b) => expected[b] - expected[a] || a - b).slice(0, 10);
      expect(Array.from(result.tokens.subarray(r * 10, (r + 1) * 10))).toEqual(order);
      result.logprobs.subarray(r * 10, (r + 1) * 10).forEach((lp, i) => expect(lp).toBeCloseTo(expected[order[i]], 5));
    }
  });

  it("ranks equal log-probabilities lower id first, as beam search breaks ties", async () => {
    const result = await top.run(Float32Array.from([1, 3, 3, 2, 0, 3, -Infinity, 3]), 2, 4, 3);
    expect(Array.from(result.tokens)).toEqual([1, 2, 3, 1, 3, 0]);
    expect(result.logprobs[0]).toBe(result.logprobs[1]);
  });

  it("returns the whole row when k exceeds the vocabulary", async () => {
    const result = await top.run(Float32Array.from([0, 1]), 1, 2, 5);
    expect(result.k).toBe(2);
    expect(Array.from(result.tokens)).toEqual([1, 0]);
    expect(result.logprobs[0]).toBeCloseTo(-Math.log1p(Math.exp(-1)), 6);
  });
});
