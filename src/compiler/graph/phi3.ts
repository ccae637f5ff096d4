import { findTensor } from "../gguf/reader.js";
import { getInteger } from "../gguf/metadata.js";
import type { GgufFile } from "../gguf/types.js";
import { decoderHyper } from "../hyper.js";
import { type Architecture, decoderTensors, layerNeeds } from "./architecture.js";
import type { DecoderHyper } from "./blocks/decoder.js";
import { buildLlamaFamily, llamaLayerTensors } from "./llama.js";

const LONG = "rope_factors_long.weight";
const SHORT = "rope_factors_short.weight";

/** Phi-3's hyperparameters: the Llama family's, plus the sliding window its file declares. */
export interface Phi3Hyper extends DecoderHyper {
  /** `phi3.attention.sliding_window`, 0 when absent: recorded, not applied (see {@link phi3}). */
  declaredWindow: number;
}

/**
 * LongRoPE (Phi-3.5, Phi-3 128k): llama.cpp picks the long factors when the context it serves is
 * beyond the original one (`rope.scaling.original_context_length`), the short ones otherwise. kiln
 * serves up to the model's context, so it takes the long ones whenever that context is longer.
 */
function longRopeFactors(file: GgufFile, contextLength: number): string | undefined {
  if (!findTensor(file, LONG) && !findTensor(file, SHORT)) return undefined;
  const original = getInteger(file, "phi3.rope.scaling.original_context_length", contextLength);
  const wanted = contextLength > original ? LONG : SHORT;
  if (!findTensor(file, wanted))
    throw new Error(`the file has LongRoPE factors but no ${wanted}, which a context of ${contextLength} (original ${original}) needs`);
  return wanted;
}

/**
 * Phi-3, Phi-3.5 and Phi-4 (`phi3`): the Llama-family graph with half-split rotary, Q/K/V in one
 * fused `attn_qkv` and gate/up in one `ffn_up` of 2 x ffn (gate first), LongRoPE factors and their
 * attention factor (`rope.scaling.attn_factor`, multiplying cos and sin) where the file has them.
 * A declared sliding window is not applied: llama.cpp disables Phi's SWA (its converters do not
 * declare the layer pattern), and kiln matches llama.cpp.
 */
export const phi3: Architecture<Phi3Hyper> = {
  name: "phi3",
  hyper: (file) => {
    const contextLength = getInteger(file, "phi3.context_length");
    const factors = longRopeFactors(file, contextLength);
    return {
      ...decoderHyper(file, { ropeInterleaved: false, ...(factors ? { ropeFreqFactors: factors } : {}) }),
      declaredWindow: getInteger(file, "phi3.attention.sliding_window", 0),
    };
  },
  tensors: (h) => {
    const needs = layerNeeds(h.layers, llamaLayerTensors);
    return { required: [...decoderTensors().required, ...needs.required], optional: [...decoderTensors().optional, LONG, SHORT, ...needs.optional] };
  },
  build: async (ctx, h) => {
    await buildLlamaFamily(ctx, h, "architecture uses NeoX order unpermuted");
    if (h.rope.freqFactors) {
      ctx.choices.push({
        what: "LongRoPE",
        choice: `${h.rope.freqFactors}, attention factor ${h.rope.attnFactor}`,
        exact: true,
        why: `llama.cpp's choice for a context of ${h.contextLength} (original ${h.rope.scaling.originalContext}): long factors beyond the original, short within`,
      });
    }
    if (h.declaredWindow > 0) {
      ctx.choices.push({
        what: "sliding window",
        choice: `declared ${h.declaredWindow}, not applied (full attention)`,
        exact: true,
        why: "as llama.cpp, which disables Phi-3's sliding window",
      });
    }
  },
};
