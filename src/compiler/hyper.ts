import { findMetadata, getInteger, getNumber, getNumberArray, getString } from "./gguf/metadata.js";
import type { GgufFile } from "./gguf/types.js";
import { findTensor } from "./gguf/reader.js";
import type { DecoderHyper } from "./graph/blocks/decoder.js";
import type { RopeScaling, RopeSpec } from "./graph/blocks/rotary.js";

/** The file's `general.architecture` has no graph builder in this kiln. */
export class UnsupportedArchitectureError extends Error {
  constructor(
    readonly architecture: string,
    readonly supported: readonly string[],
    detail?: string,
  ) {
    super(`architecture "${architecture}" is not supported by kiln's graph builder${detail ? `: ${detail}` : ""} (supported: ${supported.join(", ")})`);
    this.name = "UnsupportedArchitectureError";
  }
}

/** A hyperparameter the file declares in a way kiln cannot build (an unknown rope scaling type, say). */
export class UnsupportedHyperparameterError extends Error {
  constructor(key: string, value: unknown, why: string) {
    super(`${key} = ${JSON.stringify(value)}: ${why}`);
    this.name = "UnsupportedHyperparameterError";
  }
}

/** The architecture named by `general.architecture`. */
export function architectureName(file: GgufFile): string {
  return getString(file, "general.architecture");
}

/**
 * The rotary spec from `<arch>.rope.*`, as llama.cpp reads it: `rope.scaling.type` defaults to
 * "linear" with factor 1 (no scaling); "linear" and "longrope" divide every angle by the factor,
 * "yarn" blends per frequency from `rope.scaling.original_context_length`. `freqFactors` names the
 * per-frequency divisors tensor, if the architecture has one in this file.
 */
export function ropeSpec(file: GgufFile, arch: string, headDim: number, contextLength: number, interleaved: boolean, freqFactors?: string): RopeSpec {
  const key = (k: string) => `${arch}.${k}`;
  const declared = getString(file, key("rope.scaling.type"), "linear");
  const factor = getNumber(file, key("rope.scaling.factor"), getNumber(file, key("rope.scale_linear"), 0)) || 1;
  let type: RopeScaling["type"];
  if (declared === "none" || factor === 1) type = "none";
  else if (declared === "linear" || declared === "longrope") type = "linear";
  else if (declared === "yarn") type = "yarn";
  else throw new UnsupportedHyperparameterError(key("rope.scaling.type"), declared, "kiln applies none, linear, longrope and yarn");
  const dims = getInteger(file, key("rope.dimension_count"), headDim);
  if (dims > headDim || dims % 2 !== 0)
    throw new UnsupportedHyperparameterError(key("rope.dimension_count"), dims, `must be even and at most the head dim ${headDim}`);
  return {
    dims,
    theta: getNumber(file, key("rope.freq_base"), 10000),
    interleaved,
    ...(freqFactors ? { freqFactors } : {}),
    scaling: { type, factor, originalContext: getInteger(file, key("rope.scaling.original_context_length"), contextLength) },
    attnFactor: getNumber(file, key("rope.scaling.attn_factor"), 1),
  };
}

/** Options of {@link decoderHyper}. */
export interface DecoderHyperOptions {
  /** Rotate adjacent pairs (GGUF llama's permuted Q/K) rather than NeoX halves. */
  ropeInterleaved: boolean;
  /** The per-frequency rotary divisors tensor of this file, if any (see {@link RopeSpec.freqFactors}). */
  ropeFreqFactors?: string;
}

/** The hyperparameters every decoder architecture shares, from `<arch>.*` metadata. */
export function decoderHyper(file: GgufFile, options: DecoderHyperOptions): DecoderHyper {
  const arch = architectureName(file);
  const key = (k: string) => `${arch}.${k}`;
  const hidden = getInteger(file, key("embedding_length"));
  const heads = getInteger(file, key("attention.head_count"));
  const headDim = getInteger(file, key("attention.key_length"), hidden / heads);
  const valueDim = getInteger(file, key("attention.value_length"), headDim);
  if (valueDim !== headDim)
    throw new UnsupportedHyperparameterError(key("attention.value_length"), valueDim, `kiln's attention needs it equal to attention.key_length (${headDim})`);
  const embd = findTensor(file, "token_embd.weight");
  const contextLength = getInteger(file, key("context_length"));
  return {
    architecture: arch,
    layers: getInteger(file, key("block_count")),
    hidden,
    heads,
    kvHeads: integerOrPerLayer(file, key("attention.head_count_kv"), heads),
    headDim,
    vocab: getInteger(file, key("vocab_size"), embd ? embd.dims[1] : 0),
    contextLength,
    ffn: integerOrPerLayer(file, key("feed_forward_length")),
    rmsEps: getNumber(file, key("attention.layer_norm_rms_epsilon")),
    rope: ropeSpec(file, arch, headDim, contextLength, options.ropeInterleaved, options.ropeFreqFactors),
  };
}

/** A count that some files store per layer (an array): kiln builds uniform layers only, so the values must agree. */
function integerOrPerLayer(file: GgufFile, key: string, fallback?: number): number {
  if (Array.isArray(findMetadata(file, key))) {
    const values = getNumberArray(file, key);
    if (values.some((v) => v !== values[0])) throw new UnsupportedHyperparameterError(key, values, "kiln builds layers of one shape only");
    return values[0];
  }
  return getInteger(file, key, fallback);
}
