import type { Architecture } from "./architecture.js";
import { buildGemmaFamily, type GemmaHyper, gemmaHyper, gemmaTensors } from "./gemma2.js";

/**
 * Gemma 3 (its text part): the Gemma 2 decoder without attention soft-capping, with an RMS norm of
 * each Q and K head before rotary, five sliding-window layers to one global layer (layer l is local
 * when l % 6 < 5) when the file declares a window, and local layers rotating with their own base
 * (`rope.freq_base_swa`, default 10000) and no context scaling, while global layers use
 * `rope.freq_base` and the file's scaling. A final soft-cap applies only when the file declares one.
 */
export const gemma3: Architecture<GemmaHyper> = {
  name: "gemma3",
  hyper: (file) => gemmaHyper(file, { layers27b: 62, period: 6, localBase: 10000, localScaled: false }),
  tensors: (h) => gemmaTensors(h, true),
  build: async (ctx, h) => {
    await buildGemmaFamily(ctx, h, { qkNorm: true });
    ctx.choices.push({
      what: "q/k norms",
      choice: "per-head RMS norm before rotary, the query scale folded into the Q norm's gamma",
      exact: true,
      why: "a scale in the Q rows would be undone by the norm",
    });
  },
};
