// The vendored Phi-3 vocabulary against the expectations llama.cpp's own tokenizer test ships with it
// (models/ggml-vocab-phi-3.gguf.inp/.out, written by Hugging Face's tokenizer): no llama.cpp needed.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { readGguf } from "../../../../src/compiler/gguf/index.js";
import { tokenizerSpec } from "../../../../src/compiler/tokenizer-spec.js";
import { Tokenizer } from "../../../../src/runtime/text/tokenizer.js";

const VOCAB = join(import.meta.dirname, "../../../fixtures/vocab/ggml-vocab-phi-3.gguf");

/** llama.cpp's test-tokenizer-0 format: inputs separated by a marker line, one line of ids per input. */
function referenceCases(): Array<{ text: string; ids: number[] }> {
  const inputs = readFileSync(`${VOCAB}.inp`, "utf8").split("\n__ggml_vocab_test__\n");
  const outputs = readFileSync(`${VOCAB}.out`, "utf8").split("\n");
  return inputs.map((text, i) => ({ text, ids: outputs[i].trim() === "" ? [] : outputs[i].trim().split(" ").map(Number) }));
}

describe("SentencePiece tokenizer on llama.cpp's reference cases (Phi-3 vocabulary)", () => {
  it("gives the reference ids for every case, and detokenizes back", async () => {
    const tokenizer = Tokenizer.fromSpec(tokenizerSpec(await readGguf(VOCAB)));
    const cases = referenceCases();
    expect(cases.length).toBeGreaterThan(30);
    for (const { text, ids } of cases) {
      expect(tokenizer.encode(text), JSON.stringify(text)).toEqual(ids);
      expect(tokenizer.detokenize(ids), JSON.stringify(text)).toBe(text);
    }
  });
});
