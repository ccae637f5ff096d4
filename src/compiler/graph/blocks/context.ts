import { DataType } from "../../onnx/onnx-proto.js";
import type { ArtifactManifest } from "../../../runtime/artifact/index.js";
import type { GraphBuilder } from "../../onnx/graph-builder.js";
import type { Choice, WeightSource } from "../weights.js";

/**
 * "fast": ONNX Runtime's own numerics. "llama.cpp": reproduce llama.cpp's CPU rounding points
 * (activations quantized to Q8_0/Q8_1 blocks with fp16 scales before each matmul, Q8_K super-blocks
 * before K-quant matmuls, f16/bf16 before F16/BF16 matmuls, fp16 KV cache, fp16 query and attention
 * probabilities), for token-exact agreement with llama.cpp.
 */
export type Numerics = "fast" | "llama.cpp";

/** Options that change how a text graph is built (both are part of the artifact id). */
export interface BuildOptions {
  /** MatMulNBits accuracy_level: 4 quantizes activations to int8 (fast path), 0 keeps float. Default 4. */
  accuracyLevel: number;
  /** Rounding model; see {@link Numerics}. Default "fast". */
  numerics: Numerics;
  /**
   * How block minimums (Q4_1, Q4_K, Q5_K) reach the matmul: "matmul" adds blocksum(x) @ mins
   * (exact, four nodes per linear); "8bit" folds them into 8-bit integer zero points (one node,
   * twice the weight bytes, each weight within 1/32 of its block's step); "block-means" keeps the
   * code width and the operator's default zero point, and carries each block's offset in extra
   * weight columns fed by the input's block means (one MatMulNBits with no zero-point input, lossy
   * only in the offsets' 8-bit resolution: see quant/fold-mins.ts). Ignored in "llama.cpp" numerics.
   * Default "matmul".
   */
  minFold?: MinFold;
  /**
   * How the token embedding is looked up: "float32" dequantizes the table once at compile time
   * (4 bytes per weight, a plain Gather); "quantized" keeps the GGUF's blocks and looks rows up with
   * GatherBlockQuantized (exact, a quarter of the bytes or less, for 32-blocks of 4 or 8 bits; other
   * encodings fall back to float32). Default "quantized" (an option since compiler 0.6.0).
   */
  embedding?: EmbeddingLookup;
  /**
   * How the LM head's weight reaches its matmul: "source" as the GGUF stores it (exact; Q8_0 in most
   * small models), "4bit" re-quantized to 4-bit blocks of 32 with zero points (half the bytes of a
   * Q8_0 head per decode step, lossy: see quant/requantize.ts). Only heads wider than 4 bits change;
   * the embedding lookup keeps the source blocks. "4bit-rescored": the 4-bit head, then each
   * position's top LM_HEAD_RESCORED_TOP (128) logits recomputed from the source blocks (a TopK, a
   * gather of those rows and their dot products; a 32-block source head only, else as "4bit").
   * Ignored in "llama.cpp" numerics. Default "source".
   */
  lmHead?: LmHeadWeight;
  /**
   * How a gated MLP's gate and up projections run: "fused", one MatMulNBits over both and a Split
   * (default); "separate", one MatMulNBits each, as onnxruntime-genai's builder emits them. The
   * logits are bitwise the same (each output column is computed on its own); which is faster depends
   * on the threads: on SmolLM2-135M "separate" measured +5-9% decode at one thread and -2 to -8% at
   * two. Where the file stores gate and up as one tensor (Phi-3), they stay fused.
   */
  gateUp?: GateUpLayout;
  /**
   * The device the graph is built for: "cpu" (default), or "webgpu", whose graph keeps the KV cache
   * in a device-resident pool and returns each position's top candidates rather than its logits
   * (`runtime/artifact/device-graph.ts`).
   */
  device?: BuildDevice;
  /**
   * The GPU target's activations: "float16" computes the model in half precision (weights' scales,
   * norms and constants stored as float16), from the embedding to the logits, which the device head
   * takes in float32; "float32" keeps everything float32. Ignored on the CPU. Default "float32".
   */
  activations?: DeviceActivations;
  /**
   * The GPU target's attention over the pooled cache: "gqa" (default), onnxruntime's com.microsoft
   * GroupQueryAttention over the slot rows, the valid lengths taken from the position ids (it runs
   * a multi-token step after a past only at one row, as the engine's prefill steps are); "explicit",
   * the CPU graph's attention over the whole capacity, masked. Ignored on the CPU.
   */
  deviceAttention?: DeviceAttention;
  /**
   * The GPU target's linear weights (every matmul's, the LM head's included; the embedding lookup
   * keeps the GGUF's blocks, as it reads one row per token): "source" (default) MatMulNBits over
   * the GGUF's own blocks; `{ bits: 4 | 8, blockSize: 32 | 64 | 128 }` every weight re-quantized
   * from its dequantized values to MatMulNBits blocks of that many bits and weights, with zero points
   * (a weight stored at exactly that width and block size is kept as it is); `{ bits: 16 }` dense
   * MatMul weights in the activations' float type (float16 under float16 activations; float32 under
   * float32, as a MatMul takes one type and onnxruntime would fold a Cast of float16 weights into a
   * float32 copy at load anyway). Where set, `lmHead` is ignored. Ignored on the CPU and in
   * "llama.cpp" numerics.
   */
  deviceWeights?: DeviceWeights;
}

/** See {@link BuildOptions.deviceWeights}. */
export type DeviceWeights = "source" | { bits: 4 | 8; blockSize: 32 | 64 | 128 } | { bits: 16 };

/** See {@link BuildOptions.activations}. */
export type DeviceActivations = "float32" | "float16";

/** See {@link BuildOptions.deviceAttention}. */
export type DeviceAttention = "explicit" | "gqa";

/** See {@link BuildOptions.device}. */
export type BuildDevice = NonNullable<ArtifactManifest["device"]>;

/** See {@link BuildOptions.gateUp}. */
export type GateUpLayout = "fused" | "separate";

/** See {@link BuildOptions.lmHead}. */
export type LmHeadWeight = "source" | "4bit" | "4bit-rescored";

/** See {@link BuildOptions.embedding}. */
export type EmbeddingLookup = "float32" | "quantized";

/** See {@link BuildOptions.minFold}. */
export type MinFold = "matmul" | "8bit" | "block-means";

/** A matmul input after llama.cpp's activation rounding, and its block sums where the weight has block minimums. */
export interface RoundedActivation {
  xq: string;
  sums: string | null;
}

/** What every block is handed: the graph being built, the weights it reads, and the numerics to build with. */
export interface BlockContext {
  readonly g: GraphBuilder;
  readonly w: WeightSource;
  readonly options: BuildOptions;
  /** Decisions the blocks made, recorded in the manifest. */
  readonly choices: Choice[];
  /** Roundings already built, by tensor and rounding: one activation feeding several matmuls is quantized once. */
  readonly rounded: Map<string, RoundedActivation>;
}

export function blockContext(g: GraphBuilder, w: WeightSource, options: BuildOptions): BlockContext {
  return { g, w, options, choices: [], rounded: new Map() };
}

export function emulatesLlamaCpp(ctx: BlockContext): boolean {
  return ctx.options.numerics === "llama.cpp";
}

/** x rounded to a narrower float type and back to float32. */
export function roundTo(ctx: BlockContext, x: string, type: DataType): string {
  const g = ctx.g;
  return g.op("Cast", [g.op("Cast", [x], { attributes: { to: type } })], { attributes: { to: DataType.FLOAT } });
}

/** x rounded through fp16 where llama.cpp stores it as fp16 (KV cache, query, probabilities); unchanged in "fast" numerics. */
export function f16(ctx: BlockContext, x: string): string {
  return emulatesLlamaCpp(ctx) ? roundTo(ctx, x, DataType.FLOAT16) : x;
}

/** A float32 scalar constant. */
export function scalar(ctx: BlockContext, value: number): string {
  return ctx.g.constant(DataType.FLOAT, [], new Float32Array([value]), "f32");
}

/** The com.microsoft contrib-op domain (MatMulNBits, RotaryEmbedding, SkipSimplifiedLayerNormalization). */
export const MS = "com.microsoft";
