import { describe, expect, it } from "vitest";
import { normalizeText, wordEditDistance, wordErrorRate } from "../../support/wer.js";

describe("word error rate", () => {
  it("normalizes case, punctuation, hyphens and numbers", () => {
    expect(normalizeText("Hello, World!  It's twenty-five o'clock.")).toEqual(["hello", "world", "it's", "25", "oclock"]);
    expect(normalizeText("1,000 apples")).toEqual(["1000", "apples"]);
  });

  it("counts substitutions, insertions and deletions", () => {
    expect(wordEditDistance(["a", "b", "c"], ["a", "x", "c", "d"])).toBe(2);
    expect(wordEditDistance([], ["a"])).toBe(1);
  });

  it("is 0 for the same words and edits / reference words otherwise", () => {
    expect(wordErrorRate("The evening train was delayed by twenty minutes.", "the evening train was delayed by 20 minutes")).toBe(0);
    expect(wordErrorRate("one two three four", "one too three")).toBe(0.5);
    expect(wordErrorRate("", "")).toBe(0);
    expect(wordErrorRate("", "noise")).toBe(1);
  });
});
