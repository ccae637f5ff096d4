import { TEXT_GRAPH as IO, slidingCacheCapacity } from "../../runtime/artifact/index.js";
import { findMetadata, getNumber } from "../gguf/metadata.js";
import type { GgufFile } from "../gguf/types.js";
import { architectureName, decoderHyper } from "../hyper.js";
import { type Architecture, decoderTensors, layerNeeds, mergeNeeds, type TensorNeeds } from "./architecture.js";
import { cachedAttention, qkNorms, qkvProjection, selfAttentionTensors } from "./blocks/attention.js";
import { type BlockContext, scalar } from "./blocks/context.js";
import { explicitDeviceAttention } from "./blocks/device-io.js";
import { type DecoderHyper, declareTextIo, emitLogits, finalNormed, lmHead, tokenEmbedding } from "./blocks/decoder.js";
import { project } from "./blocks/linear.js";
import { gatedMlp, gatedMlpTensors } from "./blocks/mlp.js";
import { rmsNorm, skipRmsNorm } from "./blocks/norm.js";
import { applyRotary, describeRope, type RopeSpec, rotaryCaches } from "./blocks/rotary.js";
import { slidingWindowMasks, type WindowMasks } from "./blocks/sliding-window.js";

/** Gemma 2 and 3's hyperparameters: the decoder's, plus soft-caps, the sliding window and the local layers' rotary. */
export interface GemmaHyper extends DecoderHyper {
  /** Multiplies Q.K before the soft-cap and softmax: 1/sqrt(head_dim), or 1/sqrt(hidden/heads) for the 27B models (as llama.cpp decides). */
  queryScale: number;
  /** Attention logit soft-cap (Gemma 2: `attn_logit_softcapping`, default 50); absent for none. */
  attentionSoftcap?: number;
  /** Final logit soft-cap (`final_logit_softcapping`; Gemma 2 default 30, Gemma 3 none); absent for none. */
  finalSoftcap?: number;
  /** Positions a sliding-window layer attends to, itself included (`attention.sliding_window`); 0 when no layer slides. */
  window: number;
  /** Per layer, whether it is a sliding-window ("local") layer. */
  local: boolean[];
  /** The rotary of the local layers (their own base, `rope.freq_base_swa`). */
  localRope: RopeSpec;
}

/** What tells Gemma 2 and Gemma 3 apart when their hyperparameters are read. */
export interface GemmaVariant {
  /** Layer count of the family's 27B model, whose query scale llama.cpp takes from hidden/heads instead of head_dim. */
  layers27b: number;
  /** Default period of the local/global pattern: layer l is local when l % period < period - 1. */
  period: number;
  /** Window when the file declares none (Gemma 2: 4096); undefined: no layer slides (Gemma 3). */
  defaultWindow?: number;
  /** Default attention and final soft-caps (Gemma 2: 50 and 30). */
  attentionSoftcap?: number;
  finalSoftcap?: number;
  /** The local layers' rotary base when `rope.freq_base_swa` is absent: "global" (Gemma 2) or a number (Gemma 3: 10000). */
  localBase: "global" | number;
  /** Whether local layers keep the global rotary's scaling (Gemma 2) or rotate unscaled (Gemma 3). */
  localScaled: boolean;
}

function scalarNumber(file: GgufFile, key: string): number | undefined {
  const value = findMetadata(file, key);
  return typeof value === "number" ? value : typeof value === "bigint" ? Number(value) : undefined;
}

/**
 * Reads a Gemma file's hyperparameters as llama.cpp's loader does (`llama_model_gemma2/3::load_arch_hparams`):
 * a pattern key that is an array is ignored like there, and a soft-cap of 0 means none.
 */
export function gemmaHyper(file: GgufFile, variant: GemmaVariant): GemmaHyper {
  const arch = architectureName(file);
  const key = (k: string) => `${arch}.${k}`;
  const base = decoderHyper(file, { ropeInterleaved: false });
  const declaredWindow = scalarNumber(file, key("attention.sliding_window"));
  const window = declaredWindow !== undefined && declaredWindow > 0 ? declaredWindow : (variant.defaultWindow ?? 0);
  const period = scalarNumber(file, key("attention.sliding_window_pattern")) ?? variant.period;
  const local = Array.from({ length: base.layers }, (_, l) => window > 0 && (period === 0 || l % period < period - 1));
  const softcap = (k: string, fallback?: number) => {
    const v = getNumber(file, key(k), fallback ?? 0);
    return v > 0 ? v : undefined;
  };
  const localTheta = getNumber(file, key("rope.freq_base_swa"), variant.localBase === "global" ? base.rope.theta : variant.localBase);
  const localRope: RopeSpec = variant.localScaled
    ? { ...base.rope, theta: localTheta }
    : { ...base.rope, theta: localTheta, scaling: { ...base.rope.scaling, type: "none", factor: 1 }, attnFactor: 1 };
  const scaleDim = base.layers === variant.layers27b ? base.hidden / base.heads : base.headDim;
  return {
    ...base,
    queryScale: Math.fround(1 / Math.fround(Math.sqrt(scaleDim))),
    attentionSoftcap: softcap("attn_logit_softcapping", variant.attentionSoftcap),
    finalSoftcap: softcap("final_logit_softcapping", variant.finalSoftcap),
    window,
    local,
    localRope,
    ...(local.some((l) => l) ? { slidingWindow: { window, layers: local.flatMap((l, i) => (l ? [i] : [])) } } : {}),
  };
}

/** The tensors of one Gemma layer: norms before and after attention and FFN, attention (with Q/K norms in Gemma 3), GeGLU MLP. */
export function gemmaLayerTensors(layer: number, qkNormEps?: number): TensorNeeds {
  const p = `blk.${layer}`;
  const norms = ["attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"].map((n) => `${p}.${n}.weight`);
  return mergeNeeds({ required: norms, optional: [] }, selfAttentionTensors(layer, qkNormEps === undefined ? {} : { qkNormEps }), gatedMlpTensors(layer));
}

export function gemmaTensors(h: GemmaHyper, qkNorm: boolean): TensorNeeds {
  return mergeNeeds(
    decoderTensors(),
    layerNeeds(h.layers, (l) => gemmaLayerTensors(l, qkNorm ? h.rmsEps : undefined)),
  );
}

/** The rotary caches and window masks of one kind of layer. */
interface LayerKind {
  rope: RopeSpec;
  caches: [string, string];
  masks?: WindowMasks;
}

/** Gemma's attention sub-layer: QKV, Q/K head norms (Gemma 3), rotary, soft-capped attention over the cache (windowed on local layers), output projection. */
async function gemmaAttention(ctx: BlockContext, h: GemmaHyper, layer: number, x: string, kind: LayerKind, qkNorm: boolean): Promise<string> {
  // The query scale commutes with rotary, so it goes into the Q rows (or, after a Q norm, into its gamma).
  let qkv = await qkvProjection(ctx, layer, x, h, qkNorm ? 1 : h.queryScale);
  if (qkNorm) qkv = await qkNorms(ctx, layer, qkv, h, h.rmsEps, h.queryScale);
  const q = applyRotary(ctx, qkv.q, IO.positionIds, h.heads, h.headDim, kind.caches, kind.rope);
  const k = applyRotary(ctx, qkv.k, IO.positionIds, h.kvHeads, h.headDim, kind.caches, kind.rope);
  const mixed = cachedAttention(ctx, layer, q, k, qkv.v, h, {
    ...(h.attentionSoftcap !== undefined ? { softcap: h.attentionSoftcap } : {}),
    ...(kind.masks ? { window: kind.masks } : {}),
  });
  return project(ctx, mixed, `blk.${layer}.attn_output.weight`, `blk.${layer}.attn_output`);
}

/** cap * tanh(x / cap), as llama.cpp's scale-tanh-scale. */
function softcapped(ctx: BlockContext, x: string, cap: number): string {
  const g = ctx.g;
  return g.op("Mul", [g.op("Tanh", [g.op("Mul", [x, scalar(ctx, Math.fround(1 / cap))])]), scalar(ctx, cap)]);
}

/**
 * The Gemma 2/3 decoder: embeddings times sqrt(hidden); per layer x += post_attention_norm(attn(attn_norm(x)))
 * and x += post_ffw_norm(geglu(ffn_norm(x))); output_norm, the tied LM head and the final soft-cap.
 * Gemma's RMS norms compute x * (1 + w), and llama.cpp's converter stores 1 + w: the graph multiplies
 * by the weight as stored. Each residual add is fused into the next pre-norm.
 */
export async function buildGemmaFamily(ctx: BlockContext, h: GemmaHyper, options: { qkNorm: boolean }): Promise<void> {
  const { g, w } = ctx;
  if (h.attentionSoftcap !== undefined)
    explicitDeviceAttention(
      ctx,
      "GroupQueryAttention's soft-cap on WebGPU is further from the CPU graph's scores (3e-3 in a logit on lavapipe) than the explicit attention (3e-6)",
    );
  declareTextIo(ctx, h);
  const norm = async (x: string, name: string) => rmsNorm(ctx, x, name, await w.floats(name), h.rmsEps);
  const global: LayerKind = { rope: h.rope, caches: await rotaryCaches(ctx, h.rope, h.contextLength, "rope") };
  const anyLocal = h.local.some((l) => l);
  const local: LayerKind | null = anyLocal
    ? {
        rope: h.localRope,
        caches: await rotaryCaches(ctx, h.localRope, h.contextLength, "rope_local"),
        masks: slidingWindowMasks(ctx, h.window, h.heads / h.kvHeads),
      }
    : null;

  let residual = g.op("Mul", [await tokenEmbedding(ctx, h), scalar(ctx, Math.fround(Math.sqrt(h.hidden)))]);
  let pending: string | null = null;
  for (let l = 0; l < h.layers; l++) {
    const p = `blk.${l}`;
    const attnNorm = `${p}.attn_norm.weight`;
    let normed: string;
    if (pending === null) normed = await norm(residual, attnNorm);
    else [normed, residual] = skipRmsNorm(ctx, pending, residual, attnNorm, await w.floats(attnNorm), h.rmsEps);
    const attn = await gemmaAttention(ctx, h, l, normed, h.local[l] ? local! : global, options.qkNorm);
    const ffnNorm = `${p}.ffn_norm.weight`;
    const [normed2, residual2] = skipRmsNorm(ctx, await norm(attn, `${p}.post_attention_norm.weight`), residual, ffnNorm, await w.floats(ffnNorm), h.rmsEps);
    residual = residual2;
    pending = await norm(await gatedMlp(ctx, l, normed2, h.ffn, { activation: "gelu_tanh" }), `${p}.post_ffw_norm.weight`);
  }
  const outNorm = "output_norm.weight";
  const finalNorm = finalNormed(ctx, pending!, residual, outNorm, await w.floats(outNorm), h.rmsEps);
  const logits = await lmHead(ctx, finalNorm);
  emitLogits(ctx, h.finalSoftcap !== undefined ? softcapped(ctx, logits, h.finalSoftcap) : logits);
  recordGemmaChoices(ctx, h);
}

function recordGemmaChoices(ctx: BlockContext, h: GemmaHyper): void {
  const locals = h.local.filter((l) => l).length;
  ctx.choices.push(
    {
      what: "rotary",
      choice: `RotaryEmbedding (global layers: ${describeRope(h.rope, h.headDim)}; local layers: ${describeRope(h.localRope, h.headDim)})`,
      exact: true,
      why: "Gemma uses NeoX order unpermuted; local layers have their own base",
    },
    {
      what: "sliding window",
      choice:
        locals > 0
          ? `${locals} of ${h.layers} layers attend to the last ${h.window} positions (masked in the graph; their KV cache is a ring of ${slidingCacheCapacity(h.window)} positions)`
          : "none",
      exact: true,
      why: "llama.cpp's standard SWA: a key at p0 is hidden from a query at p1 when p1 - p0 >= window",
    },
    {
      what: "soft-caps",
      choice: `attention ${h.attentionSoftcap ?? "none"}, final ${h.finalSoftcap ?? "none"}`,
      exact: true,
      why: "cap * tanh(x / cap), as the file declares (or the family's default)",
    },
    {
      what: "query scale",
      choice: `${h.queryScale}`,
      exact: true,
      why: "1/sqrt(head_dim), or 1/sqrt(hidden/heads) for the 27B models, as llama.cpp decides; folded into the Q rows (Q norm gamma in Gemma 3)",
    },
    { what: "embedding scale", choice: `x sqrt(${h.hidden})`, exact: true, why: "Gemma scales its input embeddings; the tied LM head uses them unscaled" },
  );
}

/**
 * Gemma 2: the Gemma decoder with attention logit soft-capping (default 50), final logit
 * soft-capping (default 30), and every other layer (0, 2, 4...) a sliding-window layer (default
 * window 4096) with the same rotary as the global layers unless `rope.freq_base_swa` says otherwise.
 */
export const gemma2: Architecture<GemmaHyper> = {
  name: "gemma2",
  hyper: (file) =>
    gemmaHyper(file, { layers27b: 46, period: 2, defaultWindow: 4096, attentionSoftcap: 50, finalSoftcap: 30, localBase: "global", localScaled: true }),
  tensors: (h) => gemmaTensors(h, false),
  build: (ctx, h) => buildGemmaFamily(ctx, h, { qkNorm: false }),
};
