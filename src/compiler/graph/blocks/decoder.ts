import type { ModelShape } from "../../../runtime/artifact/index.js";
import { TEXT_GRAPH as IO } from "../../../runtime/artifact/index.js";
import { DataType } from "../../onnx/onnx-proto.js";
import type { TensorNeeds } from "../architecture.js";
import { foldMinsTo8Bit } from "../../quant/fold-mins.js";
import type { LinearWeight, NbitsWeight } from "../../quant/linear-weight.js";
import { requantizeTo4Bit } from "../../quant/requantize.js";
import { type BlockContext, emulatesLlamaCpp, MS } from "./context.js";
import { buildsForDevice, declareDeviceIo, deviceHidden, deviceWeightForm, emitDeviceOutputs } from "./device-io.js";
import { inWeightForm, linear } from "./linear.js";
import { rmsNorm, skipRmsNorm } from "./norm.js";
import type { RopeSpec } from "./rotary.js";

/** What every decoder-only text architecture reads from its GGUF metadata, beyond what the runtime needs. */
export interface DecoderHyper extends ModelShape {
  /** Feed-forward width (`feed_forward_length`). */
  ffn: number;
  /** RMS norm epsilon (`attention.layer_norm_rms_epsilon`). */
  rmsEps: number;
  rope: RopeSpec;
}

/** Declares the text graph's inputs and outputs (the runtime contract in `runtime/artifact/text-graph.ts`). */
export function declareTextIo(ctx: BlockContext, h: ModelShape): void {
  if (buildsForDevice(ctx)) return declareDeviceIo(ctx, h);
  const g = ctx.g;
  g.input(IO.inputIds, DataType.INT64, ["batch", "seq"]);
  g.input(IO.positionIds, DataType.INT64, ["batch", "seq"]);
  g.input(IO.pastMask, DataType.FLOAT, ["batch", 1, 1, "past"]);
  g.input(IO.newMask, DataType.FLOAT, ["mask_batch", 1, "group_seq", "seq"]);
  g.input(IO.logitsFrom, DataType.INT64, [1]);
  // Sliding-window layers read a ring of their own length (see text-graph.ts); a model without them has no ring input.
  const sliding = new Set(h.slidingWindow?.layers ?? []);
  if (h.slidingWindow) g.input(IO.ringPositions, DataType.INT64, ["batch", "ring"]);
  for (let l = 0; l < h.layers; l++) {
    const past = sliding.has(l) ? "ring" : "past";
    g.input(IO.pastKey(l), DataType.FLOAT, ["batch", h.kvHeads, h.headDim, past]);
    g.input(IO.pastValue(l), DataType.FLOAT, ["batch", h.kvHeads, past, h.headDim]);
  }
  g.output(IO.logits, DataType.FLOAT, ["batch", "positions", h.vocab]);
  g.output(IO.hidden, DataType.FLOAT, ["batch", "seq", h.hidden]);
  for (let l = 0; l < h.layers; l++) {
    g.output(IO.presentKey(l), DataType.FLOAT, ["batch", h.kvHeads, "seq", h.headDim]);
    g.output(IO.presentValue(l), DataType.FLOAT, ["batch", h.kvHeads, "seq", h.headDim]);
  }
}

/** The input tokens' embeddings [B, S, hidden] (`token_embd`): a float32 table, or its quantized blocks (`options.embedding`). */
export async function tokenEmbedding(ctx: BlockContext, h: ModelShape): Promise<string> {
  if (ctx.options.embedding === "quantized") {
    const quantized = await quantizedEmbedding(ctx, h);
    if (quantized) return quantized;
  }
  const g = ctx.g;
  ctx.choices.push({
    what: "token embedding",
    choice: "float32 table + Gather",
    exact: true,
    why: "dequantized once at compile time; only the looked-up rows are read per step",
  });
  // Written a run of rows at a time where the source can: the table is 4 bytes per weight (4 GiB for a 70B model).
  const rows = ctx.w.floatRows?.("token_embd.weight");
  const table = rows
    ? await g.weightFromChunks("token_embd.f32", DataType.FLOAT, [h.vocab, h.hidden], h.vocab * h.hidden * 4, rows)
    : g.weight("token_embd.f32", DataType.FLOAT, [h.vocab, h.hidden], await ctx.w.floats("token_embd.weight"));
  return g.op("Gather", [table, IO.inputIds], { attributes: { axis: 0 } });
}

/**
 * The embeddings looked up from the GGUF's own blocks with GatherBlockQuantized (value
 * (q - zero point) * scale per 32-block, plus the block minimum where the encoding has one, added
 * after the lookup); undefined when the table's encoding does not map onto it (float, K-quant
 * super-blocks of 16, ...), which then takes the float32 table.
 */
async function quantizedEmbedding(ctx: BlockContext, h: ModelShape): Promise<string | undefined> {
  let w = await ctx.w.linear("token_embd.weight");
  if (w.kind !== "nbits" || w.blockSize !== 32 || w.k !== h.hidden) return undefined;
  if (w.mins && ctx.options.minFold === "8bit" && !emulatesLlamaCpp(ctx)) w = foldMinsTo8Bit(w);
  const rows = blockRows(ctx, "token_embd", w, IO.inputIds, 2, "GatherBlockQuantized");
  ctx.choices.push({
    what: "token embedding",
    choice: `GatherBlockQuantized over the GGUF's ${w.bits}-bit blocks${w.mins ? " + block minimums" : ""}`,
    exact: w.exact,
    why: "the table stays quantized: a quarter of the float32 table's bytes or less, in the file and in memory",
  });
  return rows;
}

/** The initializers a block-quantized row lookup reads, per graph, by name prefix: a tied head rescored shares the embedding's. */
const rowTables = new WeakMap<BlockContext, Map<string, string[]>>();

/**
 * Rows `indices` (int64, `rank` dimensions [...]) of a 32-block `nbits` weight, dequantized: [..., k]. The
 * weight's blocks are written once per graph under `prefix` (`<prefix>.q`, `.scales`, `.zp`,
 * `.mins`) and shared by every lookup of the same prefix. `lookup` "ops" gathers 8-bit rows and
 * dequantizes them with plain Gather/Cast/Sub/Mul, bitwise the same values as GatherBlockQuantized
 * but measured 4x faster per row in onnxruntime 1.30 (128 rows of a 49152x576 table: 0.19-0.25 ms
 * against 0.77-0.98 ms), which matters where many rows are looked up per step (a rescored head);
 * for one token's embedding either costs under 0.05 ms. 4-bit rows always take GatherBlockQuantized.
 */
function blockRows(ctx: BlockContext, prefix: string, w: NbitsWeight, indices: string, rank: number, lookup: "GatherBlockQuantized" | "ops"): string {
  const g = ctx.g;
  const kBlocks = w.k / w.blockSize;
  let tables = rowTables.get(ctx);
  if (!tables) rowTables.set(ctx, (tables = new Map()));
  let names = tables.get(prefix);
  if (!names) {
    names = [
      g.weight(`${prefix}.q`, DataType.UINT8, [w.n, (w.k * w.bits) / 8], w.packed),
      g.weight(`${prefix}.scales`, DataType.FLOAT, [w.n, kBlocks], w.scales),
    ];
    names.push(w.zeroPoints ? g.weight(`${prefix}.zp`, DataType.UINT8, [w.n, w.zeroPoints.length / w.n], w.zeroPoints) : "");
    if (w.mins) {
      // mins is [kBlocks, n]: each row's minimums, gathered with it.
      const minsT = new Float32Array(w.n * kBlocks);
      for (let b = 0; b < kBlocks; b++) for (let r = 0; r < w.n; r++) minsT[r * kBlocks + b] = w.mins[b * w.n + r];
      names.push(g.weight(`${prefix}.mins`, DataType.FLOAT, [w.n, kBlocks], minsT));
    }
    tables.set(prefix, names);
  }
  const [data, scales, zp, mins] = names;
  const keep = new Array<number>(rank).fill(0);
  const gather = (table: string) => g.op("Gather", [table, indices], { attributes: { axis: 0 } });
  const perBlock = (x: string) => g.op("Unsqueeze", [x, g.int64s([rank + 1])]);
  let blocks: string;
  if (w.bits === 8 && lookup === "ops") {
    const codes = g.op("Reshape", [g.op("Cast", [gather(data)], { attributes: { to: DataType.FLOAT } }), g.int64s([...keep, kBlocks, w.blockSize])]);
    const zero = zp
      ? perBlock(g.op("Cast", [gather(zp)], { attributes: { to: DataType.FLOAT } }))
      : g.constant(DataType.FLOAT, [], new Float32Array([128]), "f32");
    blocks = g.op("Mul", [g.op("Sub", [codes, zero]), perBlock(gather(scales))]);
  } else {
    const inputs = zp ? [data, indices, scales, zp] : [data, indices, scales];
    const rows = g.op("GatherBlockQuantized", inputs, { domain: MS, attributes: { bits: w.bits, block_size: w.blockSize, gather_axis: 0, quantize_axis: 1 } });
    if (!mins) return rows;
    blocks = g.op("Reshape", [rows, g.int64s([...keep, kBlocks, w.blockSize])]);
  }
  if (mins) blocks = g.op("Add", [blocks, perBlock(gather(mins))]);
  return g.op("Reshape", [blocks, g.int64s([...keep, w.k])]);
}

/**
 * Keeps the positions whose logits are asked for (`logits_from`): sampling reads only the last,
 * prompt scoring every one. Slicing before the final norm and the LM head means sampling steps pay
 * for one position per row.
 */
export function keepLogitPositions(ctx: BlockContext, x: string): string {
  const g = ctx.g;
  return g.op("Slice", [x, IO.logitsFrom, g.int64s([Number.MAX_SAFE_INTEGER]), g.int64s([1])]);
}

/**
 * Candidates the "4bit-rescored" head recomputes from the source weight, per position. On
 * SmolLM2-135M (Q8_0 head, minFold 8bit, 256 held-out tokens, against the llama.cpp-numerics
 * reference) the 4-bit head alone measured KL 0.098 and perplexity x1.050; with its top 32 / 64 /
 * 128 / 256 / 1024 rescored 0.028 / 0.023 / 0.019 / 0.015 / 0.009 and x1.025 / x1.016 / x1.008 /
 * x1.004 / x1.004 (the source head's: 0.005, x1.000). Decode at one thread against the source
 * head (alternating, medians of 12) on a busy VM: top 64 +16%, 128 +11%, 256 +7%; 16 sequences
 * -2%, -1%, -11%. On a quiet one, 128: decode +3.4% (the 4-bit head alone +7.6%), 16 sequences -6%.
 */
export const LM_HEAD_RESCORED_TOP = 128;

/** x [B, P, hidden] (already normalized) times the LM head (`output`, else the tied `token_embd`): the logits before any cap. */
export async function lmHead(ctx: BlockContext, x: string): Promise<string> {
  const name = ctx.w.has("output.weight") ? "output.weight" : "token_embd.weight";
  const source = await ctx.w.linear(name);
  const tied = name === "output.weight" ? "own weight" : "tied to token_embd";
  const form = deviceWeightForm(ctx);
  if (form !== "source") {
    const weight = inWeightForm(source, form);
    ctx.choices.push({
      what: "lm head",
      choice: `${tied}, ${weight.mapping}`,
      exact: weight === source,
      why: "the GPU target's deviceWeights take lmHead's place",
    });
    return linear(ctx, x, weight, "lm_head");
  }
  const mode = emulatesLlamaCpp(ctx) ? "source" : (ctx.options.lmHead ?? "source");
  const weight = mode === "source" ? source : requantizeTo4Bit(source);
  if (weight === source) {
    ctx.choices.push({ what: "lm head", choice: tied, exact: true, why: "as stored in the GGUF" });
    return linear(ctx, x, weight, "lm_head");
  }
  const approx = linear(ctx, x, weight, "lm_head");
  const exactRows = mode === "4bit-rescored" ? rescorableSource(ctx, source) : undefined;
  if (!exactRows) {
    ctx.choices.push({
      what: "lm head",
      choice: `${tied}, ${weight.mapping}`,
      exact: false,
      why: "half the bytes a decode step reads for the head; its KL cost is measured by the optimization track",
    });
    return approx;
  }
  ctx.choices.push({
    what: "lm head",
    choice: `${tied}, ${weight.mapping}; its top ${LM_HEAD_RESCORED_TOP} logits per position recomputed from the source blocks`,
    exact: false,
    why: "the 4-bit head's bytes per decode step, with the likely tokens' logits as the source head gives them; its KL cost is measured by the optimization track",
  });
  return rescoreTop(ctx, x, approx, exactRows, source.n);
}

/** The source head as a block-row table (prefix and weight) when it is one GatherBlockQuantized can read, else undefined. */
function rescorableSource(ctx: BlockContext, source: LinearWeight): { prefix: string; weight: NbitsWeight } | undefined {
  if (source.kind !== "nbits" || source.blockSize !== 32) return undefined;
  // linear() folds block minimums the same way; a tied head then shares the embedding's table.
  const weight = source.mins && ctx.options.minFold === "8bit" ? foldMinsTo8Bit(source) : source;
  return { prefix: ctx.w.has("output.weight") ? "output" : "token_embd", weight };
}

/**
 * `approx` [B, P, vocab] with its `LM_HEAD_RESCORED_TOP` largest logits per position replaced by
 * x . row for those rows of the source weight (dequantized, float32 dot products).
 */
function rescoreTop(ctx: BlockContext, x: string, approx: string, table: { prefix: string; weight: NbitsWeight }, vocab: number): string {
  const g = ctx.g;
  const top = Math.min(LM_HEAD_RESCORED_TOP, vocab);
  const [, indices] = g.node("TopK", [approx, g.int64s([top])], { outputs: 2, attributes: { axis: -1, largest: 1, sorted: 0 } });
  const rows = blockRows(ctx, table.prefix, table.weight, indices, 3, "ops"); // [B, P, top, hidden]
  const exact = g.op("Squeeze", [g.op("MatMul", [rows, g.op("Unsqueeze", [x, g.int64s([-1])])]), g.int64s([-1])]);
  return g.op("ScatterElements", [approx, indices, exact], { attributes: { axis: -1 } });
}

/**
 * The output norm of the last layer's output plus its residual, at the positions whose logits are
 * asked for. The CPU graph normalizes every new position and names that the `hidden` output (what
 * embeddings pool) before it keeps those positions; the norm is per position, so the logits are the
 * same. The GPU target keeps them first, and returns those positions' (`hidden`, fetched by a step that embeds).
 */
export function finalNormed(ctx: BlockContext, x: string, residual: string, name: string, gamma: Float32Array, eps: number): string {
  if (buildsForDevice(ctx)) return deviceHidden(ctx, skipRmsNorm(ctx, keepLogitPositions(ctx, x), keepLogitPositions(ctx, residual), name, gamma, eps)[0]);
  const [normed] = skipRmsNorm(ctx, x, residual, name, gamma, eps);
  ctx.g.node("Identity", [normed], { names: [IO.hidden] });
  return keepLogitPositions(ctx, normed);
}

/** Names `logits` the graph's `logits` output; the GPU target returns its candidates instead (`device-io.ts`). */
export function emitLogits(ctx: BlockContext, logits: string): void {
  if (buildsForDevice(ctx)) return emitDeviceOutputs(ctx, logits);
  ctx.g.node("Identity", [logits], { names: [IO.logits] });
}

/** The two sub-layers of one pre-norm decoder layer, each given its normalized input and returning its output (before the residual add). */
export interface PreNormLayer {
  attention(layer: number, normed: string): Promise<string>;
  feedForward(layer: number, normed: string): Promise<string>;
}

/**
 * The pre-norm residual decoder (Llama, Qwen, Phi-3, Mixtral): x += attention(attn_norm(x));
 * x += feedForward(ffn_norm(x)); then output_norm and the LM head. Each residual add is fused into
 * the next norm (SkipSimplifiedLayerNormalization). Declares the graph's I/O and embeds the tokens.
 */
export async function preNormDecoder(ctx: BlockContext, h: DecoderHyper, layers: PreNormLayer): Promise<void> {
  const w = ctx.w;
  declareTextIo(ctx, h);
  const hidden = await tokenEmbedding(ctx, h);
  let residual = hidden;
  let pending: string | null = null;
  for (let l = 0; l < h.layers; l++) {
    const attnNorm = `blk.${l}.attn_norm.weight`;
    let normed: string;
    if (pending === null) normed = rmsNorm(ctx, hidden, attnNorm, await w.floats(attnNorm), h.rmsEps);
    else [normed, residual] = skipRmsNorm(ctx, pending, residual, attnNorm, await w.floats(attnNorm), h.rmsEps);
    const attn = await layers.attention(l, normed);
    const ffnNorm = `blk.${l}.ffn_norm.weight`;
    const [normed2, residual2] = skipRmsNorm(ctx, attn, residual, ffnNorm, await w.floats(ffnNorm), h.rmsEps);
    residual = residual2;
    pending = await layers.feedForward(l, normed2);
  }
  const finalNorm = finalNormed(ctx, pending!, residual, "output_norm.weight", await w.floats("output_norm.weight"), h.rmsEps);
  emitLogits(ctx, await lmHead(ctx, finalNorm));
}

/** The norms {@link preNormDecoder} reads around layer `layer`'s sub-layers. */
export function preNormLayerTensors(layer: number): TensorNeeds {
  return { required: [`blk.${layer}.attn_norm.weight`, `blk.${layer}.ffn_norm.weight`], optional: [] };
}
