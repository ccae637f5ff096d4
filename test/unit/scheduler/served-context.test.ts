import { describe, expect, it } from "vitest";
import { servedContextLength } from "../../../src/scheduler/served-model.js";

const smol = { layers: 30, kvHeads: 3, headDim: 64, contextLength: 8192 };

describe("servedContextLength", () => {
  it("keeps the model's context when there is no budget or the budget holds it", () => {
    expect(servedContextLength(smol, 16)).toBe(8192);
    expect(servedContextLength(smol, 1, 4096 * 1024 * 1024)).toBe(8192);
  });

  it("caps each sequence's context so every slot fits the budget, in whole growth steps", () => {
    // 16 slots x 46,080 bytes per position per slot: 4 GiB holds 5,825 positions -> 5,760.
    expect(servedContextLength(smol, 16, 4096 * 1024 * 1024)).toBe(5760);
    expect(servedContextLength(smol, 16, 4096 * 1024 * 1024) * 16 * 46080).toBeLessThanOrEqual(4096 * 1024 * 1024);
  });

  it("refuses a budget too small for one growth step", () => {
    expect(() => servedContextLength(smol, 16, 1024 * 1024)).toThrow(RangeError);
  });
});
