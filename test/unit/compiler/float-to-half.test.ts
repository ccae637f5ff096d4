// Claim: floatToHalf is the inverse of halfToFloat on every finite half, rounds to nearest even
// between halves, and saturates to Infinity past the half range (the GPU target's float16 weights).
import { describe, expect, it } from "vitest";
import { floatToHalf, halfToFloat } from "../../../src/compiler/quant/fp16.js";

describe("floatToHalf", () => {
  it("round-trips every finite half", () => {
    for (let h = 0; h < 0x10000; h++) {
      const v = halfToFloat(h);
      if (Number.isNaN(v)) continue;
      expect(floatToHalf(v)).toBe(h);
    }
  });

  it("rounds to nearest even, keeps infinities and saturates past the range", () => {
    expect(floatToHalf(1 + 2 ** -11)).toBe(0x3c00); // a tie: to the even 1.0
    expect(floatToHalf(1 + 3 * 2 ** -11)).toBe(0x3c02); // a tie: to the even 1 + 2^-9
    expect(floatToHalf(1 / 3)).toBe(0x3555);
    expect(floatToHalf(65520)).toBe(0x7c00);
    expect(floatToHalf(-Infinity)).toBe(0xfc00);
    expect(floatToHalf(2 ** -25)).toBe(0); // half the smallest subnormal, a tie: to even (zero)
    expect(floatToHalf(3 * 2 ** -25)).toBe(2); // 1.5 subnormal steps, a tie: to the even 2
  });
});
