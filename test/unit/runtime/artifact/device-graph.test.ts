/**
 * A GPU step's results come back packed in one tensor: deviceResultLayout places each result in a
 * position's row (the compiler writes that order, the runtime reads it), and unpackDeviceResults
 * splits the rows back, ids as integers.
 */
import { describe, expect, it } from "vitest";
import { DEVICE_CANDIDATES, DEVICE_TOP_LOGPROBS, deviceResultLayout, unpackDeviceResults } from "../../../../src/runtime/artifact/index.js";

describe("deviceResultLayout", () => {
  it("places candidates, alternatives, the log-normalizer and the target logit side by side", () => {
    const layout = deviceResultLayout(49_152);
    expect(layout).toMatchObject({
      candidates: DEVICE_CANDIDATES,
      top: DEVICE_TOP_LOGPROBS,
      candidateLogits: 0,
      candidateIds: 64,
      candidateRaw: 128,
      topLogits: 192,
    });
    expect(layout).toMatchObject({ topIds: 212, logNormalizer: 232, targetLogit: 233, width: 234 });
  });

  it("takes the whole vocabulary when it is smaller than the candidates or the alternatives", () => {
    expect(deviceResultLayout(40)).toMatchObject({ candidates: 40, top: 20, width: 3 * 40 + 2 * 20 + 2 });
    expect(deviceResultLayout(12)).toMatchObject({ candidates: 12, top: 12, width: 5 * 12 + 2 });
  });
});

describe("unpackDeviceResults", () => {
  const vocab = 3;
  const { width } = deviceResultLayout(vocab);
  /** A position's row: candidate logits, ids, raw logits, top logits, top ids, log-normalizer, target logit. */
  const row = (base: number) => [
    base + 0.5,
    base + 0.25,
    -Infinity,
    2,
    0,
    -1,
    base + 0.4,
    base + 0.2,
    -Infinity,
    base + 0.4,
    base + 0.2,
    -Infinity,
    2,
    0,
    -1,
    base + 1.5,
    base - 3,
  ];

  it("splits each position's row, ids as integers and -1 where no token is", () => {
    expect(row(0)).toHaveLength(width);
    // Two rows of two positions each.
    const packed = Float32Array.from([...row(0), ...row(10), ...row(20), ...row(30)]);
    const out = unpackDeviceResults(packed, 2, 2, vocab);
    expect(out).toMatchObject({ positions: 2, candidates: 3, top: 3 });
    expect(out.candidateIds).toBeInstanceOf(Int32Array);
    expect([...out.candidateIds.subarray(9, 12)]).toEqual([2, 0, -1]);
    expect([...out.candidateLogits.subarray(9, 12)]).toEqual([30.5, 30.25, -Infinity]);
    expect([...out.candidateRaw.subarray(3, 6)]).toEqual([10.4, 10.2, -Infinity].map(Math.fround));
    expect([...out.topIds.subarray(6, 9)]).toEqual([2, 0, -1]);
    expect([...out.topLogits.subarray(6, 9)]).toEqual([20.4, 20.2, -Infinity].map(Math.fround));
    expect([...out.logNormalizer]).toEqual([1.5, 11.5, 21.5, 31.5]);
    expect([...out.targetLogits]).toEqual([-3, 7, 17, 27]);
  });

  it("refuses a tensor of another length than rows x positions x width", () => {
    expect(() => unpackDeviceResults(new Float32Array(width * 3), 2, 2, vocab)).toThrow(`step results of ${width * 3} floats, not 4 positions of ${width}`);
  });
});
