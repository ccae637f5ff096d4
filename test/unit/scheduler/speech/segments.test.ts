import { describe, expect, it } from "vitest";
import { splitWindow } from "../../../../src/scheduler/speech/index.js";

const TB = 50363; // tiny.en's <|0.00|>
const ts = (seconds: number) => TB + Math.round(seconds / 0.02);

describe("splitWindow", () => {
  it("cuts at consecutive timestamp pairs and seeks to the last closing timestamp", () => {
    const tokens = [ts(0), 1, 2, ts(2), ts(2), 3, ts(4.5), ts(4.5), 4];
    const split = splitWindow(tokens, TB, 3000, 30);
    expect(split.segments.map((s) => [s.start, s.end])).toEqual([
      [0, 2],
      [2, 4.5],
    ]);
    expect(split.segments[0].tokens).toEqual([ts(0), 1, 2, ts(2)]);
    // The unfinished text after 4.5 s is decoded again in the next window, which starts there.
    expect(split.advance).toBe(450);
  });

  it("consumes the whole window when it ends on a single timestamp", () => {
    const tokens = [ts(0), 1, ts(1), ts(1), 2, ts(3)];
    const split = splitWindow(tokens, TB, 2800, 28);
    expect(split.segments.map((s) => [s.start, s.end])).toEqual([
      [0, 1],
      [1, 3],
    ]);
    expect(split.advance).toBe(2800);
  });

  it("makes one segment up to the last timestamp when there is no pair", () => {
    const split = splitWindow([ts(0), 1, 2, ts(3.2)], TB, 3000, 30);
    expect(split.segments).toHaveLength(1);
    expect(split.segments[0].end).toBeCloseTo(3.2, 6);
    expect(split.advance).toBe(3000);
    expect(splitWindow([1, 2], TB, 1000, 10).segments[0].end).toBe(10);
    expect(splitWindow([], TB, 1000, 10).segments).toEqual([]);
  });
});
