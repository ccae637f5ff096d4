/** The GPU quality probe's KL over a position's top tokens: exact when they hold all the mass, a lower bound otherwise. */
import { describe, expect, it } from "vitest";
import { topTokensKl } from "../../../src/track/device-quality.js";

const logSoftmax = (xs: number[]) => {
  const z = Math.log(xs.reduce((s, x) => s + Math.exp(x), 0));
  return Float32Array.from(xs, (x) => x - z);
};
const fullKl = (p: Float32Array, q: Float32Array) => p.reduce((s, lp, i) => s + Math.exp(lp) * (lp - q[i]), 0);

describe("topTokensKl", () => {
  const ref = logSoftmax([2, 1, 0.5, -1, -3, -4]);
  const cand = logSoftmax([1.8, 1.2, 0.4, -0.5, -2, -5]);

  it("equals the full KL when the top tokens are the whole vocabulary", () => {
    const all = [0, 1, 2, 3, 4, 5];
    expect(topTokensKl(ref, { target: 0, topIds: all, topLogprobs: all.map((i) => cand[i]) })).toBeCloseTo(fullKl(ref, cand), 6);
  });

  it("is a lower bound, from the top tokens and the rest as one outcome", () => {
    const top = [0, 1, 2];
    const bound = topTokensKl(ref, { target: 0, topIds: top, topLogprobs: top.map((i) => cand[i]) });
    expect(bound).toBeGreaterThan(0);
    expect(bound).toBeLessThanOrEqual(fullKl(ref, cand) + 1e-9);
  });

  it("is 0 for the same distribution", () => {
    const top = [0, 1];
    expect(topTokensKl(ref, { target: 0, topIds: top, topLogprobs: top.map((i) => ref[i]) })).toBeCloseTo(0, 6);
  });
});
