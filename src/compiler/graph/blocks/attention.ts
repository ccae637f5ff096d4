import { TEXT_GRAPH as IO } from "../../../runtime/artifact/index.js";
import { DataType } from "../../onnx/onnx-proto.js";
import { scaleRows } from "../../quant/linear-weight.js";
import { type BlockContext, emulatesLlamaCpp, f16 } from "./context.js";
import { deviceGqa, gqaLengths, markPresentsAsRows } from "./device-io.js";
import { fusedLinear, loadLinears, project } from "./linear.js";
import { headRmsNorm } from "./norm.js";
import { applyRotary, type RopeSpec } from "./rotary.js";
import type { WindowMasks } from "./sliding-window.js";
import type { TensorNeeds } from "../architecture.js";

/** Head geometry of one attention layer. */
export interface AttentionShape {
  heads: number;
  kvHeads: number;
  /** Per-head width of Q, K and V; need not be hidden / heads. */
  headDim: number;
}

/** Q [B, S, heads*headDim], K and V [B, S, kvHeads*headDim], before rotary. */
export interface Qkv {
  q: string;
  k: string;
  v: string;
  /** The three as one [B, S, (heads + 2*kvHeads)*headDim] tensor, where the projection made them so. */
  packed?: string;
}

/** `qkv` split into Q, K and V on first use: a graph that takes the packed tensor never has the Split. */
function splitLazily(ctx: BlockContext, qkv: string, sizes: [number, number, number]): Qkv {
  let parts: string[] | undefined;
  const part = (i: number) => (parts ??= ctx.g.node("Split", [qkv, ctx.g.int64s(sizes)], { outputs: 3, attributes: { axis: -1 } }))[i];
  return {
    get q() {
      return part(0);
    },
    get k() {
      return part(1);
    },
    get v() {
      return part(2);
    },
    packed: qkv,
  };
}

/**
 * The Q, K and V projections of layer `layer`, from separate `attn_q/k/v` tensors (fused into one
 * matmul where their encodings allow) or from one fused `attn_qkv` tensor (Phi-3), with their biases
 * where the file has them. `qScale` is folded into the Q rows and Q bias (1/sqrt(head_dim) here
 * saves a Mul per layer; exact for power-of-two head dims).
 */
export async function qkvProjection(ctx: BlockContext, layer: number, x: string, shape: AttentionShape, qScale: number): Promise<Qkv> {
  const { g, w } = ctx;
  const p = `blk.${layer}`;
  const qDim = shape.heads * shape.headDim;
  const kvDim = shape.kvHeads * shape.headDim;
  let qkv: string;
  let bias: Float32Array | null = null;
  if (w.has(`${p}.attn_qkv.weight`)) {
    const fused = await w.linear(`${p}.attn_qkv.weight`);
    if (fused.n !== qDim + 2 * kvDim)
      throw new Error(`${p}.attn_qkv.weight has ${fused.n} outputs, expected ${qDim + 2 * kvDim} (Q ${qDim} + K ${kvDim} + V ${kvDim})`);
    if (qScale !== 1) scaleRows(fused, qScale, 0, qDim);
    qkv = fusedLinear(ctx, x, [fused], `${p}.qkv`);
    if (w.has(`${p}.attn_qkv.bias`)) bias = Float32Array.from(await w.floats(`${p}.attn_qkv.bias`));
  } else {
    const ws = await loadLinears(ctx, [`${p}.attn_q.weight`, `${p}.attn_k.weight`, `${p}.attn_v.weight`]);
    if (qScale !== 1) scaleRows(ws[0], qScale, 0, ws[0].n);
    qkv = fusedLinear(ctx, x, ws, `${p}.qkv`);
    if (w.has(`${p}.attn_q.bias`)) {
      const [bq, bk, bv] = await Promise.all(["q", "k", "v"].map((t) => w.floats(`${p}.attn_${t}.bias`)));
      bias = new Float32Array(qDim + 2 * kvDim);
      bias.set(bq, 0);
      bias.set(bk, qDim);
      bias.set(bv, qDim + kvDim);
    }
  }
  if (bias) {
    for (let i = 0; i < qDim; i++) bias[i] *= qScale;
    qkv = g.op("Add", [qkv, g.weight(`${p}.qkv.bias`, DataType.FLOAT, [bias.length], bias)]);
  }
  return splitLazily(ctx, qkv, [qDim, kvDim, kvDim]);
}

/** Per-head RMS norms of Q and K (`attn_q_norm` / `attn_k_norm`, Qwen3 and Gemma 3), with `qScale` folded into Q's gamma. */
export async function qkNorms(ctx: BlockContext, layer: number, qkv: Qkv, shape: AttentionShape, eps: number, qScale: number): Promise<Qkv> {
  const p = `blk.${layer}`;
  const qGamma = Float32Array.from(await ctx.w.floats(`${p}.attn_q_norm.weight`), (v) => v * qScale);
  const kGamma = await ctx.w.floats(`${p}.attn_k_norm.weight`);
  return {
    q: headRmsNorm(ctx, qkv.q, shape.heads, `${p}.attn_q_norm.weight`, qGamma, eps),
    k: headRmsNorm(ctx, qkv.k, shape.kvHeads, `${p}.attn_k_norm.weight`, kGamma, eps),
    v: qkv.v,
  };
}

/** Options of {@link cachedAttention}. */
export interface CachedAttentionOptions {
  /**
   * Multiplies the raw Q.K scores (before soft-cap and masks), for a scale that cannot be folded
   * into Q ahead of its fp16 rounding without changing llama.cpp's numerics. Default none (q carries it).
   */
  scoreScale?: number;
  /** Gemma 2's attention logit soft-cap: scores become cap * tanh(scores / cap). Default none. */
  softcap?: number;
  /**
   * A sliding-window layer's masks (`slidingWindowMasks`), added in place of the graph's `past_mask`
   * and `new_mask`: past [B, 1, group*S, ring] over its KV ring, new [B|1, 1, group*S, S]. Default
   * none: every cached position is attended. Such a layer's attention is the explicit one on every
   * target: GroupQueryAttention reads its past in position order, which a ring is not.
   */
  window?: WindowMasks;
  /**
   * The GPU target's GroupQueryAttention only: q and k arrive unrotated and the kernel rotates them
   * with these cos/sin tables ([context, head_dim/2]), `packed` (Q, K and V in one tensor) taking
   * their place where given. Default none (q and k arrive rotated).
   */
  rotary?: { cos: string; sin: string; interleaved: boolean; packed?: string };
}

/**
 * Attention of the new tokens over layer `layer`'s cached keys and values plus their own. q and k
 * are rotated and q already carries the 1/sqrt(head_dim) scale. The KV cache is a graph input that
 * lives in the runtime's memory (keys transposed, [B, kv_heads, head_dim, past]) and the graph
 * returns only the new tokens' keys and values: onnxruntime-node copies every fetched output back
 * to JS, so a GroupQueryAttention "present" output would cost a copy of the whole cache every step.
 * Returns the heads' mixed values [B, S, heads*headDim], before the output projection.
 */
export function cachedAttention(
  ctx: BlockContext,
  layer: number,
  q: string,
  k: string,
  v: string,
  shape: AttentionShape,
  options: CachedAttentionOptions = {},
): string {
  if (deviceGqa(ctx) && options.window === undefined) return groupQueryAttention(ctx, layer, q, k, v, shape, options);
  const g = ctx.g;
  const { heads, kvHeads, headDim } = shape;
  const group = heads / kvHeads;
  // In llama.cpp the cache is fp16 and the query is converted to fp16 for the K dot product.
  const qr = f16(ctx, q);
  const kr = f16(ctx, k);
  // Q as [B, kv_heads, group, S, head_dim] against caches with a group axis of 1: each query head
  // is its own matmul of S rows, broadcast over its KV head's keys. At S = 1 onnxruntime then takes
  // its matrix-vector path, which packs nothing; a group*S-row matmul per KV head packed the whole
  // cache on every call (measured: a third less attention time at 16 sequences, half at 1024 positions).
  const q5 = g.op("Transpose", [g.op("Reshape", [qr, g.int64s([0, 0, kvHeads, group, headDim])])], { attributes: { perm: [0, 2, 3, 1, 4] } });
  const k4 = g.op("Reshape", [kr, g.int64s([0, 0, kvHeads, headDim])]);
  const v4 = g.op("Reshape", [f16(ctx, v), g.int64s([0, 0, kvHeads, headDim])]);
  const kNew = g.op("Transpose", [k4], { attributes: { perm: [0, 2, 1, 3] }, names: [IO.presentKey(layer)] });
  const vNew = g.op("Transpose", [v4], { attributes: { perm: [0, 2, 1, 3] }, names: [IO.presentValue(layer)] });
  const groupAxis = (x: string) => g.op("Unsqueeze", [x, g.int64s([2])]);
  const kNewT = groupAxis(g.op("Transpose", [k4], { attributes: { perm: [0, 2, 3, 1] } }));

  const capped = (raw: string) => {
    const scores = options.scoreScale === undefined ? raw : g.op("Mul", [raw, g.constant(DataType.FLOAT, [], new Float32Array([options.scoreScale]), "f32")]);
    if (options.softcap === undefined) return scores;
    const cap = g.constant(DataType.FLOAT, [], new Float32Array([options.softcap]), "f32");
    return g.op("Mul", [g.op("Tanh", [g.op("Div", [scores, cap])]), cap]);
  };
  const pastMask = options.window === undefined ? groupedMask(ctx, IO.pastMask, 1) : groupedMask(ctx, options.window.past, group);
  const newMask = groupedMask(ctx, options.window?.new ?? IO.newMask, group);
  const scoresPast = g.op("Add", [capped(g.op("MatMul", [q5, groupAxis(IO.pastKey(layer))])), pastMask]);
  const scoresNew = g.op("Add", [capped(g.op("MatMul", [q5, kNewT])), newMask]);
  const probs = g.op("Softmax", [g.op("Concat", [scoresPast, scoresNew], { attributes: { axis: -1 } })], { attributes: { axis: -1 } });
  const [pPast, pNew] = g.node("Split", [f16(ctx, probs), splitSizes(ctx, layer, kNew, options.window?.past ?? IO.pastMask)], {
    outputs: 2,
    attributes: { axis: -1 },
  });
  const mixed = g.op("Add", [g.op("MatMul", [pPast, groupAxis(IO.pastValue(layer))]), g.op("MatMul", [pNew, groupAxis(vNew)])]);
  // [B, kv_heads, group, S, head_dim] -> [B, S, heads * head_dim]
  const m5 = g.op("Transpose", [mixed], { attributes: { perm: [0, 3, 1, 2, 4] } });
  return g.op("Reshape", [m5, g.int64s([0, 0, heads * headDim])]);
}

/**
 * The GPU target's attention as onnxruntime's GroupQueryAttention over the pooled rows
 * (`past_key_t.<l>` / `past_value.<l>`, both [rows, kv_heads, past_span, head_dim] there): the kernel
 * writes the new keys and values into its own copy of the past at each row's length and attends
 * only the valid positions, causally among the new ones. The new keys and values are also returned
 * as `present_key.<l>` / `present_value.<l>` ([B, kv_heads, S, head_dim]) for the pool writes.
 */
function groupQueryAttention(
  ctx: BlockContext,
  layer: number,
  q: string,
  k: string,
  v: string,
  shape: AttentionShape,
  options: CachedAttentionOptions,
): string {
  // GroupQueryAttention's soft-cap on WebGPU moved logits by up to 3e-3 on lavapipe where the explicit attention's stayed within 3e-6 (docs/compiler.md).
  if (options.softcap !== undefined) throw new Error("the webgpu target's GroupQueryAttention builds no soft-capped scores");
  const g = ctx.g;
  const { heads, kvHeads, headDim } = shape;
  const [seqlensK, total] = gqaLengths(ctx);
  const rotary = options.rotary;
  if (rotary) {
    // Its presents are the rows' whole caches with the new keys (rotated) and values written: the pool takes them as they are.
    markPresentsAsRows(ctx);
    const query = rotary.packed ?? q;
    const [mixed] = g.node(
      "GroupQueryAttention",
      [query, rotary.packed ? "" : k, rotary.packed ? "" : v, IO.pastKey(layer), IO.pastValue(layer), seqlensK, total, rotary.cos, rotary.sin],
      {
        domain: "com.microsoft",
        outputs: 3,
        names: [`gqa_${layer}_out`, IO.presentKey(layer), IO.presentValue(layer)],
        attributes: {
          num_heads: heads,
          kv_num_heads: kvHeads,
          scale: { float: options.scoreScale ?? 1 },
          do_rotary: 1,
          rotary_interleaved: rotary.interleaved ? 1 : 0,
        },
      },
    );
    return mixed;
  }
  const perPosition = (x: string, name: string) =>
    g.node("Transpose", [g.op("Reshape", [x, g.int64s([0, 0, kvHeads, headDim])])], { attributes: { perm: [0, 2, 1, 3] }, names: [name] });
  perPosition(k, IO.presentKey(layer));
  perPosition(v, IO.presentValue(layer));
  const [mixed] = g.node("GroupQueryAttention", [q, k, v, IO.pastKey(layer), IO.pastValue(layer), seqlensK, total], {
    domain: "com.microsoft",
    outputs: 3,
    // q arrives scaled by 1/sqrt(head_dim), as for the explicit attention.
    attributes: { num_heads: heads, kv_num_heads: kvHeads, scale: { float: options.scoreScale ?? 1 } },
  });
  return mixed;
}

/**
 * Whether GroupQueryAttention applies `rope` itself: on the GPU target's default attention, for a
 * rotary over the whole head of a multiple of 16 (onnxruntime's CPU kernel, which runs the same
 * graph in the tests, refuses other head sizes).
 */
function rotatesInAttention(ctx: BlockContext, rope: RopeSpec, headDim: number): boolean {
  return deviceGqa(ctx) && rope.dims === headDim && headDim % 16 === 0;
}

/** [past, S] split sizes, per graph, by past mask: layers with the same mask have caches of the same length. */
const splitSizesByMask = new WeakMap<BlockContext, Map<string, string>>();

/**
 * The sizes that split the probabilities into their past and new parts: the cached positions of
 * `layer`'s keys and the step's new ones. Built from the first layer that uses `pastMask` and shared
 * by the rest (three nodes per graph and cache kind rather than per layer).
 */
function splitSizes(ctx: BlockContext, layer: number, kNew: string, pastMask: string): string {
  let sizes = splitSizesByMask.get(ctx);
  if (!sizes) splitSizesByMask.set(ctx, (sizes = new Map()));
  const done = sizes.get(pastMask);
  if (done) return done;
  const g = ctx.g;
  const pastLen = g.op("Shape", [IO.pastKey(layer)], { attributes: { start: 3, end: 4 } });
  const newLen = g.op("Shape", [kNew], { attributes: { start: 2, end: 3 } });
  const out = g.op("Concat", [pastLen, newLen], { attributes: { axis: 0 } });
  sizes.set(pastMask, out);
  return out;
}

/** Masks already given a group axis, per graph, by mask name: every layer shares them. */
const groupedMasks = new WeakMap<BlockContext, Map<string, string>>();

/**
 * An additive mask [X, 1, rows, K] as [X, 1, group, rows/group, K] to match the scores'
 * [B, kv_heads, group, S, K]: rows are laid out (group, S) when `group` > 1, else a single row
 * broadcast over every query. Built once per mask and graph.
 */
function groupedMask(ctx: BlockContext, mask: string, group: number): string {
  let masks = groupedMasks.get(ctx);
  if (!masks) groupedMasks.set(ctx, (masks = new Map()));
  const key = `${mask}/${group}`;
  const done = masks.get(key);
  if (done) return done;
  const g = ctx.g;
  let out: string;
  if (group === 1) {
    out = g.op("Unsqueeze", [mask, g.int64s([2])]);
  } else {
    const head = g.op("Shape", [mask], { attributes: { start: 0, end: 2 } });
    const seq = g.op("Div", [g.op("Shape", [mask], { attributes: { start: 2, end: 3 } }), g.int64s([group])]);
    const keys = g.op("Shape", [mask], { attributes: { start: 3, end: 4 } });
    // allowzero: a step that reads no cache has 0 keys, which must stay 0 (not "copy the input's").
    const dims = g.op("Concat", [head, g.int64s([group]), seq, keys], { attributes: { axis: 0 } });
    out = g.op("Reshape", [mask, dims], { attributes: { allowzero: 1 } });
  }
  masks.set(key, out);
  return out;
}

/** Options of {@link selfAttention}. */
export interface SelfAttentionOptions {
  /** RMS-normalize each head of Q and K before rotary (`attn_q_norm` / `attn_k_norm`) with this epsilon. */
  qkNormEps?: number;
  /** Scale of Q.K (default 1/sqrt(head_dim)). */
  scale?: number;
}

/**
 * The Llama family's attention sub-layer on the normalized input: QKV projections, optional Q/K
 * head norms, rotary, attention over the cache, output projection (`attn_output`).
 */
export async function selfAttention(
  ctx: BlockContext,
  layer: number,
  x: string,
  shape: AttentionShape,
  rope: RopeSpec,
  caches: [string, string],
  options: SelfAttentionOptions = {},
): Promise<string> {
  const scale = options.scale ?? 1 / Math.sqrt(shape.headDim);
  let qkv: Qkv;
  let packed = true;
  let scoreScale: number | undefined;
  if (options.qkNormEps !== undefined) {
    // The scale cannot go into the Q rows (the head norm would undo it). In "fast" numerics it goes
    // into the norm's gamma; llama.cpp applies it to the scores after Q's fp16 rounding, and so does
    // its emulation (the gamma fold measured 2x further from llama.cpp on the Qwen3 case).
    const foldScale = !emulatesLlamaCpp(ctx);
    qkv = await qkNorms(ctx, layer, await qkvProjection(ctx, layer, x, shape, 1), shape, options.qkNormEps, foldScale ? scale : 1);
    scoreScale = foldScale ? undefined : scale;
    packed = false;
  } else {
    qkv = await qkvProjection(ctx, layer, x, shape, scale);
  }
  const scored = scoreScale === undefined ? {} : { scoreScale };
  let mixed: string;
  if (rotatesInAttention(ctx, rope, shape.headDim)) {
    // GroupQueryAttention rotates q and k itself (one kernel for what were two RotaryEmbeddings and a Split).
    const rotary = { cos: caches[0], sin: caches[1], interleaved: rope.interleaved, ...(packed && qkv.packed ? { packed: qkv.packed } : {}) };
    mixed = cachedAttention(ctx, layer, rotary.packed ? "" : qkv.q, rotary.packed ? "" : qkv.k, rotary.packed ? "" : qkv.v, shape, { ...scored, rotary });
  } else {
    const q = applyRotary(ctx, qkv.q, IO.positionIds, shape.heads, shape.headDim, caches, rope);
    const k = applyRotary(ctx, qkv.k, IO.positionIds, shape.kvHeads, shape.headDim, caches, rope);
    mixed = cachedAttention(ctx, layer, q, k, qkv.v, shape, scored);
  }
  return project(ctx, mixed, `blk.${layer}.attn_output.weight`, `blk.${layer}.attn_output`);
}

/** The tensors {@link selfAttention} reads for layer `layer`. */
export function selfAttentionTensors(layer: number, options: SelfAttentionOptions = {}): TensorNeeds {
  const p = `blk.${layer}`;
  const separate = ["q", "k", "v"].map((t) => `${p}.attn_${t}.weight`);
  return {
    required: [
      { oneOf: [[`${p}.attn_qkv.weight`], separate] },
      `${p}.attn_output.weight`,
      ...(options.qkNormEps !== undefined ? [`${p}.attn_q_norm.weight`, `${p}.attn_k_norm.weight`] : []),
    ],
    optional: [`${p}.attn_qkv.bias`, ...["q", "k", "v"].map((t) => `${p}.attn_${t}.bias`)],
  };
}
