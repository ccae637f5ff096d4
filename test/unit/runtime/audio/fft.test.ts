import { describe, expect, it } from "vitest";
import { ComplexFft, fftFactors, RealFft } from "../../../../src/runtime/audio/fft.js";

/** Seeded uniform numbers in -1..1 (a small LCG), so failures reproduce. */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return (state / 2 ** 32) * 2 - 1;
  };
}

function naiveDft(re: Float64Array, im: Float64Array): { re: Float64Array; im: Float64Array } {
  const n = re.length;
  const out = { re: new Float64Array(n), im: new Float64Array(n) };
  for (let k = 0; k < n; k++) {
    for (let j = 0; j < n; j++) {
      const phase = (-2 * Math.PI * ((j * k) % n)) / n;
      out.re[k] += re[j] * Math.cos(phase) - im[j] * Math.sin(phase);
      out.im[k] += re[j] * Math.sin(phase) + im[j] * Math.cos(phase);
    }
  }
  return out;
}

function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>, count: number): number {
  let max = 0;
  for (let i = 0; i < count; i++) max = Math.max(max, Math.abs(a[i] - b[i]));
  return max;
}

describe("fftFactors", () => {
  it("prefers radix 4 and multiplies back to n", () => {
    expect(fftFactors(200)).toEqual([4, 2, 5, 5]);
    expect(fftFactors(400)).toEqual([4, 4, 5, 5]);
    expect(fftFactors(1)).toEqual([]);
    expect(fftFactors(2 * 3 * 7 * 11)).toEqual([2, 3, 7, 11]);
  });
});

describe("ComplexFft", () => {
  for (const n of [1, 2, 4, 5, 8, 12, 25, 49, 77, 200, 400]) {
    it(`matches a naive DFT for n=${n}`, () => {
      const next = random(n);
      const re = Float64Array.from({ length: n }, next);
      const im = Float64Array.from({ length: n }, next);
      const outRe = new Float64Array(n);
      const outIm = new Float64Array(n);
      new ComplexFft(n).forward(re, im, outRe, outIm);
      const want = naiveDft(re, im);
      expect(maxAbsDiff(outRe, want.re, n)).toBeLessThan(1e-9);
      expect(maxAbsDiff(outIm, want.im, n)).toBeLessThan(1e-9);
    });
  }
});

describe("RealFft", () => {
  for (const n of [2, 10, 16, 400]) {
    it(`matches a naive DFT of real input for n=${n}`, () => {
      const next = random(1000 + n);
      const re = Float64Array.from({ length: n }, next);
      const fft = new RealFft(n);
      const outRe = new Float64Array(fft.bins);
      const outIm = new Float64Array(fft.bins);
      fft.forward(re, outRe, outIm);
      const want = naiveDft(re, new Float64Array(n));
      expect(fft.bins).toBe(n / 2 + 1);
      expect(maxAbsDiff(outRe, want.re, fft.bins)).toBeLessThan(1e-9);
      expect(maxAbsDiff(outIm, want.im, fft.bins)).toBeLessThan(1e-9);
    });
  }

  it("rejects odd lengths", () => {
    expect(() => new RealFft(401)).toThrow(RangeError);
  });
});
