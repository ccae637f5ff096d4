// Claim: a chunk's part of an embedding is the sum of its row's positions (for "mean") or its row's
// last position (for "last"), read from the right rows of a multi-row hidden output.
import { describe, expect, it } from "vitest";
import { poolChunk } from "../../../../src/runtime/text-worker/pooling.js";

// [rows 2, positions 3, width 2]: row r position p holds (10r + p, -(10r + p)).
const hidden = Float32Array.from({ length: 12 }, (_, i) => {
  const [r, p, k] = [Math.floor(i / 6), Math.floor(i / 2) % 3, i % 2];
  return (k === 0 ? 1 : -1) * (10 * r + p);
});

describe("poolChunk", () => {
  it("sums a row's positions for mean", () => {
    expect([...poolChunk(hidden, 0, 3, 2, "mean")]).toEqual([0 + 1 + 2, -(0 + 1 + 2)]);
    expect([...poolChunk(hidden, 1, 3, 2, "mean")]).toEqual([10 + 11 + 12, -(10 + 11 + 12)]);
  });

  it("takes a row's last position for last, as a copy", () => {
    const last = poolChunk(hidden, 1, 3, 2, "last");
    expect([...last]).toEqual([12, -12]);
    last[0] = 99;
    expect(hidden[10]).toBe(12);
  });
});
