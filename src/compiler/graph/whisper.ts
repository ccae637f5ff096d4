import { presentEntry, SPEECH_GRAPH, type WhisperShape } from "../../runtime/artifact/index.js";
import type { GraphBuilder } from "../onnx/graph-builder.js";
import { DataType } from "../onnx/onnx-proto.js";
import { topByBlocks } from "./blocks/top-k.js";
import type { Choice } from "./weights.js";

/**
 * OpenAI Whisper as two ONNX graphs, from CTranslate2's variable names (WhisperSpec).
 *
 * The encoder runs once per 30 s window: two convolutions, sinusoidal positions, pre-norm layers, and
 * then every decoder layer's cross-attention keys and values, so the decoder never recomputes them.
 * The decoder keeps the text graph's design (see llama.ts): its self-attention KV cache is an input in
 * the runtime's memory (keys transposed) and it returns only the new tokens' keys and values, because
 * onnxruntime-node copies every fetched output back to JS.
 */
export interface WhisperHyper extends WhisperShape {
  /** Feed-forward width. */
  ffn: number;
  encoderHeads: number;
}

/** What the Whisper builder asks of a weights file: float32 tensors by CTranslate2 name. */
export interface WhisperWeights {
  has(name: string): boolean;
  dims(name: string): number[];
  /** The tensor as float32 in storage order (dequantized or widened). */
  floats(name: string): Float32Array;
}

/** Whisper's LayerNorm epsilon (torch's default, which OpenAI's model uses). */
const LN_EPS = 1e-5;
const MS = "com.microsoft";
const E = SPEECH_GRAPH.encoder;
const D = SPEECH_GRAPH.decoder;
/**
 * How many likeliest tokens a decoder call is shaped to return per row: beam search ranks twice its
 * beams, and a transcription takes at most 16. A call asking for more is still exact, its sort then
 * taking more dispatches on the GPU.
 */
const WIDEST_TOP_K = 32;

/** A CTranslate2 linear weight ([out, in], row-major) as the [in, out] matrix MatMul wants. */
function transposed(w: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(w.length);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = w[r * cols + c];
  return out;
}

/** Layers stored as `<prefix>/layer_<i>/...`, counted by probing. */
export function countLayers(w: WhisperWeights, prefix: string, probe: string): number {
  let n = 0;
  while (w.has(`${prefix}/layer_${n}/${probe}`)) n++;
  return n;
}

/** Operations both graphs share: linears, layer norms, GELU, head reshapes. */
class WhisperOps {
  constructor(
    readonly g: GraphBuilder,
    readonly w: WhisperWeights,
    readonly h: WhisperHyper,
    /** The activations' element type: the cached keys and values are declared in it. */
    readonly activation: DataType.FLOAT | DataType.FLOAT16,
  ) {}

  /** `x` (float32) in the activations' type: a Cast when they are float16 (the builder's halfFloats makes "to float" half). */
  toActivations(x: string): string {
    return this.activation === DataType.FLOAT16 ? this.g.op("Cast", [x], { attributes: { to: DataType.FLOAT } }) : x;
  }

  /**
   * Names a graph output computed in the activations' type: `emit` writes it under `name` when they are
   * float32 (the graph as it always was), else under a name of its own, then cast to float32 as `name`.
   */
  asFloat32Output(name: string, emit: (name: string) => void): void {
    if (this.activation !== DataType.FLOAT16) return emit(name);
    const half = `${name}_float16`;
    emit(half);
    const wasHalf = this.g.halfFloats;
    this.g.halfFloats = false; // a Cast "to float" made while it is on would cast to float16
    this.g.node("Cast", [half], { names: [name], attributes: { to: DataType.FLOAT } });
    this.g.halfFloats = wasHalf;
  }

  f32(name: string, dims: number[], data: Float32Array): string {
    return this.g.weight(name, DataType.FLOAT, dims, data);
  }

  /** x @ W^T + b for a CTranslate2 `<scope>/weight` [out, in] and `<scope>/bias`; rows [from, to) scaled by `scale`. */
  linear(x: string, scope: string, scaleRows?: { scale: number; rows: number }): string {
    const g = this.g;
    const [n, k] = this.w.dims(`${scope}/weight`);
    const weight = this.w.floats(`${scope}/weight`);
    const bias = this.w.has(`${scope}/bias`) ? this.w.floats(`${scope}/bias`) : null;
    if (scaleRows) {
      // Folding 1/sqrt(head_dim) into the query rows is exact for power-of-two head dims (64 in every Whisper).
      for (let i = 0; i < scaleRows.rows * k; i++) weight[i] *= scaleRows.scale;
      if (bias) for (let i = 0; i < scaleRows.rows; i++) bias[i] *= scaleRows.scale;
    }
    if (!bias) return g.op("MatMul", [x, this.f32(`${scope}.wT`, [k, n], transposed(weight, n, k))]);
    // With a bias, one Gemm over the rows flattened: the product and the bias in one kernel, where
    // MatMul then Add is two (a GPU records each; the decoder has five such linears a layer).
    const rows = g.op("Reshape", [x, g.int64s([-1, k])]);
    const y = g.op("Gemm", [rows, this.f32(`${scope}.weight`, [n, k], weight), this.f32(`${scope}.bias`, [n], bias)], { attributes: { transB: 1 } });
    const shape = g.op("Concat", [g.op("Shape", [x], { attributes: { start: 0, end: -1 } }), g.int64s([n])], { attributes: { axis: 0 } });
    return g.op("Reshape", [y, shape]);
  }

  layerNorm(x: string, scope: string): string {
    const gamma = this.f32(`${scope}.gamma`, [this.h.width], this.w.floats(`${scope}/gamma`));
    const beta = this.f32(`${scope}.beta`, [this.h.width], this.w.floats(`${scope}/beta`));
    return this.g.op("LayerNormalization", [x, gamma, beta], { attributes: { axis: -1, epsilon: { float: LN_EPS } } });
  }

  gelu(x: string): string {
    // Exact erf GELU, as Whisper (and CTranslate2's Activation.GELU) computes it.
    return this.g.op("Gelu", [x], { attributes: { approximate: "none" } });
  }

  ffn(x: string, scope: string): string {
    const normed = this.layerNorm(x, `${scope}/layer_norm`);
    return this.linear(this.gelu(this.linear(normed, `${scope}/linear_0`)), `${scope}/linear_1`);
  }

  /** [B, S, heads*headDim] -> [B, S, heads, headDim]. */
  splitHeads(x: string): string {
    return this.g.op("Reshape", [x, this.g.int64s([0, 0, this.h.heads, this.h.headDim])]);
  }

  /** [B, heads, S, headDim] -> [B, S, heads*headDim]. */
  mergeHeads(x: string): string {
    const t = this.g.op("Transpose", [x], { attributes: { perm: [0, 2, 1, 3] } });
    return this.g.op("Reshape", [t, this.g.int64s([0, 0, this.h.width])]);
  }
}

/**
 * How the encoder's self-attention is built: "fused", com.microsoft Attention (one kernel over all
 * heads, the CPU's fastest); "explicit", MatMul and Softmax per head, for the GPU target (onnxruntime's
 * WebGPU Attention gives other numbers past 16 positions, so the fused node would run on the CPU
 * there, its inputs and outputs crossing every layer).
 */
export type EncoderAttention = "fused" | "explicit";

/**
 * The precision both graphs compute in: "float32", or "float16" for the GPU target (weights stored in
 * half precision, half the bytes read a step; the cross-attention keys and values and the
 * self-attention cache in float16 too). The mel input, the masks, the logits and everything after
 * them stay float32 in either.
 */
export type WhisperActivations = "float32" | "float16";

/**
 * How the decoder takes its log-probabilities under Whisper's rules: "operator", onnx LogSoftmax (the
 * CPU's one kernel); "reduced", the row less its maximum less the log-sum-exp of that, for the GPU
 * target (onnxruntime's WebGPU provider has no LogSoftmax: the node would run on the CPU provider,
 * the logits copied back mid-call and the log-probabilities uploaded again for the top k).
 */
export type DecoderLogSoftmax = "operator" | "reduced";

/**
 * How the decoder takes each row's likeliest tokens: "whole", one TopK over the vocabulary (the CPU's
 * partial sort, cheapest there); "blocks", the top k of each block of 2,048, then of those
 * (topByBlocks), for the GPU target, whose TopK sorts a longer row in about 138 dispatches.
 */
export type DecoderTopK = "whole" | "blocks";

/** Options of {@link buildWhisper}. */
export interface WhisperBuildOptions {
  /** The encoder's self-attention. Default "fused". */
  encoderAttention?: EncoderAttention;
  /** The decoder's log-softmax. Default "operator". */
  logSoftmax?: DecoderLogSoftmax;
  /** The decoder's top k. Default "whole". */
  topK?: DecoderTopK;
  /** The graphs' activations. Default "float32". */
  activations?: WhisperActivations;
}

class WhisperEncoder {
  readonly choices: Choice[] = [];
  constructor(
    private readonly o: WhisperOps,
    private readonly attention: EncoderAttention,
  ) {}

  private conv(x: string, scope: string, stride: number): string {
    const { o } = this;
    const [outC, inC, kernel] = o.w.dims(`${scope}/weight`);
    const weight = o.f32(`${scope}.weight`, [outC, inC, kernel], o.w.floats(`${scope}/weight`));
    const bias = o.f32(`${scope}.bias`, [outC], o.w.floats(`${scope}/bias`));
    return o.g.op("Conv", [x, weight, bias], { attributes: { kernel_shape: [kernel], pads: [1, 1], strides: [stride] } });
  }

  private selfAttention(x: string, layer: number): string {
    const { o } = this;
    const scope = `encoder/layer_${layer}/self_attention`;
    const normed = o.layerNorm(x, `${scope}/layer_norm`);
    if (this.attention === "explicit") return o.linear(this.explicitAttention(normed, scope), `${scope}/linear_1`);
    const [n, k] = o.w.dims(`${scope}/linear_0/weight`);
    // com.microsoft Attention takes the fused QKV projection ([in, 3*width] and its bias) and scales by
    // 1/sqrt(head_dim) itself; its CPU kernel is one pass over all heads with no mask for the encoder.
    const weight = o.f32(`${scope}/linear_0.wT`, [k, n], transposed(o.w.floats(`${scope}/linear_0/weight`), n, k));
    const bias = o.f32(`${scope}/linear_0.bias`, [n], o.w.floats(`${scope}/linear_0/bias`));
    const mixed = o.g.op("Attention", [normed, weight, bias], { domain: MS, attributes: { num_heads: o.h.encoderHeads } });
    return o.linear(mixed, `${scope}/linear_1`);
  }

  /** Every head's softmax(Q.K^T / sqrt(head_dim)).V over the whole window, [B, S, width], before the output projection. */
  private explicitAttention(normed: string, scope: string): string {
    const { o } = this;
    const g = o.g;
    const { width, encoderHeads: heads } = o.h;
    const headDim = width / heads;
    // 1/sqrt(head_dim) folded into the Q rows: exact for Whisper's head size of 64.
    const qkv = o.linear(normed, `${scope}/linear_0`, { scale: 1 / Math.sqrt(headDim), rows: width });
    const [q, k, v] = g.node("Split", [qkv, g.int64s([width, width, width])], { outputs: 3, attributes: { axis: -1 } });
    const perHead = (t: string, perm: number[]) => g.op("Transpose", [g.op("Reshape", [t, g.int64s([0, 0, heads, headDim])])], { attributes: { perm } });
    const probs = g.op("Softmax", [g.op("MatMul", [perHead(q, [0, 2, 1, 3]), perHead(k, [0, 2, 3, 1])])], { attributes: { axis: -1 } });
    const mixed = g.op("Transpose", [g.op("MatMul", [probs, perHead(v, [0, 2, 1, 3])])], { attributes: { perm: [0, 2, 1, 3] } });
    return g.op("Reshape", [mixed, g.int64s([0, 0, width])]);
  }

  /** One decoder layer's cross-attention keys (transposed) and values, as graph outputs. */
  private crossKv(encoded: string, layer: number): void {
    const { o } = this;
    const g = o.g;
    const kv = o.linear(encoded, `decoder/layer_${layer}/attention/linear_1`);
    const [k, v] = g.node("Split", [kv, g.int64s([o.h.width, o.h.width])], { outputs: 2, attributes: { axis: -1 } });
    g.node("Transpose", [o.splitHeads(k)], { attributes: { perm: [0, 2, 3, 1] }, names: [E.crossKey(layer)] });
    g.node("Transpose", [o.splitHeads(v)], { attributes: { perm: [0, 2, 1, 3] }, names: [E.crossValue(layer)] });
  }

  declareIo(): void {
    const { g, h, activation } = this.o;
    g.input(E.mel, DataType.FLOAT, ["batch", h.melBins, h.audioContext * 2]);
    for (let l = 0; l < h.decoderLayers; l++) {
      g.output(E.crossKey(l), activation, ["batch", h.heads, h.headDim, h.audioContext]);
      g.output(E.crossValue(l), activation, ["batch", h.heads, h.audioContext, h.headDim]);
    }
  }

  build(): void {
    const { o } = this;
    const { g, h } = o;
    this.declareIo();
    const c1 = o.gelu(this.conv(o.toActivations(E.mel), "encoder/conv1", 1));
    const c2 = o.gelu(this.conv(c1, "encoder/conv2", 2));
    const positions = o.f32("encoder.positions", [h.audioContext, h.width], o.w.floats("encoder/position_encodings/encodings"));
    let x = g.op("Add", [g.op("Transpose", [c2], { attributes: { perm: [0, 2, 1] } }), positions]);
    for (let l = 0; l < h.encoderLayers; l++) {
      x = g.op("Add", [x, this.selfAttention(x, l)]);
      x = g.op("Add", [x, o.ffn(x, `encoder/layer_${l}/ffn`)]);
    }
    const encoded = o.layerNorm(x, "encoder/layer_norm");
    for (let l = 0; l < h.decoderLayers; l++) this.crossKv(encoded, l);
    this.choices.push(
      this.attention === "fused"
        ? {
            what: "encoder attention",
            choice: "com.microsoft Attention (fused QKV)",
            exact: true,
            why: "one kernel over all heads; no mask over a full 30 s window",
          }
        : {
            what: "encoder attention",
            choice: "decomposed MatMul/Softmax per head (fused QKV projection)",
            exact: true,
            why: "the GPU target: onnxruntime's WebGPU Attention gives other numbers past 16 positions, and MatMul and Softmax run on the device",
          },
    );
  }
}

class WhisperDecoder {
  /** Per decoder layer, the cross-attention probabilities of its alignment heads, in config order. */
  private readonly alignment: string[] = [];
  /** The new keys and values of every layer, in the order of the `presents` output (presentEntry). */
  private readonly presents: string[] = [];
  private splitSizes = "";
  private seqLen = "";
  /** Decoder rows (the batch) and cross-attention groups: windows the rows read, rows / groups each. */
  private batch = "";
  private groups = "";
  /** [groups, rows per group * seq, heads, head_dim] and [rows, seq, width]. */
  private groupedQueryShape = "";
  private rowShape = "";
  /** The attention masks in the activations' type. */
  private pastMask = "";
  private newMask = "";
  constructor(
    private readonly o: WhisperOps,
    private readonly logSoftmax: DecoderLogSoftmax,
    private readonly topK: DecoderTopK,
  ) {}

  private get scale(): number {
    return 1 / Math.sqrt(this.o.h.headDim);
  }

  private selfAttention(x: string, layer: number): string {
    const { o } = this;
    const g = o.g;
    const scope = `decoder/layer_${layer}/self_attention`;
    const normed = o.layerNorm(x, `${scope}/layer_norm`);
    const qkv = o.linear(normed, `${scope}/linear_0`, { scale: this.scale, rows: o.h.width });
    const [q, k, v] = g.node("Split", [qkv, g.int64s([o.h.width, o.h.width, o.h.width])], { outputs: 3, attributes: { axis: -1 } });
    const q4 = g.op("Transpose", [o.splitHeads(q)], { attributes: { perm: [0, 2, 1, 3] } });
    const k4 = o.splitHeads(k);
    const kNew = g.op("Transpose", [k4], { attributes: { perm: [0, 2, 1, 3] } });
    const vNew = g.op("Transpose", [o.splitHeads(v)], { attributes: { perm: [0, 2, 1, 3] } });
    this.presents[presentEntry(layer, "key")] = kNew;
    this.presents[presentEntry(layer, "value")] = vNew;
    const kNewT = g.op("Transpose", [k4], { attributes: { perm: [0, 2, 3, 1] } });
    const scoresPast = g.op("Add", [g.op("MatMul", [q4, D.pastKey(layer)]), this.pastMask]);
    const scoresNew = g.op("Add", [g.op("MatMul", [q4, kNewT]), this.newMask]);
    const probs = g.op("Softmax", [g.op("Concat", [scoresPast, scoresNew], { attributes: { axis: -1 } })], { attributes: { axis: -1 } });
    const [pPast, pNew] = g.node("Split", [probs, this.splitSizes], { outputs: 2, attributes: { axis: -1 } });
    const mixed = g.op("Add", [g.op("MatMul", [pPast, D.pastValue(layer)]), g.op("MatMul", [pNew, vNew])]);
    return o.linear(o.mergeHeads(mixed), `${scope}/linear_1`);
  }

  private crossAttention(x: string, layer: number): string {
    const { o } = this;
    const g = o.g;
    const scope = `decoder/layer_${layer}/attention`;
    const normed = o.layerNorm(x, `${scope}/layer_norm`);
    const q = o.linear(normed, `${scope}/linear_0`, { scale: this.scale, rows: o.h.width });
    // Rows that share a window (a transcription's beams or candidates) read its keys and values once:
    // the queries of each group's rows are stacked as one [rows x head_dim] matrix per head.
    const grouped = g.op("Reshape", [q, this.groupedQueryShape]);
    const q4 = g.op("Transpose", [grouped], { attributes: { perm: [0, 2, 1, 3] } });
    const probs = g.op("Softmax", [g.op("MatMul", [q4, D.crossKey(layer)])], { attributes: { axis: -1 } });
    this.collectAlignment(probs, layer);
    const mixed = g.op("Transpose", [g.op("MatMul", [probs, D.crossValue(layer)])], { attributes: { perm: [0, 2, 1, 3] } });
    return o.linear(g.op("Reshape", [mixed, this.rowShape]), `${scope}/linear_2`);
  }

  private collectAlignment(probs: string, layer: number): void {
    const heads = this.o.h.alignmentHeads.filter(([l]) => l === layer).map(([, head]) => head);
    if (heads.length === 0) return;
    const g = this.o.g;
    // [groups, heads, rows per group * seq, audio] -> [rows, heads, seq, audio].
    const picked = g.op("Gather", [probs, g.int64s(heads)], { attributes: { axis: 1 } });
    const split = g.op("Reshape", [
      picked,
      g.op("Concat", [this.groups, g.int64s([heads.length, -1]), this.seqLen, g.int64s([this.o.h.audioContext])], { attributes: { axis: 0 } }),
    ]);
    const rowsFirst = g.op("Transpose", [split], { attributes: { perm: [0, 2, 1, 3, 4] } });
    this.alignment[layer] = g.op("Reshape", [
      rowsFirst,
      g.op("Concat", [this.batch, g.int64s([heads.length]), this.seqLen, g.int64s([this.o.h.audioContext])], { attributes: { axis: 0 } }),
    ]);
  }

  /** The alignment heads' probabilities concatenated in config order (a Gather per layer, then a reorder if needed). */
  private emitAlignment(): void {
    const { g, h } = this.o;
    const layers = [...new Set(h.alignmentHeads.map(([l]) => l))].sort((a, b) => a - b);
    const byLayer = g.op(
      "Concat",
      layers.map((l) => this.alignment[l]),
      { attributes: { axis: 1 } },
    );
    const layerOrder = layers.flatMap((l) => h.alignmentHeads.filter(([al]) => al === l));
    const order = h.alignmentHeads.map(([l, head]) => layerOrder.findIndex(([al, ah]) => al === l && ah === head));
    const inOrder = order.every((v, i) => v === i);
    this.o.asFloat32Output(D.alignment, (name) =>
      g.node(inOrder ? "Identity" : "Gather", inOrder ? [byLayer] : [byLayer, g.int64s(order)], {
        names: [name],
        attributes: inOrder ? undefined : { axis: 1 },
      }),
    );
  }

  /**
   * Each row's likeliest tokens under Whisper's rules, so that a greedy or beam step returns k values
   * a row instead of its vocabulary: the runtime's mask, then the timestamp rule (timestamps forced
   * when their total probability beats the likeliest text token's), log-softmax, the top k
   * (DecoderTopK), packed with their ids.
   */
  private emitTopLogprobs(): void {
    const { g } = this.o;
    const masked = g.op("Add", [D.logits, D.ruleMask]);
    const rowAxis = g.int64s([1]);
    const text = g.op("Slice", [masked, g.int64s([0]), D.textTokens, rowAxis]);
    const stamps = g.op("Slice", [masked, D.textTokens, g.int64s([Number.MAX_SAFE_INTEGER]), rowAxis]);
    const bestText = g.op("ReduceMax", [text, rowAxis], { attributes: { keepdims: 1 } });
    const stampMass = g.op("ReduceLogSumExp", [stamps, rowAxis], { attributes: { keepdims: 1 } });
    const forced = g.op("Where", [g.op("Greater", [stampMass, bestText]), g.constant(DataType.FLOAT, [], Float32Array.of(-Infinity), "minus_infinity"), text]);
    const ruled = g.op("Concat", [forced, stamps], { attributes: { axis: 1 } });
    const logprobs = this.logSoftmax === "operator" ? g.op("LogSoftmax", [ruled], { attributes: { axis: 1 } }) : this.reducedLogSoftmax(ruled);
    // [batch, 1, k] values and float ids, packed along axis 1.
    const count = g.op("Min", [D.topK, g.int64s([this.o.h.vocab])]);
    let values: string, ids: string;
    if (this.topK === "blocks") {
      [ids, values] = topByBlocks(g, g.op("Unsqueeze", [logprobs, rowAxis]), { count, width: this.o.h.vocab, widestCount: WIDEST_TOP_K });
    } else {
      const [top, at] = g.node("TopK", [logprobs, count], { outputs: 2, attributes: { axis: 1, largest: 1, sorted: 1 } });
      [values, ids] = [g.op("Unsqueeze", [top, rowAxis]), g.op("Unsqueeze", [g.op("Cast", [at], { attributes: { to: DataType.FLOAT } }), rowAxis])];
    }
    g.node("Concat", [values, ids], { names: [D.top], attributes: { axis: 1 } });
  }

  /** log-softmax over axis 1 in reductions the WebGPU provider runs: x - m - log(sum(exp(x - m))), m the row's maximum. */
  private reducedLogSoftmax(x: string): string {
    const { g } = this.o;
    const rowAxis = g.int64s([1]);
    const shifted = g.op("Sub", [x, g.op("ReduceMax", [x, rowAxis], { attributes: { keepdims: 1 } })]);
    return g.op("Sub", [shifted, g.op("ReduceLogSumExp", [shifted, rowAxis], { attributes: { keepdims: 1 } })]);
  }

  declareIo(): void {
    const { g, h, activation } = this.o;
    g.input(D.inputIds, DataType.INT64, ["batch", "seq"]);
    g.input(D.positionIds, DataType.INT64, ["batch", "seq"]);
    g.input(D.pastMask, DataType.FLOAT, ["batch", 1, 1, "past"]);
    g.input(D.newMask, DataType.FLOAT, [1, 1, "seq", "seq"]);
    for (let l = 0; l < h.decoderLayers; l++) {
      g.input(D.pastKey(l), activation, ["batch", h.heads, h.headDim, "past"]);
      g.input(D.pastValue(l), activation, ["batch", h.heads, "past", h.headDim]);
    }
    for (let l = 0; l < h.decoderLayers; l++) {
      g.input(D.crossKey(l), activation, ["groups", h.heads, h.headDim, h.audioContext]);
      g.input(D.crossValue(l), activation, ["groups", h.heads, h.audioContext, h.headDim]);
    }
    g.output(D.logits, DataType.FLOAT, ["batch", h.vocab]);
    g.output(D.presents, activation, [2 * h.decoderLayers, "batch", h.heads, "seq", h.headDim]);
    g.input(D.ruleMask, DataType.FLOAT, ["batch", h.vocab]);
    g.input(D.textTokens, DataType.INT64, [1]);
    g.input(D.topK, DataType.INT64, [1]);
    g.output(D.alignment, DataType.FLOAT, ["batch", h.alignmentHeads.length, "seq", h.audioContext]);
    g.output(D.top, DataType.FLOAT, ["batch", 2, "top_k"]);
    const pastLen = g.op("Shape", [D.pastKey(0)], { attributes: { start: 3, end: 4 } });
    this.seqLen = g.op("Shape", [D.inputIds], { attributes: { start: 1, end: 2 } });
    this.batch = g.op("Shape", [D.inputIds], { attributes: { start: 0, end: 1 } });
    this.groups = g.op("Shape", [D.crossKey(0)], { attributes: { start: 0, end: 1 } });
    this.splitSizes = g.op("Concat", [pastLen, this.seqLen], { attributes: { axis: 0 } });
    this.groupedQueryShape = g.op("Concat", [this.groups, g.int64s([-1, h.heads, h.headDim])], { attributes: { axis: 0 } });
    this.rowShape = g.op("Concat", [this.batch, this.seqLen, g.int64s([h.width])], { attributes: { axis: 0 } });
    this.pastMask = this.o.toActivations(D.pastMask);
    this.newMask = this.o.toActivations(D.newMask);
  }

  build(): Choice[] {
    const { o } = this;
    const { g, h } = o;
    this.declareIo();
    const table = o.f32("decoder.embeddings", [h.vocab, h.width], o.w.floats("decoder/embeddings/weight"));
    const positions = o.f32("decoder.positions", [h.textContext, h.width], o.w.floats("decoder/position_encodings/encodings"));
    const gather = (t: string, ids: string) => g.op("Gather", [t, ids], { attributes: { axis: 0 } });
    let x = g.op("Add", [gather(table, D.inputIds), gather(positions, D.positionIds)]);
    for (let l = 0; l < h.decoderLayers; l++) {
      x = g.op("Add", [x, this.selfAttention(x, l)]);
      x = g.op("Add", [x, this.crossAttention(x, l)]);
      x = g.op("Add", [x, o.ffn(x, `decoder/layer_${l}/ffn`)]);
    }
    this.emitAlignment();
    const zero = g.int64s([0]);
    g.node(
      "Concat",
      this.presents.map((p) => g.op("Unsqueeze", [p, zero])),
      { attributes: { axis: 0 }, names: [D.presents] },
    );
    // Only the last position's logits are sampled: slice before the final norm and the projection.
    const last = g.op("Squeeze", [g.op("Slice", [x, g.int64s([-1]), g.int64s([Number.MAX_SAFE_INTEGER]), g.int64s([1])]), g.int64s([1])]);
    const normed = o.layerNorm(last, "decoder/layer_norm");
    // Gemm with transB reads the embedding table as stored, so the tied projection costs no second copy.
    o.asFloat32Output(D.logits, (name) => g.node("Gemm", [normed, table], { names: [name], attributes: { transB: 1 } }));
    // The logits and all after them (the rules, log-probabilities, top k) in float32 whatever the activations.
    g.halfFloats = false;
    this.emitTopLogprobs();
    return [
      {
        what: "lm head",
        choice: "Gemm(transB) on the token embedding table",
        exact: true,
        why: "Whisper ties the output projection to the embeddings (decoder/projection is an alias)",
      },
      {
        what: "decoder attention",
        choice: "decomposed MatMul/Softmax over a runtime-owned KV cache (keys transposed)",
        exact: true,
        why: "fused attention ops' present outputs would be copied whole to JS on every step by onnxruntime-node",
      },
    ];
  }
}

export interface WhisperBuilders {
  encoder: GraphBuilder;
  decoder: GraphBuilder;
}

/** Builds both graphs; returns the choices made. */
export function buildWhisper(builders: WhisperBuilders, w: WhisperWeights, h: WhisperHyper, options: WhisperBuildOptions = {}): Choice[] {
  const half = (options.activations ?? "float32") === "float16";
  const activation = half ? DataType.FLOAT16 : DataType.FLOAT;
  builders.encoder.halfFloats = half;
  const encoder = new WhisperEncoder(new WhisperOps(builders.encoder, w, h, activation), options.encoderAttention ?? "fused");
  encoder.build();
  builders.encoder.halfFloats = false;
  builders.decoder.halfFloats = half;
  const decoderChoices = new WhisperDecoder(
    new WhisperOps(builders.decoder, w, h, activation),
    options.logSoftmax ?? "operator",
    options.topK ?? "whole",
  ).build();
  builders.decoder.halfFloats = false;
  return [
    ...encoder.choices,
    ...decoderChoices,
    ...(options.logSoftmax === "reduced"
      ? [
          {
            what: "decoder log-softmax",
            choice: "the row less its maximum less the log-sum-exp of that (ReduceMax, ReduceLogSumExp)",
            exact: true,
            why: "the GPU target: onnxruntime's WebGPU provider has no LogSoftmax, which would run on the CPU, the logits copied back mid-step",
          },
        ]
      : []),
    ...(options.topK === "blocks"
      ? [
          {
            what: "decoder top k",
            choice: "the top k of each block of 2,048 log-probabilities, then of those (two sorts of one dispatch each)",
            exact: true,
            why: "the GPU target: onnxruntime's WebGPU TopK sorts a longer row in global memory, in about 138 dispatches over Whisper's vocabulary",
          },
        ]
      : []),
    ...(half
      ? [
          {
            what: "activations",
            choice:
              "float16: both graphs' layers, the cross-attention keys and values and the self-attention cache; float32 mel input, masks, logits and all after them",
            exact: false,
            why: "the GPU target: half the bytes of weights read a step and of every window's keys and values, as faster-whisper's float16 on a GPU",
          },
        ]
      : []),
    {
      what: "linears",
      choice: "Gemm (transB) on each weight as stored, with its bias, over the rows flattened; MatMul where there is no bias",
      exact: true,
      why: "the product and the bias in one kernel, not MatMul then Add: a GPU's host records each kernel (five such linears a decoder layer)",
    },
    {
      what: "cross-attention keys/values",
      choice: "computed by the encoder graph for every decoder layer",
      exact: true,
      why: "the decoder reads them per step; computing them once per window saves a matmul per layer per token",
    },
    { what: "GELU", choice: "exact (erf)", exact: true, why: "Whisper's activation (CTranslate2 Activation.GELU)" },
  ];
}
