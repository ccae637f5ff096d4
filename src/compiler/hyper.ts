import { getInteger, getNumber, getString } from "./gguf/metadata.js";
import type { GgufFile } from "./gguf/types.js";
import { findTensor } from "./gguf/reader.js";
import type { LlamaHyper } from "./graph/llama.js";

export class UnsupportedArchitectureError extends Error {
  constructor(readonly architecture: string) {
    super(`architecture "${architecture}" is not supported by kiln's graph builder (supported: ${SUPPORTED.join(", ")})`);
  }
}

const SUPPORTED = ["llama", "qwen2"];

/** Reads the Llama-family hyperparameters from `<arch>.*` metadata. */
export function llamaHyper(file: GgufFile): LlamaHyper {
  const arch = getString(file, "general.architecture");
  if (!SUPPORTED.includes(arch)) throw new UnsupportedArchitectureError(arch);
  const key = (k: string) => `${arch}.${k}`;
  const hidden = getInteger(file, key("embedding_length"));
  const heads = getInteger(file, key("attention.head_count"));
  const embd = findTensor(file, "token_embd.weight");
  return {
    architecture: arch,
    layers: getInteger(file, key("block_count")),
    hidden,
    heads,
    kvHeads: getInteger(file, key("attention.head_count_kv"), heads),
    headDim: getInteger(file, key("attention.key_length"), hidden / heads),
    ffn: getInteger(file, key("feed_forward_length")),
    vocab: getInteger(file, key("vocab_size"), embd ? embd.dims[1] : 0),
    contextLength: getInteger(file, key("context_length")),
    rmsEps: getNumber(file, key("attention.layer_norm_rms_epsilon")),
    ropeTheta: getNumber(file, key("rope.freq_base"), 10000),
    ropeInterleaved: arch === "llama",
  };
}

