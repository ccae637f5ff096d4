import { findMetadata, getString, getStringArray, getNumberArray } from "./gguf/metadata.js";
import type { GgufFile } from "./gguf/types.js";
import type { TokenizerSpec } from "../runtime/artifact/index.js";

function optionalId(file: GgufFile, key: string): number | null {
  const v = findMetadata(file, key);
  return typeof v === "number" ? v : null;
}

function optionalBool(file: GgufFile, key: string, fallback: boolean): boolean {
  const v = findMetadata(file, key);
  return typeof v === "boolean" ? v : fallback;
}

/** The tokenizer exactly as the GGUF describes it (`tokenizer.ggml.*`). */
export function tokenizerSpec(file: GgufFile): TokenizerSpec {
  const model = getString(file, "tokenizer.ggml.model");
  const tokens = getStringArray(file, "tokenizer.ggml.tokens");
  return {
    model,
    pre: getString(file, "tokenizer.ggml.pre", "default"),
    tokens,
    tokenTypes: getNumberArray(file, "tokenizer.ggml.token_type", tokens.map(() => 1)),
    merges: getStringArray(file, "tokenizer.ggml.merges", []),
    bosId: optionalId(file, "tokenizer.ggml.bos_token_id"),
    eosId: optionalId(file, "tokenizer.ggml.eos_token_id"),
    eotId: optionalId(file, "tokenizer.ggml.eot_token_id"),
    padId: optionalId(file, "tokenizer.ggml.padding_token_id"),
    unkId: optionalId(file, "tokenizer.ggml.unknown_token_id"),
    // llama.cpp's defaults: SentencePiece vocabularies add BOS, byte-level BPE ones do not.
    addBos: optionalBool(file, "tokenizer.ggml.add_bos_token", model === "llama"),
    addEos: optionalBool(file, "tokenizer.ggml.add_eos_token", false),
    addSpacePrefix: optionalBool(file, "tokenizer.ggml.add_space_prefix", model === "llama"),
  };
}

export function chatTemplate(file: GgufFile): string | null {
  const v = findMetadata(file, "tokenizer.chat_template");
  return typeof v === "string" ? v : null;
}
