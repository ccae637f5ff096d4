import type { ModelShape } from "../../runtime/artifact/index.js";
import { TEXT_GRAPH as IO } from "../../runtime/artifact/index.js";
import { DataType } from "../onnx/onnx-proto.js";
import type { GraphBuilder } from "../onnx/graph-builder.js";
import { concatRows, fusable, type LinearWeight, scaleRows } from "../quant/linear-weight.js";
import type { Choice, WeightSource } from "./weights.js";

/**
 * The Llama family (llama, and qwen2 with its QKV bias and half-split rotary) as one ONNX graph that
 * serves both prefill and decode.
 *
 * Attention is decomposed on purpose: the KV cache is a graph *input* that lives in the runtime's own
 * memory (keys stored transposed, [B, kv_heads, head_dim, P]) and the graph returns only the new
 * tokens' keys and values. onnxruntime-node copies every fetched output back to JS, so a
 * GroupQueryAttention "present" output would cost a copy of the whole cache on every step.
 */
export interface LlamaHyper extends ModelShape {
  /** Feed-forward width. */
  ffn: number;
  rmsEps: number;
  ropeTheta: number;
  /** GGUF llama checkpoints store Q/K rows permuted for pairwise (interleaved) rotary. */
  ropeInterleaved: boolean;
}

export interface LlamaBuildOptions {
  /** MatMulNBits accuracy_level: 4 quantizes activations to int8 (fast path), 0 keeps float. Default 4. */
  accuracyLevel: number;
  /**
   * "fast": ONNX Runtime's own numerics. "llama.cpp": reproduce llama.cpp's CPU rounding points
   * (activations quantized to Q8_0/Q8_1 blocks with fp16 scales before each matmul, Q8_K super-blocks
   * before K-quant matmuls, f16/bf16 before F16/BF16 matmuls, fp16 KV cache,
   * fp16 query and attention probabilities), for token-exact agreement with llama.cpp. Default "fast".
   */
  numerics: "fast" | "llama.cpp";
}

const MS = "com.microsoft";

class LlamaGraph {
  readonly choices: Choice[] = [];
  private splitSizes = "";
  constructor(
    private readonly g: GraphBuilder,
    private readonly w: WeightSource,
    private readonly h: LlamaHyper,
    private readonly opts: LlamaBuildOptions,
  ) {}

  private get group(): number {
    return this.h.heads / this.h.kvHeads;
  }

  private readonly quantized = new Map<string, { xq: string; sums: string }>();

  private get emulate(): boolean {
    return this.opts.numerics === "llama.cpp";
  }

  private f16(x: string): string {
    return this.emulate ? this.roundTo(x, DataType.FLOAT16) : x;
  }

  /** x rounded to a narrower float type and back to float32. */
  private roundTo(x: string, type: DataType): string {
    return this.g.op("Cast", [this.g.op("Cast", [x], { attributes: { to: type } })], { attributes: { to: DataType.FLOAT } });
  }

  /**
   * llama.cpp's quantize_row_q8_1 (AVX2): per 32-block, q = round_half_even(x * 127/amax), d = fp16(amax/127),
   * s = fp16(d * sum(q)). Returns the dequantized activation q*d and the block sums s.
   */
  private quantizeActivation(x: string, k: number): { xq: string; sums: string } {
    const cached = this.quantized.get(x);
    if (cached) return cached;
    const g = this.g;
    const f = (v: number) => g.constant(DataType.FLOAT, [], new Float32Array([v]), "f32");
    const blocks = g.op("Reshape", [x, g.int64s([0, 0, k / 32, 32])]);
    const amax = g.op("ReduceMax", [g.op("Abs", [blocks]), g.int64s([-1])], { attributes: { keepdims: 1 } });
    const inv = g.op("Div", [f(127), g.op("Max", [amax, f(1e-30)])]);
    const q = g.op("Round", [g.op("Mul", [blocks, inv])]);
    const d = g.op("Div", [amax, f(127)]);
    const xq = g.op("Reshape", [g.op("Mul", [q, this.f16(d)]), g.int64s([0, 0, k])]);
    const sumQ = g.op("ReduceSum", [q, g.int64s([-1])], { attributes: { keepdims: 1 } });
    const sums = g.op("Reshape", [this.f16(g.op("Mul", [sumQ, d])), g.int64s([0, 0, k / 32])]);
    const out = { xq, sums };
    this.quantized.set(x, out);
    return out;
  }

  /**
   * llama.cpp's quantize_row_q8_K, the activation type of every K-quant dot product: per 256-block,
   * iscale = 127/amax and d = 1/iscale in float32 (no fp16 scale), q = round_half_even(x * iscale).
   * Returns q*d and its sums per 32-block (for Q4_K's mins, as the dot product's integer bsums).
   */
  private quantizeActivationQ8K(x: string, k: number): { xq: string; sums: string } {
    const key = `${x}|q8_K`;
    const cached = this.quantized.get(key);
    if (cached) return cached;
    const g = this.g;
    const f = (v: number) => g.constant(DataType.FLOAT, [], new Float32Array([v]), "f32");
    const blocks = g.op("Reshape", [x, g.int64s([0, 0, k / 256, 256])]);
    const amax = g.op("ReduceMax", [g.op("Abs", [blocks]), g.int64s([-1])], { attributes: { keepdims: 1 } });
    const iscale = g.op("Div", [f(127), g.op("Max", [amax, f(1e-30)])]);
    const q = g.op("Round", [g.op("Mul", [blocks, iscale])]);
    const d = g.op("Div", [f(1), iscale]);
    const xq = g.op("Reshape", [g.op("Mul", [q, d]), g.int64s([0, 0, k])]);
    const sumQ = g.op("ReduceSum", [g.op("Reshape", [q, g.int64s([0, 0, k / 256, 8, 32])]), g.int64s([-1])], { attributes: { keepdims: 0 } });
    const sums = g.op("Reshape", [g.op("Mul", [sumQ, d]), g.int64s([0, 0, k / 32])]);
    const out = { xq, sums };
    this.quantized.set(key, out);
    return out;
  }

  /** The activation rounding llama.cpp applies before this weight's matmul, in "llama.cpp" numerics. */
  private emulatedActivation(x: string, weight: LinearWeight): { xq: string; sums: string | null } | null {
    if (!this.emulate) return null;
    if (weight.activation === "q8_K") return this.quantizeActivationQ8K(x, weight.k);
    if (weight.activation === "f16") return { xq: this.roundTo(x, DataType.FLOAT16), sums: null };
    if (weight.activation === "bf16") return { xq: this.roundTo(x, DataType.BFLOAT16), sums: null };
    if (weight.kind === "nbits" && weight.blockSize === 32) return this.quantizeActivation(x, weight.k);
    return null;
  }

  linear(x: string, weight: LinearWeight, name: string): string {
    const g = this.g;
    const act = this.emulatedActivation(x, weight);
    if (act) x = act.xq;
    if (weight.kind === "float") {
      return g.op("MatMul", [x, g.weight(`${name}.wT`, DataType.FLOAT, [weight.k, weight.n], weight.weightT)]);
    }
    const kBlocks = weight.k / weight.blockSize;
    const blob = (weight.blockSize * weight.bits) / 8;
    const inputs = [
      x,
      g.weight(`${name}.qweight`, DataType.UINT8, [weight.n, kBlocks, blob], weight.packed),
      g.weight(`${name}.scales`, DataType.FLOAT, [weight.n, kBlocks], weight.scales),
    ];
    if (weight.zeroPoints) inputs.push(g.weight(`${name}.zp`, DataType.UINT8, [weight.zeroPoints.length], weight.zeroPoints));
    let y = g.op("MatMulNBits", inputs, {
      domain: MS,
      attributes: { K: weight.k, N: weight.n, bits: weight.bits, block_size: weight.blockSize, accuracy_level: this.emulate ? 0 : this.opts.accuracyLevel },
    });
    if (weight.mins) {
      const sums = act?.sums
        ? act.sums
        : g.op("ReduceSum", [g.op("Reshape", [x, g.int64s([0, 0, kBlocks, weight.blockSize])]), g.int64s([-1])], { attributes: { keepdims: 0 } });
      const mins = g.weight(`${name}.mins`, DataType.FLOAT, [kBlocks, weight.n], weight.mins);
      y = g.op("Add", [y, g.op("MatMul", [sums, mins])]);
    }
    return y;
  }

  /** Loads several matrices and fuses them along N when their encodings allow; otherwise concatenates outputs. */
  async fusedLinear(x: string, names: string[], label: string, prepare?: (ws: LinearWeight[]) => void): Promise<string> {
    const ws = await Promise.all(names.map((n) => this.w.linear(n)));
    prepare?.(ws);
    // One fused matmul gets one activation rounding, so in "llama.cpp" numerics fuse only like with like.
    if (ws.every((wt) => fusable(ws[0], wt) && (!this.emulate || wt.activation === ws[0].activation))) return this.linear(x, concatRows(ws), label);
    this.choices.push({ what: label, choice: "separate matmuls + Concat", exact: true, why: "mixed block encodings cannot share one MatMulNBits" });
    return this.g.op("Concat", ws.map((wt, i) => this.linear(x, wt, `${label}.${i}`)), { attributes: { axis: -1 } });
  }

  rotaryCaches(): [string, string] {
    const { headDim, contextLength, ropeTheta } = this.h;
    const half = headDim / 2;
    const cos = new Float32Array(contextLength * half);
    const sin = new Float32Array(contextLength * half);
    // As ggml_rope_cache_init computes it: theta advances by float multiplication, so the angles
    // carry llama.cpp's float rounding rather than a more exact double value.
    const thetaScale = Math.fround(Math.pow(ropeTheta, -2 / headDim));
    for (let p = 0; p < contextLength; p++) {
      let theta = Math.fround(p);
      for (let i = 0; i < half; i++) {
        cos[p * half + i] = Math.cos(theta);
        sin[p * half + i] = Math.sin(theta);
        theta = Math.fround(theta * thetaScale);
      }
    }
    return [
      this.g.weight("rope.cos", DataType.FLOAT, [contextLength, half], cos),
      this.g.weight("rope.sin", DataType.FLOAT, [contextLength, half], sin),
    ];
  }

  rotary(x: string, positions: string, heads: number, caches: [string, string]): string {
    return this.g.op("RotaryEmbedding", [x, positions, caches[0], caches[1]], {
      domain: MS,
      attributes: { interleaved: this.h.ropeInterleaved ? 1 : 0, num_heads: heads },
    });
  }

  async attention(layer: number, normed: string, positions: string, caches: [string, string]): Promise<string> {
    const { g, h } = this;
    const p = `blk.${layer}`;
    const qDim = h.heads * h.headDim;
    const kvDim = h.kvHeads * h.headDim;
    // 1/sqrt(head_dim) is folded into the Q rows; for power-of-two head dims it is exact.
    const scale = 1 / Math.sqrt(h.headDim);
    let qkv = await this.fusedLinear(normed, [`${p}.attn_q.weight`, `${p}.attn_k.weight`, `${p}.attn_v.weight`], `${p}.qkv`, (ws) =>
      scaleRows(ws[0], scale, 0, ws[0].n),
    );
    if (this.w.has(`${p}.attn_q.bias`)) {
      const [bq, bk, bv] = await Promise.all(["q", "k", "v"].map((t) => this.w.floats(`${p}.attn_${t}.bias`)));
      const bias = new Float32Array(qDim + 2 * kvDim);
      bias.set(bq.map((v) => v * scale), 0);
      bias.set(bk, qDim);
      bias.set(bv, qDim + kvDim);
      qkv = g.op("Add", [qkv, g.weight(`${p}.qkv.bias`, DataType.FLOAT, [bias.length], bias)]);
    }
    const [q, k, v] = g.node("Split", [qkv, g.int64s([qDim, kvDim, kvDim])], { outputs: 3, attributes: { axis: -1 } });
    // In llama.cpp the cache is fp16 and the query is converted to fp16 for the K dot product.
    const qr = this.f16(this.rotary(q, positions, h.heads, caches));
    const kr = this.f16(this.rotary(k, positions, h.kvHeads, caches));

    // Q as [B, kv_heads, group*S, head_dim] so one matmul per KV head serves its whole query group.
    const q5 = g.op("Transpose", [g.op("Reshape", [qr, g.int64s([0, 0, h.kvHeads, this.group, h.headDim])])], { attributes: { perm: [0, 2, 3, 1, 4] } });
    const q4 = g.op("Reshape", [q5, g.int64s([0, h.kvHeads, -1, h.headDim])]);
    const k4 = g.op("Reshape", [kr, g.int64s([0, 0, h.kvHeads, h.headDim])]);
    const v4 = g.op("Reshape", [this.f16(v), g.int64s([0, 0, h.kvHeads, h.headDim])]);
    const kNew = g.op("Transpose", [k4], { attributes: { perm: [0, 2, 1, 3] }, names: [IO.presentKey(layer)] });
    const vNew = g.op("Transpose", [v4], { attributes: { perm: [0, 2, 1, 3] }, names: [IO.presentValue(layer)] });
    const kNewT = g.op("Transpose", [k4], { attributes: { perm: [0, 2, 3, 1] } });

    const scoresPast = g.op("Add", [g.op("MatMul", [q4, IO.pastKey(layer)]), IO.pastMask]);
    const scoresNew = g.op("Add", [g.op("MatMul", [q4, kNewT]), IO.newMask]);
    const probs = g.op("Softmax", [g.op("Concat", [scoresPast, scoresNew], { attributes: { axis: -1 } })], { attributes: { axis: -1 } });
    const [pPast, pNew] = g.node("Split", [this.f16(probs), this.splitSizes], { outputs: 2, attributes: { axis: -1 } });
    const mixed = g.op("Add", [g.op("MatMul", [pPast, IO.pastValue(layer)]), g.op("MatMul", [pNew, vNew])]);
    const m5 = g.op("Transpose", [g.op("Reshape", [mixed, g.int64s([0, h.kvHeads, this.group, -1, h.headDim])])], { attributes: { perm: [0, 3, 1, 2, 4] } });
    const merged = g.op("Reshape", [m5, g.int64s([0, 0, qDim])]);
    return this.linear(merged, await this.w.linear(`${p}.attn_output.weight`), `${p}.attn_output`);
  }

  async mlp(layer: number, normed: string): Promise<string> {
    const g = this.g;
    const p = `blk.${layer}`;
    const gu = await this.fusedLinear(normed, [`${p}.ffn_gate.weight`, `${p}.ffn_up.weight`], `${p}.gate_up`);
    const [gate, up] = g.node("Split", [gu, g.int64s([this.h.ffn, this.h.ffn])], { outputs: 2, attributes: { axis: -1 } });
    const silu = g.op("Mul", [gate, g.op("Sigmoid", [gate])]);
    return this.linear(g.op("Mul", [silu, up]), await this.w.linear(`${p}.ffn_down.weight`), `${p}.ffn_down`);
  }

  norm(x: string, weightName: string, gamma: Float32Array): string {
    const g = this.g;
    return g.op("SimplifiedLayerNormalization", [x, g.weight(weightName, DataType.FLOAT, [gamma.length], gamma)], {
      attributes: { axis: -1, epsilon: { float: this.h.rmsEps }, stash_type: 1 },
    });
  }

  /** Returns [normalized, new residual] for norm(x + residual). */
  skipNorm(x: string, residual: string, weightName: string, gamma: Float32Array): [string, string] {
    const g = this.g;
    const gammaName = g.weight(weightName, DataType.FLOAT, [gamma.length], gamma);
    const outs = g.node("SkipSimplifiedLayerNormalization", [x, residual, gammaName], {
      domain: MS,
      names: [`${weightName}.out`, "", "", `${weightName}.residual`],
      attributes: { epsilon: { float: this.h.rmsEps } },
    });
    return [outs[0], outs[3]];
  }

  declareIo(): void {
    const { g, h } = this;
    g.input(IO.inputIds, DataType.INT64, ["batch", "seq"]);
    g.input(IO.positionIds, DataType.INT64, ["batch", "seq"]);
    g.input(IO.pastMask, DataType.FLOAT, ["batch", 1, 1, "past"]);
    g.input(IO.newMask, DataType.FLOAT, ["mask_batch", 1, "group_seq", "seq"]);
    g.input(IO.logitsFrom, DataType.INT64, [1]);
    for (let l = 0; l < h.layers; l++) {
      g.input(IO.pastKey(l), DataType.FLOAT, ["batch", h.kvHeads, h.headDim, "past"]);
      g.input(IO.pastValue(l), DataType.FLOAT, ["batch", h.kvHeads, "past", h.headDim]);
    }
    g.output(IO.logits, DataType.FLOAT, ["batch", "positions", h.vocab]);
    for (let l = 0; l < h.layers; l++) {
      g.output(IO.presentKey(l), DataType.FLOAT, ["batch", h.kvHeads, "seq", h.headDim]);
      g.output(IO.presentValue(l), DataType.FLOAT, ["batch", h.kvHeads, "seq", h.headDim]);
    }
    const pastLen = g.op("Shape", [IO.pastKey(0)], { attributes: { start: 3, end: 4 } });
    const seqLen = g.op("Shape", [IO.inputIds], { attributes: { start: 1, end: 2 } });
    this.splitSizes = g.op("Concat", [pastLen, seqLen], { attributes: { axis: 0 } });
  }

  async embedding(): Promise<string> {
    const g = this.g;
    const table = await this.w.floats("token_embd.weight");
    this.choices.push({ what: "token embedding", choice: "float32 table + Gather", exact: true, why: "dequantized once at compile time; only the looked-up rows are read per step" });
    return g.op("Gather", [g.weight("token_embd.f32", DataType.FLOAT, [this.h.vocab, this.h.hidden], table), IO.inputIds], { attributes: { axis: 0 } });
  }

  async build(): Promise<void> {
    const { g, h } = this;
    this.declareIo();
    const caches = this.rotaryCaches();
    let hidden = await this.embedding();
    let residual = hidden;
    let pending: string | null = null;
    for (let l = 0; l < h.layers; l++) {
      const attnGamma = await this.w.floats(`blk.${l}.attn_norm.weight`);
      let normed: string;
      if (pending === null) normed = this.norm(hidden, `blk.${l}.attn_norm.weight`, attnGamma);
      else [normed, residual] = this.skipNorm(pending, residual, `blk.${l}.attn_norm.weight`, attnGamma);
      const attn = await this.attention(l, normed, IO.positionIds, caches);
      const [normed2, residual2] = this.skipNorm(attn, residual, `blk.${l}.ffn_norm.weight`, await this.w.floats(`blk.${l}.ffn_norm.weight`));
      residual = residual2;
      pending = await this.mlp(l, normed2);
    }
    // Sampling reads only the last position's logits, prompt scoring every position's: slice
    // before the final norm and the LM head, so sampling steps pay for one position per row.
    const kept = (x: string) => g.op("Slice", [x, IO.logitsFrom, g.int64s([Number.MAX_SAFE_INTEGER]), g.int64s([1])]);
    const [finalNorm] = this.skipNorm(kept(pending!), kept(residual), "output_norm.weight", await this.w.floats("output_norm.weight"));
    const headName = this.w.has("output.weight") ? "output.weight" : "token_embd.weight";
    this.choices.push({ what: "lm head", choice: headName === "output.weight" ? "own weight" : "tied to token_embd", exact: true, why: "as stored in the GGUF" });
    const head = await this.w.linear(headName);
    g.node("Identity", [this.linear(finalNorm, head, "lm_head")], { names: [IO.logits] });
  }
}

export async function buildLlama(g: GraphBuilder, w: WeightSource, h: LlamaHyper, opts: LlamaBuildOptions): Promise<Choice[]> {
  const graph = new LlamaGraph(g, w, h, opts);
  await graph.build();
  return [
    { what: "attention", choice: "decomposed MatMul/Softmax over a runtime-owned KV cache (keys transposed)", exact: true, why: "GroupQueryAttention's present outputs would be copied whole to JS on every step by onnxruntime-node" },
    { what: "rotary", choice: `RotaryEmbedding (${h.ropeInterleaved ? "interleaved" : "half-split"}, theta ${h.ropeTheta})`, exact: true, why: h.ropeInterleaved ? "GGUF llama Q/K rows are permuted for pairwise rotation" : "architecture uses NeoX order unpermuted" },
    opts.numerics === "llama.cpp"
      ? { what: "numerics", choice: "llama.cpp emulation: Q8_0/Q8_1 activation blocks with fp16 scales (Q8_K super-blocks for K-quants, f16/bf16 for F16/BF16 weights), fp16 KV/query/probabilities, MatMulNBits accuracy_level 0", exact: true, why: "token-exact agreement with llama.cpp's CPU path" }
      : { what: "numerics", choice: `fast: MatMulNBits accuracy_level ${opts.accuracyLevel}`, exact: opts.accuracyLevel === 0, why: opts.accuracyLevel === 4 ? "int8 activations: the CPU fast path (llama.cpp likewise quantizes activations, with other rounding)" : "float activations" },
    ...graph.choices,
  ];
}
