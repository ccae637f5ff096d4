// Oracle: llama.cpp itself, through node-llama-cpp's native addon. `model.tokenize(text, special)` calls
// common_tokenize(vocab, text, add_special=false, parse_special=special) and `model.detokenize` calls
// llama_detokenize, i.e. the exact code kiln's tokenizer re-implements, at the llama.cpp version
// node-llama-cpp bundles. The model is loaded vocab-only: no weights are needed to tokenize.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getLlama, type Llama, type LlamaModel, type Token } from "node-llama-cpp";
import { BYTE_TO_CHAR } from "../../../../src/runtime/text/byte-level.js";
import { Tokenizer } from "../../../../src/runtime/text/tokenizer.js";
import { parityStrings, seededRandom } from "../../../fixtures/text/parity-strings.js";
import { specFromGguf, TEST_GGUF } from "../../../fixtures/text/spec-from-gguf.js";

/** node-llama-cpp brands token ids; ours are plain numbers. */
const asTokens = (ids: number[]) => ids as unknown as Token[];

/** What llama.cpp sees for a JS string: Node converts lone surrogates to U+FFFD on the way in. */
const wellFormed = (s: string) => s.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, "\ufffd");

describe("tokenizer parity with llama.cpp on SmolLM2-135M-Instruct", () => {
  const strings = parityStrings(400);
  // Whole documents too, so splitting across many words, lines and special tokens is covered at once.
  const inputs = [...strings, strings.join(" "), strings.join("\n"), strings.join("")];
  /**
   * SmolLM2's vocabulary has no token for a few bytes (e.g. the control characters 0x04, 0x06, 0x13,
   * 0x14, 0x16, 0x1d); llama.cpp silently drops them, and so does kiln (the ids above match), so text
   * containing them cannot come back unchanged.
   */
  let vocabulary: Set<string>;
  const spellable = (s: string) => [...Buffer.from(wellFormed(s), "utf8")].every((b) => vocabulary.has(BYTE_TO_CHAR[b]));
  let llama: Llama;
  let model: LlamaModel;
  let tokenizer: Tokenizer;

  beforeAll(async () => {
    llama = await getLlama({ gpu: false });
    model = await llama.loadModel({ modelPath: TEST_GGUF, vocabOnly: true });
    const spec = await specFromGguf(TEST_GGUF);
    tokenizer = Tokenizer.fromSpec(spec);
    vocabulary = new Set(spec.tokens);
  });

  afterAll(async () => {
    await model?.dispose();
    await llama?.dispose();
  });

  it(`has at least 200 distinct test strings`, () => {
    expect(new Set(strings).size).toBeGreaterThanOrEqual(200);
  });

  for (const parseSpecial of [true, false]) {
    it(`encodes all strings to llama.cpp's ids (parseSpecial=${parseSpecial})`, () => {
      const mismatches: string[] = [];
      for (const s of inputs) {
        const ours = tokenizer.encode(s, { parseSpecial });
        const theirs = Array.from(model.tokenize(s, parseSpecial));
        if (JSON.stringify(ours) !== JSON.stringify(theirs)) {
          mismatches.push(`${JSON.stringify(s)}\n  kiln:  ${JSON.stringify(ours)}\n  llama: ${JSON.stringify(theirs)}`);
        }
      }
      expect(mismatches.slice(0, 5).join("\n"), `${mismatches.length} of ${inputs.length} differ`).toBe("");
    });
  }

  it("never counts more tokens for a text than it encodes to, before encoding it (bytes the vocabulary cannot spell aside)", () => {
    const texts = [...inputs.filter(spellable), " ".repeat(5000), "=".repeat(3000), "😀".repeat(500), "<|im_start|>".repeat(50)];
    for (const s of texts) {
      for (const parseSpecial of [true, false])
        expect(tokenizer.fewestTokens(s.length), JSON.stringify(s.slice(0, 40))).toBeLessThanOrEqual(tokenizer.encode(s, { parseSpecial }).length);
    }
    // Not a vacuous bound: 5,000 blanks take at least a few dozen tokens.
    expect(tokenizer.fewestTokens(5000)).toBeGreaterThan(20);
  });

  it("decodes to the same text as llama.cpp", () => {
    for (const s of inputs) {
      for (const parseSpecial of [true, false]) {
        const ids = tokenizer.encode(s, { parseSpecial });
        expect(tokenizer.decode(ids, { renderSpecial: true }), JSON.stringify(s)).toBe(model.detokenize(asTokens(ids), true));
        expect(tokenizer.decode(ids), JSON.stringify(s)).toBe(model.detokenize(asTokens(ids), false));
      }
    }
  });

  it("round-trips every string the vocabulary can spell", () => {
    let checked = 0;
    for (const s of strings.filter(spellable)) {
      expect(tokenizer.decode(tokenizer.encode(s)), JSON.stringify(s)).toBe(wellFormed(s));
      const ids = tokenizer.encode(s, { parseSpecial: true });
      expect(tokenizer.decode(ids, { renderSpecial: true }), JSON.stringify(s)).toBe(wellFormed(s));
      checked++;
    }
    expect(checked).toBeGreaterThanOrEqual(200);
  });

  it("streams the same text one token at a time, never emitting a broken character", () => {
    let heldBack = 0;
    for (const s of strings.filter(spellable)) {
      const expected = wellFormed(s);
      const stream = tokenizer.createStreamDecoder({ renderSpecial: true });
      const deltas = tokenizer.encode(s, { parseSpecial: true }).map((id) => stream.push(id));
      heldBack += deltas.filter((d) => d === "").length;
      deltas.push(stream.flush());
      if (!expected.includes("\ufffd")) {
        for (const d of deltas) expect(d, JSON.stringify(s)).not.toContain("\ufffd");
      }
      expect(deltas.join("")).toBe(expected);
    }
    expect(heldBack, "some tokens end mid-character and must be held back").toBeGreaterThan(0);
  });

  it("agrees on special ids, BOS/EOS policy, control tokens and end-of-generation tokens", () => {
    expect(tokenizer.bosId).toBe(model.tokens.bos);
    expect(tokenizer.eosId).toBe(model.tokens.eos);
    expect(tokenizer.addBos).toBe(model.tokens.shouldPrependBosToken);
    expect(tokenizer.addEos).toBe(model.tokens.shouldAppendEosToken);
    const differences: number[] = [];
    for (let id = 0; id < tokenizer.vocabSize; id++) {
      const same =
        tokenizer.isEog(id) === model.isEogToken(id as unknown as Token) &&
        tokenizer.isControl(id) === model.getTokenAttributes(id as unknown as Token).control;
      if (!same) differences.push(id);
    }
    expect(differences).toEqual([]);
  });

  it("tokenizes a 2,000-token text in a few milliseconds", () => {
    // Random letter strings, so almost every word misses the word cache and is really merged.
    const document = (seed: number) => {
      const rand = seededRandom(seed);
      const word = () => Array.from({ length: 3 + Math.floor(rand() * 7) }, () => String.fromCharCode(97 + Math.floor(rand() * 26))).join("");
      return Array.from({ length: 1200 }, word).join(" ");
    };
    for (let seed = 0; seed < 3; seed++) tokenizer.encode(document(1000 + seed)); // warm the JIT
    const timings: number[] = [];
    for (let seed = 0; seed < 5; seed++) {
      const text = document(seed * 17);
      const started = performance.now();
      const ids = tokenizer.encode(text);
      timings.push(performance.now() - started);
      expect(ids.length).toBeGreaterThan(2000);
    }
    const median = timings.sort((a, b) => a - b)[2]; // the median hides a one-off GC pause
    expect(median).toBeLessThan(50); // typically ~5 ms; the bound only catches an accidental O(n^2)
  });
});
