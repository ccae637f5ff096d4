import { decoderHyper } from "../hyper.js";
import { type Architecture, decoderTensors, layerNeeds, mergeNeeds } from "./architecture.js";
import { selfAttentionTensors } from "./blocks/attention.js";
import { preNormLayerTensors } from "./blocks/decoder.js";
import { gatedMlpTensors } from "./blocks/mlp.js";
import { buildLlamaFamily } from "./llama.js";

/**
 * Qwen3 (dense): Qwen2 without the QKV biases, with an RMS norm of each Q and K head
 * (`attn_q_norm` / `attn_k_norm`, one gamma of head_dim) before rotary, and a head dim that need not
 * be hidden / heads (`attention.key_length`).
 */
export const qwen3: Architecture = {
  name: "qwen3",
  hyper: (file) => decoderHyper(file, { ropeInterleaved: false }),
  tensors: (h) =>
    mergeNeeds(
      decoderTensors(),
      layerNeeds(h.layers, (l) => mergeNeeds(preNormLayerTensors(l), selfAttentionTensors(l, { qkNormEps: h.rmsEps }), gatedMlpTensors(l))),
    ),
  build: async (ctx, h) => {
    await buildLlamaFamily(ctx, h, "architecture uses NeoX order unpermuted", { qkNorm: true });
    ctx.choices.push({
      what: "q/k norms",
      choice: "per-head RMS norm before rotary; 1/sqrt(head_dim) on the scores (llama.cpp numerics) or folded into the Q norm gamma (fast)",
      exact: true,
      why: "a scale in the Q rows would be undone by the norm",
    });
  },
};
