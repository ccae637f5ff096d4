import { decoderHyper } from "../hyper.js";
import { type Architecture, decoderTensors, layerNeeds, mergeNeeds } from "./architecture.js";
import { buildLlamaFamily, llamaLayerTensors } from "./llama.js";

/**
 * Qwen2 and Qwen2.5 (and the DeepSeek-R1 Qwen distills): the Llama graph with Q/K/V biases and
 * half-split (NeoX) rotary, since its converter leaves Q/K rows unpermuted.
 */
export const qwen2: Architecture = {
  name: "qwen2",
  hyper: (file) => decoderHyper(file, { ropeInterleaved: false }),
  tensors: (h) => mergeNeeds(decoderTensors(), layerNeeds(h.layers, llamaLayerTensors)),
  build: (ctx, h) => buildLlamaFamily(ctx, h, "architecture uses NeoX order unpermuted"),
};
