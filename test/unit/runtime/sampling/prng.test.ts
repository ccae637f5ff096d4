import { describe, expect, it } from "vitest";
import { SplitMix64, Xoshiro128ss, randomSeed } from "../../../../src/runtime/sampling/prng.js";

describe("PRNG", () => {
  it("xoshiro128** matches the reference outputs for state {1, 2, 3, 4}", () => {
    const rng = new Xoshiro128ss(1, 2, 3, 4);
    const out = Array.from({ length: 10 }, () => rng.nextU32());
    expect(out).toEqual([11520, 0, 5927040, 70819200, 2031721883, 1637235492, 1287239034, 3734860849, 3729100597, 4258142804]);
  });

  it("splitmix64 matches the reference output for seed 0", () => {
    const sm = new SplitMix64(0n);
    expect(sm.next()).toBe(0xe220a8397b1dcdafn);
    expect(sm.next()).toBe(0x6e789e6aa1b965f4n);
  });

  it("nextFloat is uniform in [0, 1)", () => {
    const rng = Xoshiro128ss.fromSeed(42);
    const bins = new Array(10).fill(0);
    let sum = 0;
    let outside = 0;
    const n = 100_000;
    for (let i = 0; i < n; i++) {
      const u = rng.nextFloat();
      if (!(u >= 0 && u < 1)) outside++;
      bins[Math.floor(u * 10)]++;
      sum += u;
    }
    expect(outside).toBe(0);
    expect(Math.abs(sum / n - 0.5)).toBeLessThan(0.01);
    for (const b of bins) expect(Math.abs(b - n / 10)).toBeLessThan(600);
  });

  it("is reproducible per seed and differs across seeds, streams and negative seeds", () => {
    const seq = (seed: number, stream = 0) => {
      const rng = Xoshiro128ss.fromSeed(seed, stream);
      return Array.from({ length: 8 }, () => rng.nextU32());
    };
    expect(seq(7)).toEqual(seq(7));
    expect(seq(7)).not.toEqual(seq(8));
    expect(seq(7, 1)).not.toEqual(seq(7));
    expect(seq(-7)).not.toEqual(seq(7));
    expect(seq(2 ** 60)).toEqual(seq(2 ** 60));
  });

  it("random seeds are safe integers and vary", () => {
    const seeds = new Set(Array.from({ length: 20 }, () => randomSeed()));
    expect(seeds.size).toBe(20);
    for (const s of seeds) expect(Number.isSafeInteger(s) && s >= 0).toBe(true);
  });
});
