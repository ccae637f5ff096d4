import { describe, expect, it } from "vitest";
import { lookupDraft, predictedDraft } from "../../../../src/scheduler/engine/draft.js";

describe("lookupDraft", () => {
  it("proposes what followed the latest earlier occurrence of the last tokens", () => {
    // The last 3 tokens (7 8 9) occur twice before: the latest one, at 10, is followed by 4 5.
    expect(lookupDraft([7, 8, 9, 1, 2, 3, 0, 0, 0, 0, 7, 8, 9, 4, 5, 6, 7, 8, 9], { maxTokens: 2 })).toEqual([4, 5]);
    expect(lookupDraft([7, 8, 9, 1, 2, 3, 7, 8, 9], { maxTokens: 8 })).toEqual([1, 2, 3, 7, 8, 9]);
  });

  it("prefers the longest match, down to minMatch, and proposes nothing below it", () => {
    // 4 tokens (1 2 3 4) match at 0; 3 tokens (2 3 4) alone would match later, at 6.
    const tokens = [1, 2, 3, 4, 10, 11, 2, 3, 4, 20, 1, 2, 3, 4];
    expect(lookupDraft(tokens, { maxTokens: 2 })).toEqual([10, 11]);
    expect(lookupDraft(tokens, { maxTokens: 2, maxMatch: 3 })).toEqual([20, 1]);
    expect(lookupDraft([5, 6, 9, 1, 2, 5, 6], { maxTokens: 3 })).toEqual([]);
    expect(lookupDraft([5, 6, 9, 1, 2, 5, 6], { maxTokens: 3, minMatch: 2 })).toEqual([9, 1, 2]);
  });

  it("proposes nothing for short or unrepeated histories, or maxTokens 0", () => {
    expect(lookupDraft([], { maxTokens: 4 })).toEqual([]);
    expect(lookupDraft([1, 2, 3], { maxTokens: 4 })).toEqual([]);
    expect(lookupDraft([1, 2, 3, 4, 5, 6], { maxTokens: 4 })).toEqual([]);
    expect(lookupDraft([1, 2, 3, 9, 1, 2, 3], { maxTokens: 0 })).toEqual([]);
  });

  it("handles runs of one token: the match may overlap the end", () => {
    expect(lookupDraft([4, 4, 4, 4, 4], { maxTokens: 3 })).toEqual([4]);
  });
});

describe("predictedDraft", () => {
  const prediction = [10, 11, 12, 13, 14, 15, 16, 17, 12, 13, 20, 21];

  it("continues the prediction while the output is its beginning", () => {
    expect(predictedDraft(prediction, [], { maxTokens: 3 })).toEqual([10, 11, 12]);
    expect(predictedDraft(prediction, [10, 11], { maxTokens: 3 })).toEqual([12, 13, 14]);
    expect(predictedDraft(prediction, prediction.slice(0, 10), { maxTokens: 8 })).toEqual([20, 21]);
    expect(predictedDraft(prediction, prediction, { maxTokens: 8 })).toEqual([]);
  });

  it("after a departure, rejoins where the output's last tokens occur, nearest the output's length", () => {
    // 99 replaced 13: the last two tokens (99 14) occur nowhere, the last one (14) at 4.
    expect(predictedDraft(prediction, [10, 11, 12, 99, 14], { maxTokens: 2 })).toEqual([]);
    expect(predictedDraft(prediction, [10, 11, 12, 99, 14], { maxTokens: 2, minMatch: 1 })).toEqual([15, 16]);
    // 12 13 occurs at 2 and at 8: an output of 10 tokens is nearer the second.
    expect(predictedDraft(prediction, [10, 11, 99, 14, 15, 16, 17, 98, 12, 13], { maxTokens: 2 })).toEqual([20, 21]);
    expect(predictedDraft(prediction, [99, 12, 13], { maxTokens: 2 })).toEqual([14, 15]);
  });

  it("proposes nothing for maxTokens 0 or an output that never meets the prediction", () => {
    expect(predictedDraft(prediction, [], { maxTokens: 0 })).toEqual([]);
    expect(predictedDraft(prediction, [1, 2, 3], { maxTokens: 4 })).toEqual([]);
  });
});
