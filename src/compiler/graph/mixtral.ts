import { getInteger } from "../gguf/metadata.js";
import type { Architecture } from "./architecture.js";
import { decoderTensors, layerNeeds, mergeNeeds } from "./architecture.js";
import { selfAttention, selfAttentionTensors } from "./blocks/attention.js";
import { type DecoderHyper, preNormDecoder, preNormLayerTensors } from "./blocks/decoder.js";
import { gatedMlp, gatedMlpTensors } from "./blocks/mlp.js";
import { type MoeSpec, moeFeedForward, moeTensors, readMoeSpec } from "./blocks/moe.js";
import { rotaryCaches, rotaryChoice } from "./blocks/rotary.js";
import { llama } from "./llama.js";

/** Mixtral's hyperparameters: Llama's plus the expert routing. */
export interface MixtralHyper extends DecoderHyper {
  moe: MoeSpec;
}

/** The router tensor whose presence makes a layer's feed-forward a mixture of experts (as llama.cpp decides per layer). */
const routerOf = (layer: number) => `blk.${layer}.ffn_gate_inp.weight`;

/**
 * Mixtral 8x7B / 8x22B: GGUF stores them as `llama` with `llama.expert_count` > 0. Llama's
 * attention, rotary and norms; each layer with an `ffn_gate_inp` router has a mixture-of-experts
 * feed-forward (blocks/moe.ts: softmax over the experts, top `expert_used_count`, renormalized
 * weights), any other layer llama's dense SwiGLU MLP.
 */
export const mixtral: Architecture<MixtralHyper> = {
  name: "llama",
  accepts: (file) => getInteger(file, "llama.expert_count", 0) > 0,
  hyper: (file) => {
    const h = llama.hyper(file);
    return { ...h, moe: readMoeSpec(file, h.architecture, h.ffn) };
  },
  tensors: (h) =>
    mergeNeeds(
      decoderTensors(),
      { required: [], optional: ["rope_freqs.weight"] },
      layerNeeds(h.layers, (l) => mergeNeeds(preNormLayerTensors(l), selfAttentionTensors(l), feedForwardTensors(l))),
    ),
  build: async (ctx, h) => {
    const caches = await rotaryCaches(ctx, h.rope, h.contextLength);
    await preNormDecoder(ctx, h, {
      attention: (l, x) => selfAttention(ctx, l, x, h, h.rope, caches),
      feedForward: (l, x) => (ctx.w.has(routerOf(l)) ? moeFeedForward(ctx, l, x, h.moe) : gatedMlp(ctx, l, x, h.ffn)),
    });
    ctx.choices.push(rotaryChoice(h.rope, h.headDim, "GGUF llama Q/K rows are permuted for pairwise rotation"));
  },
};

/** A layer's feed-forward tensors: the experts and their router, or a dense MLP. */
function feedForwardTensors(layer: number) {
  const moe = moeTensors(layer).required as string[];
  const dense = gatedMlpTensors(layer);
  return { required: [{ oneOf: [moe, dense.required as string[]] }], optional: dense.optional };
}
