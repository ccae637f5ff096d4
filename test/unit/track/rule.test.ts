/** The promotion rule: faster beyond noise on some metric, slower beyond it on none, within the quality budget. */
import { describe, expect, it } from "vitest";
import { judge, meanMetrics, medianMetrics, relativeSpread, winThreshold, type PromotionRule } from "../../../src/track/index.js";

const rule: PromotionRule = { metrics: ["decode_tokens_per_second", "ttft_ms"], minGain: 0.03, noiseFactor: 2, maxNoise: 0.25 };
const budget = { maxKlDivergence: 0.03, maxPerplexityRatio: 1.02 };
const goodQuality = { kl_divergence: 0.01, perplexity_ratio: 1.005 };
const incumbent = { metrics: { decode_tokens_per_second: 100, ttft_ms: 50 }, spread: { decode_tokens_per_second: 0.01, ttft_ms: 0.05 } };

describe("the promotion rule", () => {
  it("measures noise as the relative spread of two repeats", () => {
    expect(relativeSpread({ decode_tokens_per_second: 110, ttft_ms: 40 }, { decode_tokens_per_second: 90, ttft_ms: 40 })).toEqual({
      decode_tokens_per_second: 0.2,
      ttft_ms: 0,
    });
    expect(
      meanMetrics([
        { a: 1, b: 2 },
        { a: 3, b: NaN },
      ]),
    ).toEqual({ a: 2 });
    // One disturbed pass (a: 10, b: 1) does not move the median of three; two passes average.
    expect(
      medianMetrics([
        { a: 100, b: 50 },
        { a: 10, b: 1 },
        { a: 104, b: 52 },
      ]),
    ).toEqual({ a: 100, b: 50 });
    expect(
      medianMetrics([
        { a: 1, b: 2 },
        { a: 3, b: NaN },
      ]),
    ).toEqual({ a: 2 });
  });

  it("needs a gain above the minimum, or above noiseFactor times the spread when that is larger", () => {
    expect(winThreshold("decode_tokens_per_second", rule, incumbent.spread)).toBe(0.03);
    expect(winThreshold("ttft_ms", rule, incumbent.spread)).toBeCloseTo(0.1);
    expect(judge(incumbent, { metrics: { decode_tokens_per_second: 102.5, ttft_ms: 50 }, quality: goodQuality }, rule, budget)).toMatchObject({
      wins: false,
      reason: "no gain beyond noise: decode +2.5% (needs +3.0%), ttft +0.0% (needs +10.0%)",
    });
    const win = judge(incumbent, { metrics: { decode_tokens_per_second: 104, ttft_ms: 48 }, quality: goodQuality }, rule, budget);
    expect(win).toMatchObject({ wins: true, reason: "faster: decode +4.0% (threshold +3.0%); ttft +4.0%; KL 0.0100, perplexity ×1.0050" });
    expect(win.score).toBeCloseTo(0.08);
    // A lower TTFT is the better one.
    expect(judge(incumbent, { metrics: { decode_tokens_per_second: 100, ttft_ms: 40 }, quality: goodQuality }, rule, budget).wins).toBe(true);
  });

  it("rejects a candidate slower beyond the threshold on any promotion metric, whatever it gains elsewhere", () => {
    expect(judge(incumbent, { metrics: { decode_tokens_per_second: 150, ttft_ms: 60 }, quality: goodQuality }, rule, budget)).toMatchObject({
      wins: false,
      reason: "slower: ttft −20.0% (beyond −5.0%)",
    });
    expect(
      judge(incumbent, { metrics: { decode_tokens_per_second: 150, ttft_ms: 60 }, quality: goodQuality }, { ...rule, maxRegression: 0.5 }, budget).wins,
    ).toBe(true);
  });

  it("keeps the quality budget, whatever the speed", () => {
    const fast = { decode_tokens_per_second: 200, ttft_ms: 20 };
    expect(judge(incumbent, { metrics: fast, quality: { kl_divergence: 0.05, perplexity_ratio: 1 } }, rule, budget).reason).toBe(
      "outside the quality budget: KL 0.0500 over the budget of 0.03",
    );
    expect(judge(incumbent, { metrics: fast, quality: { kl_divergence: 0.01, perplexity_ratio: 1.05 } }, rule, budget).reason).toBe(
      "outside the quality budget: perplexity ×1.0500 over the budget of ×1.02",
    );
    expect(judge(incumbent, { metrics: fast, quality: null }, rule, budget).reason).toBe("outside the quality budget: no quality measurement");
  });

  it("can be opened up (the model test's hook): any candidate within the quality budget wins", () => {
    const open = { ...rule, minGain: -1, noiseFactor: 0, maxRegression: Infinity };
    expect(judge(incumbent, { metrics: { decode_tokens_per_second: 90, ttft_ms: 60 }, quality: goodQuality }, open, budget).wins).toBe(true);
  });
});
