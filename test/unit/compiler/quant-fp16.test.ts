import { describe, expect, it } from "vitest";
import { f16ToF32 } from "../../../src/compiler/gguf/fp16.js";
import { halfToFloat } from "../../../src/compiler/quant/fp16.js";

// The repacker (quant/fp16.ts) and the reference dequantizer (gguf/fp16.ts) each have their own
// half -> float table; repacking is only exact if they agree on every one of the 65536 halfs.
describe("quant halfToFloat", () => {
  it("agrees bit for bit with the gguf reader's f16ToF32 on all 65536 halfs", () => {
    const a = new Float32Array(1);
    const b = new Float32Array(1);
    const ua = new Uint32Array(a.buffer);
    const ub = new Uint32Array(b.buffer);
    const bad: number[] = [];
    for (let h = 0; h < 65536; h++) {
      a[0] = halfToFloat(h);
      b[0] = f16ToF32(h);
      if (Number.isNaN(a[0]) && Number.isNaN(b[0])) continue; // payloads are irrelevant for scales
      if (ua[0] !== ub[0]) bad.push(h);
    }
    expect(bad).toEqual([]);
  });

  it("decodes known values", () => {
    expect(halfToFloat(0x3c00)).toBe(1);
    expect(halfToFloat(0xc000)).toBe(-2);
    expect(halfToFloat(0x7bff)).toBe(65504);
    expect(halfToFloat(0x0001)).toBe(2 ** -24); // smallest subnormal
    expect(halfToFloat(0x0400)).toBe(2 ** -14); // smallest normal
    expect(Object.is(halfToFloat(0x8000), -0)).toBe(true);
    expect(halfToFloat(0xfc00)).toBe(-Infinity);
    expect(halfToFloat(0x7e00)).toBeNaN();
  });
});
