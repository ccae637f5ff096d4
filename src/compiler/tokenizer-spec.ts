import { findMetadata, getString, getStringArray, getNumberArray } from "./gguf/metadata.js";
import type { GgufFile } from "./gguf/types.js";
import type { TokenizerSpec } from "../runtime/artifact/index.js";

/** The id the key holds; null when absent, or (given the vocabulary size) out of range, which llama.cpp ignores. */
function optionalId(file: GgufFile, key: string, vocabSize = Infinity): number | null {
  const v = findMetadata(file, key);
  return typeof v === "number" && v < vocabSize ? v : null;
}

function optionalBool(file: GgufFile, key: string, fallback: boolean): boolean {
  const v = findMetadata(file, key);
  return typeof v === "boolean" ? v : fallback;
}

/**
 * llama.cpp's special-token ids for a SentencePiece vocabulary whose GGUF does not name them
 * (llama_vocab::impl::load): BOS 1, EOS 2, unknown 0.
 */
const SPM_DEFAULT_IDS = { bos: 1, eos: 2, unk: 0 };

/** The keys of the fill-in-the-middle markers' ids: current name, older name. */
const FIM_KEYS = [
  ["fim_pre", "prefix"],
  ["fim_suf", "suffix"],
  ["fim_mid", "middle"],
] as const;

/** The tokenizer exactly as the GGUF describes it (`tokenizer.ggml.*`), with llama.cpp's defaults for absent keys. */
export function tokenizerSpec(file: GgufFile): TokenizerSpec {
  const model = getString(file, "tokenizer.ggml.model");
  const tokens = getStringArray(file, "tokenizer.ggml.tokens");
  const spm = model === "llama";
  const id = (key: string, spmDefault: number) => optionalId(file, key, tokens.length) ?? (spm ? spmDefault : null);
  const name = findMetadata(file, "general.name");
  const fimIds = FIM_KEYS.map(
    ([key, old]) => optionalId(file, `tokenizer.ggml.${key}_token_id`, tokens.length) ?? optionalId(file, `tokenizer.ggml.${old}_token_id`, tokens.length),
  );
  return {
    model,
    pre: getString(file, "tokenizer.ggml.pre", "default"),
    tokens,
    tokenTypes: getNumberArray(
      file,
      "tokenizer.ggml.token_type",
      tokens.map(() => 1),
    ),
    merges: getStringArray(file, "tokenizer.ggml.merges", []),
    ...(spm ? { scores: getNumberArray(file, "tokenizer.ggml.scores", []) } : {}),
    ...(typeof name === "string" ? { modelName: name } : {}),
    ...(fimIds.some((id) => id !== null) ? { fimIds: fimIds as [number | null, number | null, number | null] } : {}),
    bosId: id("tokenizer.ggml.bos_token_id", SPM_DEFAULT_IDS.bos),
    eosId: id("tokenizer.ggml.eos_token_id", SPM_DEFAULT_IDS.eos),
    eotId: optionalId(file, "tokenizer.ggml.eot_token_id"),
    padId: optionalId(file, "tokenizer.ggml.padding_token_id"),
    unkId: id("tokenizer.ggml.unknown_token_id", SPM_DEFAULT_IDS.unk),
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
