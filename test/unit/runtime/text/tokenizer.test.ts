import { describe, expect, it } from "vitest";
import { Tokenizer, TokenizerError, unsupportedTokenizer } from "../../../../src/runtime/text/tokenizer.js";
import { plain, tinySpec } from "./tiny-vocab.js";

const CONTROL = 3;
const USER_DEFINED = 4;
const BYTE = 6;

// ids: 0 <|im_start|> (control), 1 <|im_end|> (typed normal, but llama.cpp forces end-of-turn texts to
// control), 2 <tool> (user-defined), 3 <|im_start|>x (control, longer), 4 <0x41> (byte), then normal tokens.
const spec = tinySpec({
  extra: [
    { text: "<|im_start|>", type: CONTROL },
    { text: "<|im_end|>", type: 1 },
    { text: "<tool>", type: USER_DEFINED },
    { text: "<|im_start|>x", type: CONTROL },
    { text: "<0x41>", type: BYTE },
  ],
  normal: ["<", "|", ">", "_", "i", "m", "s", "t", "a", "r", "e", "n", "d", "o", "l", "x", "h", " ", "\n", "hi", " hi"],
  merges: [
    ["h", "i"],
    [" ", "hi"],
  ],
  bosId: 0,
  eosId: 1,
});
const tokenizer = Tokenizer.fromSpec(spec);
const texts = (ids: number[]) => ids.map((id) => (id < 5 ? tokenizer.tokenText(id) : plain(tokenizer.tokenText(id))));

describe("special-token partitioning (llama.cpp tokenizer_st_partition)", () => {
  it("emits control-token ids for their text when parseSpecial is on", () => {
    expect(texts(tokenizer.encode("<|im_start|>hi<|im_end|>\n", { parseSpecial: true }))).toEqual(["<|im_start|>", "hi", "<|im_end|>", "\n"]);
  });

  it("leaves control-token text as plain text when parseSpecial is off", () => {
    const ids = tokenizer.encode("<|im_end|>", { parseSpecial: false });
    expect(ids).not.toContain(1);
    expect(texts(ids).join("")).toBe("<|im_end|>");
  });

  it("still splits out user-defined tokens when parseSpecial is off, as llama.cpp and HF do", () => {
    expect(texts(tokenizer.encode("hi<tool> hi", { parseSpecial: false }))).toEqual(["hi", "<tool>", " hi"]);
  });

  it("matches the longest special text first", () => {
    expect(texts(tokenizer.encode("<|im_start|>x<|im_start|>", { parseSpecial: true }))).toEqual(["<|im_start|>x", "<|im_start|>"]);
  });

  it("treats end-of-turn texts as control even when the GGUF types them normal", () => {
    expect(tokenizer.isControl(1)).toBe(true);
    expect(tokenizer.isEog(1)).toBe(true);
    expect(tokenizer.isEog(0)).toBe(false);
  });
});

describe("BOS/EOS", () => {
  it("adds them only when addSpecial is requested and the model asks for them", () => {
    const both = Tokenizer.fromSpec({ ...spec, addBos: true, addEos: true });
    expect(both.encode("hi", { addSpecial: true })).toEqual([0, ...both.encode("hi"), 1]);
    expect(both.encode("", { addSpecial: true })).toEqual([0, 1]);
    expect(tokenizer.encode("hi", { addSpecial: true })).toEqual(tokenizer.encode("hi"));
  });

  it("refuses when the model asks for BOS but has none", () => {
    const broken = Tokenizer.fromSpec({ ...spec, addBos: true, bosId: null });
    expect(() => broken.encode("hi", { addSpecial: true })).toThrow(TokenizerError);
  });
});

describe("decoding", () => {
  it("hides control tokens unless asked to render them", () => {
    const ids = tokenizer.encode("<|im_start|>hi<|im_end|>", { parseSpecial: true });
    expect(tokenizer.decode(ids)).toBe("hi");
    expect(tokenizer.decode(ids, { renderSpecial: true })).toBe("<|im_start|>hi<|im_end|>");
  });

  it("always renders user-defined tokens and turns byte tokens into their byte", () => {
    expect(tokenizer.decode([2, 4])).toBe("<tool>A");
  });

  it("rejects ids outside the vocabulary", () => {
    expect(() => tokenizer.decode([9999])).toThrow(TokenizerError);
  });

  it("round-trips text the vocabulary can spell", () => {
    const text = "hi hi\nhi <tool>";
    expect(tokenizer.decode(tokenizer.encode(text))).toBe(text);
  });
});

describe("unsupported inputs", () => {
  it("rejects tokenizer models other than BPE and SentencePiece, and unknown pre-tokenizers", () => {
    expect(() => Tokenizer.fromSpec({ ...spec, model: "bert" })).toThrow(/not supported/);
    expect(() => Tokenizer.fromSpec({ ...spec, pre: "no-such-pre" })).toThrow(/not supported/);
  });

  it("tells without building a tokenizer whether one would load", () => {
    expect(unsupportedTokenizer("gpt2", "qwen2")).toBeNull();
    expect(unsupportedTokenizer("llama", "anything")).toBeNull(); // SentencePiece ignores the pre-tokenizer name
    expect(unsupportedTokenizer("gpt2", "no-such-pre")).toMatch(/not supported/);
    expect(unsupportedTokenizer("bert", "default")).toMatch(/"bert" is not supported/);
  });
});
