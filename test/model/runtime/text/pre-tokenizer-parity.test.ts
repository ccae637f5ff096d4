// Oracle: llama.cpp via node-llama-cpp, as in tokenizer-parity.test.ts, but for pre-tokenizers other than
// SmolLM2's. We have no GGUF for each family, so we load SmolLM2's vocabulary with `tokenizer.ggml.pre`
// overridden (llama.cpp's --override-kv mechanism): llama.cpp then splits text with that family's regexes
// and flags (e.g. llama3's ignore_merges), and kiln must produce the same ids from the same vocabulary.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getLlama, type Llama } from "node-llama-cpp";
import type { TokenizerSpec } from "../../../../src/runtime/artifact/index.js";
import { Tokenizer } from "../../../../src/runtime/text/tokenizer.js";
import { parityStrings } from "../../../fixtures/text/parity-strings.js";
import { specFromGguf, TEST_GGUF } from "../../../fixtures/text/spec-from-gguf.js";

/**
 * The required families first, then one name per other distinct regex set llama.cpp has. Names the
 * bundled llama.cpp (node-llama-cpp 3.21.1) does not know yet, such as "ufakzeka" and "spark2_5",
 * cannot be checked here: loading fails, and after a failed load node-llama-cpp's dispose never returns.
 */
const PRE_NAMES = [
  "smollm",
  "gpt-2",
  "llama3",
  "llama-bpe",
  "qwen2",
  "default",
  "qwen35",
  "deepseek-llm",
  "deepseek-coder",
  "deepseek-v3",
  "falcon",
  "starcoder",
  "dbrx",
  "jais-2",
  "bloom",
  "viking",
  "chatglm-bpe",
  "tekken",
  "chameleon",
  "gpt-4o",
  "granite-embed-multi-97m",
  "superbpe",
  "bailingmoe",
  "seed-coder",
  "laguna",
  "exaone-moe",
  "minicpm5",
  "youtu",
];

describe("pre-tokenizer parity with llama.cpp (SmolLM2 vocabulary, pre overridden)", () => {
  const strings = parityStrings(150);
  let llama: Llama;
  let spec: TokenizerSpec;

  beforeAll(async () => {
    llama = await getLlama({ gpu: false });
    spec = await specFromGguf(TEST_GGUF);
  });

  afterAll(async () => {
    await llama?.dispose();
  });

  for (const pre of PRE_NAMES) {
    it(`"${pre}" splits and merges like llama.cpp`, async () => {
      const overrides = { tokenizer: { ggml: { pre } } };
      const model = await llama.loadModel({ modelPath: TEST_GGUF, vocabOnly: true, metadataOverrides: overrides as never });
      try {
        const tokenizer = Tokenizer.fromSpec({ ...spec, pre });
        const mismatches: string[] = [];
        for (const s of strings) {
          for (const parseSpecial of [true, false]) {
            const ours = tokenizer.encode(s, { parseSpecial });
            const theirs = Array.from(model.tokenize(s, parseSpecial));
            if (JSON.stringify(ours) !== JSON.stringify(theirs)) mismatches.push(JSON.stringify(s));
          }
        }
        expect(mismatches.slice(0, 5), `${mismatches.length} of ${strings.length * 2} differ`).toEqual([]);
      } finally {
        await model.dispose();
      }
    });
  }
});
