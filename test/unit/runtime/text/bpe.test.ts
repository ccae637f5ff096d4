import { describe, expect, it } from "vitest";
import { encodeWord, MergeTable } from "../../../../src/runtime/text/bpe.js";
import { Tokenizer } from "../../../../src/runtime/text/tokenizer.js";
import { seededRandom } from "../../../fixtures/text/parity-strings.js";
import { byteLevel, plain, tinySpec } from "./tiny-vocab.js";

/** Pieces `word` merges into, with every merge result in the vocabulary so pieces map 1:1 to ids. */
function merge(word: string, pairs: Array<[string, string]>): string[] {
  const texts = [...new Set([...word, ...pairs.flatMap(([l, r]) => [l, r, l + r])])].map(byteLevel);
  const tokenToId = new Map(texts.map((t, id) => [t, id]));
  const table = new MergeTable(
    texts.length,
    tokenToId,
    pairs.map(([l, r]) => `${byteLevel(l)} ${byteLevel(r)}`),
  );
  const ids: number[] = [];
  encodeWord(byteLevel(word), table, tokenToId, ids);
  return ids.map((id) => plain(texts[id]));
}

/** Textbook BPE: merge the lowest-ranked adjacent pair, leftmost first, until none is left. */
function naiveMerge(word: string, pairs: Array<[string, string]>): string[] {
  const pieces = [...word];
  for (;;) {
    let best = -1;
    let bestRank = Infinity;
    for (let i = 0; i + 1 < pieces.length; i++) {
      const rank = pairs.findIndex(([l, r]) => l === pieces[i] && r === pieces[i + 1]);
      if (rank !== -1 && rank < bestRank) [best, bestRank] = [i, rank];
    }
    if (best === -1) return pieces;
    pieces.splice(best, 2, pieces[best] + pieces[best + 1]);
  }
}

describe("BPE merging", () => {
  it("applies the lowest-ranked merge first, wherever it is", () => {
    const pairs: Array<[string, string]> = [
      ["c", "d"],
      ["b", "cd"],
      ["a", "b"],
      ["a", "bcd"],
    ];
    // "cd" first, then "bcd" (rank 1) beats "ab" (rank 2), then "abcd".
    expect(merge("abcd", pairs)).toEqual(["abcd"]);
    expect(
      merge("abcd", [
        ["a", "b"],
        ["c", "d"],
        ["b", "c"],
      ]),
    ).toEqual(["ab", "cd"]);
  });

  it("breaks ties between equal merges leftmost first", () => {
    expect(merge("aaa", [["a", "a"]])).toEqual(["aa", "a"]);
    expect(
      merge("aaaa", [
        ["a", "a"],
        ["aa", "aa"],
      ]),
    ).toEqual(["aaaa"]);
  });

  it("stops when no adjacent pair has a merge", () => {
    expect(merge("abc", [["x", "y"]])).toEqual(["a", "b", "c"]);
    expect(merge("a", [])).toEqual(["a"]);
  });

  it("keeps the first rank when a merge is listed twice", () => {
    // "b c" is listed first and again after "a b": the first listing wins, so "bc" forms before "ab".
    expect(
      merge("abc", [
        ["b", "c"],
        ["a", "b"],
        ["b", "c"],
      ]),
    ).toEqual(["a", "bc"]);
  });

  it("matches a naive reference on random words, short (scan path) and long (heap path)", () => {
    const rand = seededRandom(7);
    const letters = "abc";
    const pairs: Array<[string, string]> = [
      ["a", "b"],
      ["b", "a"],
      ["c", "c"],
      ["ab", "ab"],
      ["ba", "c"],
      ["abab", "a"],
      ["cc", "ab"],
      ["b", "b"],
    ];
    for (const length of [1, 2, 5, 9, 20, 47, 48, 49, 80, 300]) {
      for (let k = 0; k < 20; k++) {
        const word = Array.from({ length }, () => letters[Math.floor(rand() * 3)]).join("");
        expect(merge(word, pairs), word).toEqual(naiveMerge(word, pairs));
      }
    }
  });

  it("handles very long words without quadratic blow-up", () => {
    const started = performance.now();
    expect(
      merge("ab".repeat(5000), [
        ["a", "b"],
        ["ab", "ab"],
      ]).length,
    ).toBe(2500);
    expect(performance.now() - started).toBeLessThan(500);
  });
});

describe("tokenizing with a tiny vocabulary", () => {
  const spec = tinySpec({
    normal: ["a", "b", "c", "h", "e", "l", "o", " ", "he", "ll", "hell", "hello", " hello"],
    merges: [
      ["h", "e"],
      ["l", "l"],
      ["he", "ll"],
      ["hell", "o"],
      [" ", "hello"],
      ["a", "b"],
      ["ab", "c"],
    ],
  });
  const tokenizer = Tokenizer.fromSpec(spec);
  const texts = (ids: number[]) => ids.map((id) => plain(tokenizer.tokenText(id)));

  it("encodes words to merged tokens", () => {
    expect(texts(tokenizer.encode("hello hello"))).toEqual(["hello", " hello"]);
  });

  it("falls back to one token per byte when a merge result is not in the vocabulary", () => {
    // "ab"+"c" is a merge but "abc" is no token: llama.cpp emits the piece's bytes that are tokens.
    expect(texts(tokenizer.encode("abc"))).toEqual(["a", "b", "c"]);
  });

  it("drops characters the vocabulary cannot spell, as llama.cpp does", () => {
    expect(texts(tokenizer.encode("hé"))).toEqual(["h"]);
    expect(texts(tokenizer.encode("z"))).toEqual([]);
  });

  it("gives the same ids from the word cache", () => {
    const first = tokenizer.encode("hello abc hello");
    expect(tokenizer.encode("hello abc hello")).toEqual(first);
  });
});
