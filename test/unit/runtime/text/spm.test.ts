// SentencePiece-style ("llama") tokenization on a hand-made vocabulary, with expectations worked out
// by hand from llama.cpp's llm_tokenizer_spm_session rules. Parity with llama.cpp itself on real and
// family-shaped vocabularies is test/model/runtime/text/spm-parity.test.ts.
import { describe, expect, it } from "vitest";
import type { TokenizerSpec } from "../../../../src/runtime/artifact/index.js";
import { Tokenizer } from "../../../../src/runtime/text/tokenizer.js";

const M = "\u2581";
/** [text, GGUF type, score]; ids are positions. */
const VOCAB: Array<[string, number, number]> = [
  ["<unk>", 2, 0], // 0
  ["<s>", 3, 0], // 1
  ["</s>", 3, 0], // 2
  ["<0x0A>", 6, 0], // 3
  ["<0xE2>", 6, 0], // 4
  ["<0x82>", 6, 0], // 5
  ["<0xAC>", 6, 0], // 6
  [M, 1, -5], // 7
  ["a", 1, -10], // 8
  ["b", 1, -10], // 9
  ["c", 1, -10], // 10
  ["ab", 1, -1], // 11
  ["bc", 1, -1], // 12  ties with "ab"
  [M + "a", 1, -2], // 13
  [M + "ab", 1, -3], // 14
  ["<ctl>", 3, 0], // 15
  ["<ud>", 4, 0], // 16
];

function spec(overrides: Partial<TokenizerSpec> = {}): TokenizerSpec {
  return {
    model: "llama",
    pre: "default",
    tokens: VOCAB.map((v) => v[0]),
    tokenTypes: VOCAB.map((v) => v[1]),
    scores: VOCAB.map((v) => v[2]),
    merges: [],
    bosId: 1,
    eosId: 2,
    eotId: null,
    padId: null,
    unkId: 0,
    addBos: true,
    addEos: false,
    addSpacePrefix: true,
    ...overrides,
  };
}

describe("SentencePiece tokenizer", () => {
  const tokenizer = Tokenizer.fromSpec(spec());

  it("merges the highest-scoring pair first, ties going to the leftmost pair", () => {
    // "▁abc": ab and bc tie at -1, ab is further left; then ▁ab (-3) forms.
    expect(tokenizer.encode("abc")).toEqual([14, 10]);
    const bcFirst = Tokenizer.fromSpec(spec({ scores: VOCAB.map((v) => (v[0] === "bc" ? -0.5 : v[2])) }));
    // bc now wins; then ▁a (-2) forms, and ▁a + bc is no token.
    expect(bcFirst.encode("abc")).toEqual([13, 12]);
  });

  it("marks spaces with U+2581 and adds one space prefix", () => {
    expect(tokenizer.encode("a b")).toEqual([13, 7, 9]); // ▁a ▁ b
    expect(tokenizer.encode(" a")).toEqual([7, 13]); // ▁ ▁a: the prefix and the text's own space
    expect(Tokenizer.fromSpec(spec({ addSpacePrefix: false })).encode("ab")).toEqual([11]);
  });

  it("falls back to byte tokens, and to <unk> for a byte without one", () => {
    expect(tokenizer.encode("a\n")).toEqual([13, 3]);
    expect(tokenizer.encode("a€")).toEqual([13, 4, 5, 6]);
    expect(tokenizer.encode("aé")).toEqual([13, 0, 0]); // é is C3 A9: no byte tokens in this vocabulary
  });

  it("puts the space prefix after every special token, and adds BOS when asked", () => {
    expect(tokenizer.encode("<ctl>a<ctl>b", { parseSpecial: true })).toEqual([15, 13, 15, 7, 9]);
    expect(tokenizer.encode("a<ud>a")).toEqual([13, 16, 13]); // user-defined tokens split out always
    expect(tokenizer.encode("ab", { addSpecial: true })).toEqual([1, 14]);
    expect(tokenizer.encode("", { addSpecial: true })).toEqual([1]);
  });

  it("lets Phi-3's special tokens swallow the whitespace after them, as llama.cpp does by model name", () => {
    const phi3 = Tokenizer.fromSpec(spec({ modelName: "Phi3" }));
    expect(phi3.encode("<ctl>\n a", { parseSpecial: true })).toEqual([15, 13]);
    expect(tokenizer.encode("<ctl>\n a", { parseSpecial: true })).toEqual([15, 7, 3, 13]);
  });

  it("decodes U+2581 as spaces and byte tokens as bytes; detokenize drops the space prefix", () => {
    expect(tokenizer.decode([14, 10])).toBe(" abc");
    expect(tokenizer.detokenize([14, 10])).toBe("abc");
    expect(tokenizer.detokenize([13, 4, 5, 6])).toBe("a€");
    // Like llama_detokenize: after a BOS that stays, the space is kept; removing the BOS keeps it too.
    expect(tokenizer.detokenize([1, 14])).toBe(" ab");
    expect(tokenizer.detokenize([1, 14], { removeSpecial: true })).toBe(" ab");
    expect(tokenizer.detokenize([15, 13], { renderSpecial: true })).toBe("<ctl> a");
    expect(tokenizer.detokenize([15, 13])).toBe(" a");
    for (const text of ["abc", "a b  c", "a€\nb", "  ab "]) expect(tokenizer.detokenize(tokenizer.encode(text))).toBe(text);
  });

  it("holds a byte-fallback character back until it is complete", () => {
    const stream = tokenizer.createStreamDecoder();
    expect([4, 5, 6].map((id) => stream.push(id))).toEqual(["", "", "€"]);
  });

  it("tokenizes a large vocabulary's long text quickly", () => {
    // Gemma 3 has 262,144 pieces; building the tables and merging a long text must stay cheap.
    const pieces = Array.from({ length: 262_144 }, (_, i) => M + i.toString(36));
    const big = Tokenizer.fromSpec(
      spec({
        tokens: [...VOCAB.map((v) => v[0]), ...pieces],
        tokenTypes: [...VOCAB.map((v) => v[1]), ...pieces.map(() => 1)],
        scores: [...VOCAB.map((v) => v[2]), ...pieces.map((_, i) => -i)],
      }),
    );
    const text = Array.from({ length: 3000 }, (_, i) => ((i * 7919) % 262_144).toString(36)).join(" ");
    const started = performance.now();
    const ids = big.encode(text);
    expect(performance.now() - started).toBeLessThan(500); // typically tens of ms; catches an O(n^2)
    expect(ids.length).toBe(3000); // every word is one piece, reached through its prefixes
    expect(big.detokenize(ids)).toBe(text);
  });
});
