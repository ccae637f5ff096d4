import { describe, expect, it } from "vitest";
import type { GgufFile, GgufValue } from "../../../src/compiler/gguf/types.js";
import { tokenizerSpec } from "../../../src/compiler/tokenizer-spec.js";

function gguf(metadata: Record<string, GgufValue>): GgufFile {
  return { path: "test.gguf", version: 3, metadata, tensors: [], alignment: 32, dataOffset: 0, fileSize: 0 };
}

const SPM_TOKENS = ["<unk>", "<s>", "</s>", "\u2581a", "a"];

describe("tokenizerSpec", () => {
  it("records a SentencePiece vocabulary's scores, name and llama.cpp's defaults for absent keys", () => {
    const spec = tokenizerSpec(
      gguf({ "general.name": "Phi3", "tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": SPM_TOKENS, "tokenizer.ggml.scores": [0, 0, 0, -1.5, -2] }),
    );
    expect(spec).toMatchObject({ model: "llama", scores: [0, 0, 0, -1.5, -2], modelName: "Phi3" });
    // llama.cpp: BOS 1, EOS 2, unknown 0, BOS added, a space prefix.
    expect(spec).toMatchObject({ bosId: 1, eosId: 2, unkId: 0, addBos: true, addEos: false, addSpacePrefix: true });
  });

  it("keeps the ids and flags the GGUF gives, and ignores an id outside the vocabulary", () => {
    const spec = tokenizerSpec(
      gguf({
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": SPM_TOKENS,
        "tokenizer.ggml.bos_token_id": 2,
        "tokenizer.ggml.eos_token_id": 99,
        "tokenizer.ggml.add_space_prefix": false,
      }),
    );
    expect(spec).toMatchObject({ bosId: 2, eosId: 2, unkId: 0, addSpacePrefix: false });
  });

  it("leaves byte-level BPE vocabularies as they were: no scores, no defaults for absent ids", () => {
    const spec = tokenizerSpec(gguf({ "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b"], "tokenizer.ggml.merges": ["a b"] }));
    expect(spec.scores).toBeUndefined();
    expect(spec).toMatchObject({ bosId: null, eosId: null, unkId: null, addBos: false, addSpacePrefix: false });
  });

  it("records the fill-in-the-middle ids the GGUF names, by their current or older keys, and nothing when it names none", () => {
    const tokens = ["a", "b", "c", "d"];
    const named = tokenizerSpec(
      gguf({
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.fim_pre_token_id": 1,
        "tokenizer.ggml.suffix_token_id": 2,
        "tokenizer.ggml.fim_mid_token_id": 9,
      }),
    );
    // An id outside the vocabulary is ignored, as llama.cpp ignores it.
    expect(named.fimIds).toEqual([1, 2, null]);
    expect(tokenizerSpec(gguf({ "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": tokens })).fimIds).toBeUndefined();
  });
});
