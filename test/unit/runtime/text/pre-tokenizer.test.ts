import { describe, expect, it } from "vitest";
import { PreTokenizer, UnsupportedPreTokenizerError } from "../../../../src/runtime/text/pre-tokenizer.js";
import { codepointFlags, CPT_LETTER, CPT_UNDEFINED, CPT_WHITESPACE } from "../../../../src/runtime/text/unicode-flags.js";
import { plain } from "./tiny-vocab.js";

const split = (pre: string, text: string) => new PreTokenizer(pre).split(text).map(plain);
const SAMPLE = "I'VE 12345 words\n\n  x  they're done... (ok)";

// Expected splits are llama.cpp's (the model tests check the same code against llama.cpp itself).
describe("pre-tokenizers per llama.cpp's tokenizer.ggml.pre", () => {
  it("smollm: digits one by one, then GPT-2's rules (case-sensitive contractions)", () => {
    expect(split("smollm", SAMPLE)).toEqual([
      "I",
      "'",
      "VE",
      " ",
      "1",
      "2",
      "3",
      "4",
      "5",
      " words",
      "\n\n ",
      " x",
      " ",
      " they",
      "'re",
      " done",
      "...",
      " (",
      "ok",
      ")",
    ]);
  });

  it("gpt-2: numbers keep their leading space", () => {
    expect(split("gpt-2", SAMPLE)).toEqual(["I", "'", "VE", " 12345", " words", "\n\n ", " x", " ", " they", "'re", " done", "...", " (", "ok", ")"]);
  });

  it("llama3: case-insensitive contractions, 3-digit groups, newline runs on their own", () => {
    expect(split("llama3", SAMPLE)).toEqual(["I", "'VE", " ", "123", "45", " words", "\n\n", " ", " x", " ", " they", "'re", " done", "...", " (", "ok", ")"]);
    expect(split("llama-bpe", SAMPLE)).toEqual(split("llama3", SAMPLE));
  });

  it("qwen2: like llama3 but single digits", () => {
    expect(split("qwen2", SAMPLE)).toEqual([
      "I",
      "'VE",
      " ",
      "1",
      "2",
      "3",
      "4",
      "5",
      " words",
      "\n\n",
      " ",
      " x",
      " ",
      " they",
      "'re",
      " done",
      "...",
      " (",
      "ok",
      ")",
    ]);
  });

  it("default: punctuation runs first, through llama.cpp's general regex path", () => {
    expect(split("default", SAMPLE)).toEqual([
      "I",
      "'",
      "VE",
      " ",
      "123",
      "45",
      " words",
      "\n\n ",
      " x",
      " ",
      " they",
      "'",
      "re",
      " done",
      "...",
      " ",
      "(",
      "ok",
      ")",
    ]);
  });

  it("splits whitespace before a word the way llama.cpp's \\s+(?!\\S) does", () => {
    expect(split("gpt-2", "a   b")).toEqual(["a", "  ", " b"]);
    expect(split("gpt-2", "a   ")).toEqual(["a", "   "]);
  });

  it("refuses names llama.cpp does not know, and ones kiln has not ported", () => {
    expect(() => new PreTokenizer("nonsense")).toThrow(UnsupportedPreTokenizerError);
    expect(() => new PreTokenizer("kimi-k2")).toThrow(UnsupportedPreTokenizerError);
  });
});

describe("code point classes follow llama.cpp's Unicode 15.1 table, not the host ICU", () => {
  it("uses llama.cpp's whitespace set (NEL yes, BOM no)", () => {
    expect(codepointFlags(0x85) & CPT_WHITESPACE).toBeTruthy();
    expect(codepointFlags(0xfeff) & CPT_WHITESPACE).toBe(0);
  });

  it("treats code points assigned after Unicode 15.1 as undefined", () => {
    expect(codepointFlags(0x1fae9)).toBe(CPT_UNDEFINED); // an emoji new in Unicode 16
    expect(codepointFlags(0x2ebf0)).toBe(CPT_LETTER); // CJK extension I, new in 15.1
  });

  it("agrees with the host's \\p{..} wherever both know the code point", () => {
    const classes: Array<[number, RegExp]> = [
      [0x02, /\p{N}/u],
      [0x04, /\p{L}/u],
      [0x08, /\p{Z}/u],
      [0x10, /\p{M}/u],
      [0x20, /\p{P}/u],
      [0x40, /\p{S}/u],
      [0x80, /\p{C}/u],
    ];
    const mismatches: string[] = [];
    for (let cp = 0; cp < 0x110000; cp += 7) {
      const flags = codepointFlags(cp) & 0xff;
      if (flags === CPT_UNDEFINED || /\p{Cn}/u.test(String.fromCodePoint(cp))) continue;
      const host = classes.find(([, re]) => re.test(String.fromCodePoint(cp)))?.[0];
      if (host !== flags) mismatches.push(cp.toString(16));
    }
    expect(mismatches).toEqual([]);
  });
});
