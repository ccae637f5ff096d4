// Oracle: llama.cpp itself (node-llama-cpp's native addon, vocab-only models), as in
// tokenizer-parity.test.ts, for SentencePiece-style vocabularies (tokenizer.ggml.model "llama").
// Three vocabularies, none from a model hub:
// - Phi-3's, vendored from llama.cpp's own tokenizer tests (test/fixtures/vocab/, MIT): the real
//   32,064 pieces and scores of the Llama 2 family, a space prefix, and the RSTRIP rule llama.cpp
//   applies to a model named Phi-3;
// - a Gemma-shaped one (no space prefix, <start_of_turn>/<end_of_turn> control tokens, user-defined
//   tokens) and a Mistral-v0.3-shaped one (768 control tokens such as [INST] and [TOOL_CALLS] before
//   the bytes), written by test/fixtures/vocab/spm-vocab.ts.
// The spec kiln tokenizes with comes from kiln's own GGUF reader and compiler (tokenizer-spec.ts).
//
// Breaking a rule makes it fail (encodings that differ from llama.cpp's, of 512 per vocabulary,
// Phi-3 / Gemma-shaped / Mistral-shaped, measured by editing a scratch copy): the space prefix only at
// the start, not after each special token, 25 / 0 / 8; ties between equal scores going to the
// rightmost pair, 46 / 6 / 6; scores ignored (leftmost pair first), 257 / 178 / 190; Phi-3's RSTRIP
// rule left out, 6 / 0 / 0; a space prefix although the GGUF says none, 0 / 506 / 0.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { getLlama, type Llama, type LlamaModel, type Token } from "node-llama-cpp";
import { readGguf } from "../../../../src/compiler/gguf/index.js";
import { tokenizerSpec } from "../../../../src/compiler/tokenizer-spec.js";
import { Tokenizer } from "../../../../src/runtime/text/tokenizer.js";
import { parityStrings } from "../../../fixtures/text/parity-strings.js";
import { SPM_STRINGS } from "../../../fixtures/vocab/spm-strings.js";
import { writeSpmVocab, type SpmFamily } from "../../../fixtures/vocab/spm-vocab.js";

const PHI3_VOCAB = join(import.meta.dirname, "../../../fixtures/vocab/ggml-vocab-phi-3.gguf");

/** node-llama-cpp brands token ids; ours are plain numbers. */
const asTokens = (ids: number[]) => ids as unknown as Token[];

/** What llama.cpp sees for a JS string: Node converts lone surrogates to U+FFFD on the way in. */
const wellFormed = (s: string) => s.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, "\ufffd");

describe("SentencePiece tokenizer parity with llama.cpp", () => {
  const strings = [...SPM_STRINGS, ...parityStrings(150)];
  const inputs = [...strings, strings.join(" "), strings.join("\n")];
  let llama: Llama;
  let dir: string;

  beforeAll(async () => {
    llama = await getLlama({ gpu: false });
    dir = await mkdtemp(join(tmpdir(), "kiln-spm-"));
  });

  afterAll(async () => {
    await llama?.dispose();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const vocabularies: Array<{ name: string; path: () => Promise<string> }> = [
    { name: "Phi-3 (vendored)", path: async () => PHI3_VOCAB },
    ...(["gemma", "mistral"] as SpmFamily[]).map((family) => ({
      name: `${family}-shaped (synthetic)`,
      path: async () => {
        const path = join(dir, `${family}.gguf`);
        await writeSpmVocab(path, family);
        return path;
      },
    })),
  ];

  for (const vocabulary of vocabularies) {
    describe(vocabulary.name, () => {
      let model: LlamaModel;
      let tokenizer: Tokenizer;

      beforeAll(async () => {
        const path = await vocabulary.path();
        model = await llama.loadModel({ modelPath: path, vocabOnly: true });
        tokenizer = Tokenizer.fromSpec(tokenizerSpec(await readGguf(path)));
      });

      afterAll(async () => {
        await model?.dispose();
      });

      for (const parseSpecial of [true, false]) {
        it(`encodes every string to llama.cpp's ids (parseSpecial=${parseSpecial})`, () => {
          const mismatches: string[] = [];
          for (const s of inputs) {
            const ours = tokenizer.encode(s, { parseSpecial });
            const theirs = Array.from(model.tokenize(s, parseSpecial));
            if (JSON.stringify(ours) !== JSON.stringify(theirs)) {
              mismatches.push(`${JSON.stringify(s)}\n  kiln:  ${JSON.stringify(ours)}\n  llama: ${JSON.stringify(theirs)}`);
            }
          }
          expect(mismatches.slice(0, 3).join("\n"), `${mismatches.length} of ${inputs.length} differ`).toBe("");
        });
      }

      it("never counts more tokens for a text than it encodes to, before encoding it", () => {
        for (const s of [...inputs, " ".repeat(3000), "▁".repeat(500)]) {
          for (const parseSpecial of [true, false])
            expect(tokenizer.fewestTokens(s.length), JSON.stringify(s.slice(0, 40))).toBeLessThanOrEqual(tokenizer.encode(s, { parseSpecial }).length);
        }
      });

      it("detokenizes to llama.cpp's text, and round-trips every string", () => {
        for (const s of inputs) {
          for (const parseSpecial of [true, false]) {
            const ids = tokenizer.encode(s, { parseSpecial });
            expect(tokenizer.detokenize(ids, { renderSpecial: true }), JSON.stringify(s)).toBe(model.detokenize(asTokens(ids), true));
            expect(tokenizer.detokenize(ids), JSON.stringify(s)).toBe(model.detokenize(asTokens(ids), false));
          }
          // Byte fallback spells every string, and the space prefix comes off again.
          expect(tokenizer.detokenize(tokenizer.encode(s)), JSON.stringify(s)).toBe(wellFormed(s));
        }
      });

      it("streams byte-fallback characters whole", () => {
        const s = "😀 東京 👍🏽 déjà";
        const stream = tokenizer.createStreamDecoder();
        const deltas = tokenizer.encode(s).map((id) => stream.push(id));
        expect(deltas.filter((d) => d === "").length, "emoji bytes are held back").toBeGreaterThan(0);
        for (const d of deltas) expect(d).not.toContain("\ufffd");
        expect((deltas.join("") + stream.flush()).replace(/^ /, "")).toBe(s);
      });

      it("agrees on special ids, BOS/EOS policy, control and end-of-generation tokens", () => {
        expect(tokenizer.bosId).toBe(model.tokens.bos);
        expect(tokenizer.eosId).toBe(model.tokens.eos);
        expect(tokenizer.addBos).toBe(model.tokens.shouldPrependBosToken);
        expect(tokenizer.addEos).toBe(model.tokens.shouldAppendEosToken);
        const differences: number[] = [];
        for (let id = 0; id < tokenizer.vocabSize; id++) {
          const token = id as unknown as Token;
          if (tokenizer.isEog(id) !== model.isEogToken(token) || tokenizer.isControl(id) !== model.getTokenAttributes(token).control) differences.push(id);
        }
        expect(differences).toEqual([]);
      });
    });
  }
});
