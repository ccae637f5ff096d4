import { describe, expect, it } from "vitest";
import { Tokenizer } from "../../../../src/runtime/text/tokenizer.js";
import { BYTE_TO_CHAR } from "../../../../src/runtime/text/byte-level.js";
import type { TokenizerSpec } from "../../../../src/runtime/artifact/index.js";

// A vocabulary whose tokens are raw byte runs, so characters can be split anywhere:
// 😀 is F0 9F 98 80, é is C3 A9.
const pieces = [[0xf0, 0x9f], [0x98, 0x80], [0xf0], [0x9f, 0x98], [0x80, 0x61], [0xc3], [0xa9, 0x21], [0x68, 0x69]];
const spec: TokenizerSpec = {
  model: "gpt2",
  pre: "gpt-2",
  tokens: pieces.map((bytes) => bytes.map((b) => BYTE_TO_CHAR[b]).join("")),
  tokenTypes: pieces.map(() => 1),
  merges: [],
  bosId: null,
  eosId: null,
  eotId: null,
  padId: null,
  unkId: null,
  addBos: false,
  addEos: false,
  addSpacePrefix: false,
};
const tokenizer = Tokenizer.fromSpec(spec);

function stream(ids: number[]): string[] {
  const decoder = tokenizer.createStreamDecoder();
  return [...ids.map((id) => decoder.push(id)), decoder.flush()];
}

describe("incremental detokenizer", () => {
  it("holds back an emoji split across two tokens until it is complete", () => {
    expect(stream([0, 1])).toEqual(["", "😀", ""]);
  });

  it("holds back across three tokens and releases what follows the character", () => {
    expect(stream([2, 3, 4, 7])).toEqual(["", "", "😀a", "hi", ""]);
  });

  it("emits a two-byte character when its second byte arrives with more text", () => {
    expect(stream([7, 5, 6])).toEqual(["hi", "", "é!", ""]);
  });

  it("turns an unfinished character at the end into U+FFFD on flush", () => {
    expect(stream([7, 0])).toEqual(["hi", "", "\ufffd"]);
  });

  it("agrees with a one-shot decode", () => {
    const ids = [7, 2, 3, 4, 5, 6, 0, 1];
    expect(stream(ids).join("")).toBe(tokenizer.decode(ids));
    expect(tokenizer.decode(ids)).toBe("hi😀aé!😀");
  });
});
