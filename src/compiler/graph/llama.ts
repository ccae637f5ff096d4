import { findTensor } from "../gguf/reader.js";
import { getInteger } from "../gguf/metadata.js";
import { decoderHyper } from "../hyper.js";
import { type Architecture, decoderTensors, layerNeeds, mergeNeeds } from "./architecture.js";
import { selfAttention, selfAttentionTensors } from "./blocks/attention.js";
import { type DecoderHyper, preNormDecoder, preNormLayerTensors } from "./blocks/decoder.js";
import { gatedMlp, gatedMlpTensors } from "./blocks/mlp.js";
import { rotaryCaches, rotaryChoice } from "./blocks/rotary.js";

/** Llama 3.1+'s rotary frequency divisors (one tensor shared by every layer). */
const ROPE_FREQS = "rope_freqs.weight";

/**
 * Llama (Llama 2 and 3.x, Mistral 7B, SmolLM2, the DeepSeek-R1 Llama distills): pre-norm decoder,
 * attention with grouped KV heads and interleaved rotary (llama.cpp's converter permutes Q/K rows
 * for it), Llama 3.1+'s `rope_freqs` factors and any declared rope scaling, SwiGLU MLP. Dense files
 * only: a `llama` file with experts (Mixtral) is another entry's.
 */
export const llama: Architecture = {
  name: "llama",
  accepts: (file) => getInteger(file, "llama.expert_count", 0) === 0,
  hyper: (file) => decoderHyper(file, { ropeInterleaved: true, ...(findTensor(file, ROPE_FREQS) ? { ropeFreqFactors: ROPE_FREQS } : {}) }),
  tensors: (h) => mergeNeeds(decoderTensors(), { required: [], optional: [ROPE_FREQS] }, layerNeeds(h.layers, llamaLayerTensors)),
  build: (ctx, h) => buildLlamaFamily(ctx, h, "GGUF llama Q/K rows are permuted for pairwise rotation"),
};

/** The tensors of one Llama-family layer: norms, attention, SwiGLU MLP. */
export function llamaLayerTensors(layer: number) {
  return mergeNeeds(preNormLayerTensors(layer), selfAttentionTensors(layer), gatedMlpTensors(layer));
}

/** Options of {@link buildLlamaFamily}. */
export interface LlamaFamilyOptions {
  /** Per-head Q/K RMS norms before rotary (Qwen3). */
  qkNorm?: boolean;
}

/** The Llama-family graph every pre-norm SwiGLU architecture here shares; `rotaryWhy` explains its rotary order. */
export async function buildLlamaFamily(
  ctx: Parameters<Architecture["build"]>[0],
  h: DecoderHyper,
  rotaryWhy: string,
  options: LlamaFamilyOptions = {},
): Promise<void> {
  const caches = await rotaryCaches(ctx, h.rope, h.contextLength);
  const attentionOptions = options.qkNorm ? { qkNormEps: h.rmsEps } : {};
  await preNormDecoder(ctx, h, {
    attention: (layer, x) => selfAttention(ctx, layer, x, h, h.rope, caches, attentionOptions),
    feedForward: (layer, x) => gatedMlp(ctx, layer, x, h.ffn),
  });
  ctx.choices.push(rotaryChoice(h.rope, h.headDim, rotaryWhy));
}
