import { describe, expect, it } from "vitest";
import { alignRows, dtw, medianFilter } from "../../../../src/runtime/speech/alignment.js";

describe("word alignment", () => {
  it("median filter with reflected edges", () => {
    expect([...medianFilter([1, 9, 2, 8, 3], 3)]).toEqual([9, 2, 8, 3, 8]);
  });

  it("dtw finds the monotonic path through the best cells", () => {
    // Row 0 prefers column 0-1, row 1 column 2-3.
    const m = Float64Array.from([1, 1, 0, 0, 0, 0, 1, 1]);
    const path = dtw(m, 2, 4);
    expect(path[0]).toEqual([0, 0]);
    expect(path[path.length - 1]).toEqual([1, 3]);
    expect(path.find(([r]) => r === 1)?.[1]).toBe(2);
  });

  it("gives each row the time where its attention moves on", () => {
    // 2 heads, 3 rows, 10 frames of attention (20 mel frames): row r attends to frames 3r..3r+2.
    const heads = 2;
    const rows = 3;
    const ctx = 12;
    const w = new Float32Array(heads * rows * ctx);
    for (let h = 0; h < heads; h++) for (let r = 0; r < rows; r++) for (let c = 3 * r; c < 3 * r + 3; c++) w[(h * rows + r) * ctx + c] = 1 / 3;
    const starts = alignRows(w, heads, rows, ctx, 20);
    expect(starts).toHaveLength(rows);
    expect(starts[0]).toBe(0);
    expect(starts[1]).toBeGreaterThan(starts[0]);
    expect(starts[2]).toBeGreaterThan(starts[1]);
  });
});
