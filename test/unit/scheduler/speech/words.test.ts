import { describe, expect, it } from "vitest";
import type { Tokenizer } from "../../../../src/runtime/text/index.js";
import { wordsOfWindow } from "../../../../src/scheduler/speech/words.js";

const PIECES = [" Hello", ",", " wor", "ld", ".", ' "', "Yes", '"', " ok"];
const tokenizer = { decode: (ids: Iterable<number>) => [...ids].map((i) => PIECES[i]).join("") } as unknown as Tokenizer;

describe("wordsOfWindow", () => {
  it("groups subword tokens into words and merges punctuation into its neighbours", () => {
    const tokens = [0, 1, 2, 3, 4, 5, 6, 7, 8];
    const starts = [0, 0.5, 0.6, 0.9, 1.2, 1.3, 1.4, 1.8, 1.9, 2.4];
    const probabilities = [0.9, 0.8, 0.5, 0.7, 1, 1, 0.6, 1, 0.4];
    const words = wordsOfWindow(tokenizer, tokens, starts, probabilities);
    expect(words.map((w) => w.word)).toEqual([" Hello,", " world.", ' "Yes"', " ok"]);
    expect(words.map((w) => [w.start, w.end])).toEqual([
      [0, 0.6],
      [0.6, 1.3],
      [1.3, 1.9],
      [1.9, 2.4],
    ]);
    expect(words[1].probability).toBeCloseTo(0.6, 6);
  });
});
