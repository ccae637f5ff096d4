import { describe, expect, it } from "vitest";
import { EXP_MIN_ARG, fastExp } from "../../../../src/runtime/sampling/fast-exp.js";

describe("fastExp", () => {
  it("matches Math.exp to 1e-13 relative over its range", () => {
    let worst = 0;
    for (let i = 0; i <= 200_000; i++) {
      const x = -(i / 200_000) * EXP_MIN_ARG;
      worst = Math.max(worst, Math.abs(fastExp(x) / Math.exp(x) - 1));
    }
    expect(worst).toBeLessThan(1e-13);
    expect(fastExp(0)).toBe(1);
    expect(fastExp(-0)).toBe(1);
  });

  it("is 0 below its range and for NaN, Math.exp above 0", () => {
    expect(fastExp(-EXP_MIN_ARG - 0.001)).toBe(0);
    expect(fastExp(-Infinity)).toBe(0);
    expect(fastExp(Number.NaN)).toBe(0);
    expect(fastExp(1.5)).toBe(Math.exp(1.5));
  });
});
