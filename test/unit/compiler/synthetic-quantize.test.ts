// The test-only encoders of test/fixtures/synthetic/quantize.ts, read back with kiln's dequantizer
// (itself checked bit for bit against gguf-py in gguf/dequant.test.ts): the synthetic models'
// weights must stay close to the floats they were drawn as, or their designed scales are lost.

import { describe, expect, it } from "vitest";
import { dequantize } from "../../../src/compiler/gguf/dequant.js";
import { GgmlType } from "../../../src/compiler/gguf/types.js";
import { type EncodableType, encodeTensor } from "../../fixtures/synthetic/quantize.js";
import { Random } from "../../fixtures/synthetic/tiny-model.js";

const { Q4_0, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K } = GgmlType;

/** RMS error relative to the input's RMS, and the largest error, of `values` through `type`. */
function roundTrip(type: EncodableType, values: Float32Array): { relativeRms: number; maxError: number } {
  const back = dequantize(type, encodeTensor(type, values), values.length);
  let se = 0;
  let sx = 0;
  let maxError = 0;
  for (let i = 0; i < values.length; i++) {
    se += (values[i] - back[i]) ** 2;
    sx += values[i] ** 2;
    maxError = Math.max(maxError, Math.abs(values[i] - back[i]));
  }
  return { relativeRms: Math.sqrt(se / sx), maxError };
}

/**
 * Normals N(0.3, 1) (off-centre, so blocks have minimums). Measured relative RMS / max error:
 * Q4_0 0.088 / 0.37, Q5_0 0.043 / 0.17, Q8_0 0.0054 / 0.016, Q4_K 0.077 / 0.23, Q5_K 0.037 / 0.11,
 * Q6_K 0.020 / 0.063: about (range / levels) / sqrt(12), as uniform rounding gives.
 */
const LIMITS: Array<{ type: EncodableType; relativeRms: number; maxError: number }> = [
  { type: Q4_0, relativeRms: 0.11, maxError: 0.5 },
  { type: Q5_0, relativeRms: 0.055, maxError: 0.25 },
  { type: Q8_0, relativeRms: 0.007, maxError: 0.025 },
  { type: Q4_K, relativeRms: 0.1, maxError: 0.35 },
  { type: Q5_K, relativeRms: 0.05, maxError: 0.17 },
  { type: Q6_K, relativeRms: 0.025, maxError: 0.1 },
];

describe("synthetic-model encoders round-trip through kiln's dequantizer", () => {
  const values = new Random(7).normals(256 * 32, 0.3, 1);

  for (const limit of LIMITS) {
    it(`${GgmlType[limit.type]} stays within its rounding error`, () => {
      const r = roundTrip(limit.type, values);
      expect(r.relativeRms).toBeLessThan(limit.relativeRms);
      expect(r.maxError).toBeLessThan(limit.maxError);
    });
  }

  it("uses the fifth bit: Q5 formats halve the 4-bit formats' error", () => {
    expect(roundTrip(Q5_K, values).relativeRms).toBeLessThan(0.6 * roundTrip(Q4_K, values).relativeRms);
    expect(roundTrip(Q5_0, values).relativeRms).toBeLessThan(0.6 * roundTrip(Q4_0, values).relativeRms);
  });

  it("encodes an all-zero tensor as zeros", () => {
    for (const { type } of LIMITS) expect(dequantize(type, encodeTensor(type, new Float32Array(256)), 256).every((v) => v === 0)).toBe(true);
  });

  it("Q5_K reaches the top level 31 and level 0 of a sub-block", () => {
    // One sub-block spanning [-1, 1]: its extremes must come back nearly exactly.
    const x = new Float32Array(256);
    for (let i = 0; i < 32; i++) x[i] = -1 + (2 * i) / 31;
    const back = dequantize(Q5_K, encodeTensor(Q5_K, x), 256);
    expect(Math.abs(back[0] + 1)).toBeLessThan(0.02);
    expect(Math.abs(back[31] - 1)).toBeLessThan(0.02);
  });
});
