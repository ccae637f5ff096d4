/** Money is integer nano-USD with one rounding rule: each request rounded up once. Checked against hand-computed amounts. */
import { describe, expect, it } from "vitest";
import { costNanoUsd, formatNanoUsd, parseUsdToNano, priceOf, usdToNano } from "../../../src/cloud/money.js";
import { getModel } from "../../../src/catalogue/catalogue.js";

const price = (inUsd: number, outUsd: number, audioUsd = 0) => ({
  inputNanoUsdPerMTok: usdToNano(inUsd),
  outputNanoUsdPerMTok: usdToNano(outUsd),
  nanoUsdPerAudioMinute: usdToNano(audioUsd),
});

describe("costNanoUsd", () => {
  it("charges whole cents exactly: 1M prompt tokens at $0.15/M and 2M completion tokens at $0.60/M is $1.35", () => {
    expect(costNanoUsd(price(0.15, 0.6), { promptTokens: 1_000_000, completionTokens: 2_000_000, audioMs: 0 })).toBe(1_350_000_000);
  });

  it("rounds each request up once, to the next nano-USD, never down and never per token", () => {
    // 7 × 150_000_000 + 3 × 600_000_000 = 2_850_000_000 / 1e6 = 2850 nano-USD exactly.
    expect(costNanoUsd(price(0.15, 0.6), { promptTokens: 7, completionTokens: 3, audioMs: 0 })).toBe(2850);
    // 7 × 1500 + 3 × 2500 = 18_000 / 1e6 = 0.018 → 1 (one rounding for the request, not one per line).
    expect(costNanoUsd(price(0.0000015, 0.0000025), { promptTokens: 7, completionTokens: 3, audioMs: 0 })).toBe(1);
    // 1_000_001 × 1500 = 1_500_001_500 / 1e6 = 1500.0015 → 1501.
    expect(costNanoUsd(price(0.0000015, 0), { promptTokens: 1_000_001, completionTokens: 0, audioMs: 0 })).toBe(1501);
    // 1001 × 2_000_000 + 999 × 4_000_000 = 5_998_000_000 / 1e6 = 5998 exactly: no rounding.
    expect(costNanoUsd(price(0.002, 0.004), { promptTokens: 1001, completionTokens: 999, audioMs: 0 })).toBe(5998);
    // 1 token at $0.000001/M: 1000 nano/M → 0.001 nano → 1 (rounded up).
    expect(costNanoUsd(price(0.000001, 0), { promptTokens: 1, completionTokens: 0, audioMs: 0 })).toBe(1);
    expect(costNanoUsd(price(0.15, 0.6), { promptTokens: 0, completionTokens: 0, audioMs: 0 })).toBe(0);
  });

  it("prices audio per minute from milliseconds: 2 s at $0.006/min is $0.0002; 1 ms is rounded up", () => {
    expect(costNanoUsd(price(0, 0, 0.006), { promptTokens: 0, completionTokens: 0, audioMs: 2000 })).toBe(200_000);
    expect(costNanoUsd(price(0, 0, 0.006), { promptTokens: 0, completionTokens: 0, audioMs: 1 })).toBe(100);
    expect(costNanoUsd(price(0, 0, 0.007), { promptTokens: 0, completionTokens: 0, audioMs: 1 })).toBe(117); // 116.67 → 117
  });

  it("sums of rows are exact: a thousand 1-token requests cost a thousand times one", () => {
    const one = costNanoUsd(price(0.15, 0.6), { promptTokens: 11, completionTokens: 13, audioMs: 0 });
    let sum = 0;
    for (let i = 0; i < 1000; i++) sum += costNanoUsd(price(0.15, 0.6), { promptTokens: 11, completionTokens: 13, audioMs: 0 });
    expect(sum).toBe(1000 * one);
  });

  it("refuses counts that are not safe non-negative integers, and costs past one row's range", () => {
    expect(() => costNanoUsd(price(1, 1), { promptTokens: 1.5, completionTokens: 0, audioMs: 0 })).toThrow(RangeError);
    expect(() => costNanoUsd(price(1, 1), { promptTokens: -1, completionTokens: 0, audioMs: 0 })).toThrow(RangeError);
    expect(() => costNanoUsd(price(1e6, 0), { promptTokens: Number.MAX_SAFE_INTEGER, completionTokens: 0, audioMs: 0 })).toThrow(RangeError);
  });

  it("takes the catalogue's prices as integers: smollm2-135m-instruct at $0.002/M in, $0.004/M out", () => {
    expect(priceOf(getModel("smollm2-135m-instruct"))).toEqual({ inputNanoUsdPerMTok: 2_000_000, outputNanoUsdPerMTok: 4_000_000, nanoUsdPerAudioMinute: 0 });
    expect(priceOf(undefined)).toEqual({ inputNanoUsdPerMTok: 0, outputNanoUsdPerMTok: 0, nanoUsdPerAudioMinute: 0 });
  });
});

describe("USD text", () => {
  it("formats and parses exactly", () => {
    expect(formatNanoUsd(1_350_000_000)).toBe("1.350000000");
    expect(formatNanoUsd(1n)).toBe("0.000000001");
    expect(formatNanoUsd("123456789012345678901")).toBe("123456789012.345678901");
    expect(parseUsdToNano("0.50")).toBe(500_000_000n);
    expect(parseUsdToNano("2")).toBe(2_000_000_000n);
    expect(parseUsdToNano("0.1234567891")).toBeNull();
    expect(parseUsdToNano("-1")).toBeNull();
    expect(parseUsdToNano("1e3")).toBeNull();
  });
});
