import { DataType } from "../../onnx/onnx-proto.js";
import type { Choice } from "../weights.js";
import { type BlockContext, MS } from "./context.js";

/**
 * How positions rotate query and key vectors, as llama.cpp's ggml_rope_ext computes it: the angle of
 * pair i at position p is p * theta^(-2i/dims), divided by `freqFactors[i]` where given, then scaled.
 */
export interface RopeSpec {
  /** Dimensions rotated per head (`rope.dimension_count`, default the head dim); the rest pass through unrotated. */
  dims: number;
  /** Base of the frequencies (`rope.freq_base`, default 10000). */
  theta: number;
  /** Rotate adjacent pairs (GGUF llama: Q/K rows permuted for it) rather than (x_i, x_{i+dims/2}) (NeoX order). */
  interleaved: boolean;
  /**
   * GGUF tensor of dims/2 per-frequency divisors, when the model has one: Llama 3.1's `rope_freqs.weight`,
   * Phi-3's LongRoPE `rope_factors_long.weight` / `rope_factors_short.weight`.
   */
  freqFactors?: string;
  /** Context scaling declared by `rope.scaling.*`; "none" when the file declares none. */
  scaling: RopeScaling;
  /** Multiplies cos and sin, so Q.K by its square (`rope.scaling.attn_factor`, LongRoPE's attention scaling). Default 1. */
  attnFactor: number;
}

export interface RopeScaling {
  /** "linear" divides every angle by `factor`; "yarn" interpolates only the low frequencies and scales magnitudes. */
  type: "none" | "linear" | "yarn";
  /** `rope.scaling.factor` (1 when absent). */
  factor: number;
  /** `rope.scaling.original_context_length` (else the model's context): where YaRN's correction dims are computed. */
  originalContext: number;
}

/** llama.cpp's fixed YaRN ramp bounds (hparams yarn_beta_fast / yarn_beta_slow). */
const YARN_BETA_FAST = 32;
const YARN_BETA_SLOW = 1;

const f = Math.fround;

/** ggml_rope_yarn_corr_dims: the first and last pair index YaRN blends between extrapolation and interpolation. */
function yarnCorrectionDims(dims: number, originalContext: number, theta: number): [number, number] {
  const corr = (rotations: number) => f((dims * Math.log(originalContext / (rotations * 2 * Math.PI))) / (2 * Math.log(theta)));
  return [Math.max(0, Math.floor(corr(YARN_BETA_FAST))), Math.min(dims - 1, Math.ceil(corr(YARN_BETA_SLOW)))];
}

/** The cos/sin multiplier llama.cpp ends up with: its context's yarn_attn_factor times rope_yarn's own mscale. */
function magnitudeScale(rope: RopeSpec, freqScale: number): number {
  let attn = 1;
  if (rope.scaling.type === "yarn") {
    const factor = f(1 / freqScale);
    // llama_context sets get_mscale(factor) and then cancels rope_yarn's own factor; both are kept so the float rounding matches.
    attn = factor <= 1 ? 1 : f(0.1 * Math.log(factor) + 1);
    attn = f(attn * f(1 / f(1 + f(0.1 * Math.log(factor)))));
  }
  attn = f(attn * rope.attnFactor);
  if (rope.scaling.type === "yarn") attn = f(attn * f(1 + f(0.1 * Math.log(1 / freqScale))));
  return attn;
}

/**
 * cos and sin tables [contextLength, dims/2] for RotaryEmbedding, as ggml_rope_cache_init computes
 * them: theta advances by float multiplication, so the angles carry llama.cpp's float rounding
 * rather than a more exact double value. `factors` are the values of `rope.freqFactors`.
 */
export function rotaryTables(rope: RopeSpec, contextLength: number, factors?: Float32Array): { cos: Float32Array; sin: Float32Array } {
  const half = rope.dims / 2;
  if (factors && factors.length !== half) throw new Error(`rotary frequency factors have ${factors.length} values, expected ${half}`);
  const freqScale = rope.scaling.type === "none" ? 1 : f(1 / rope.scaling.factor);
  const yarn = rope.scaling.type === "yarn";
  const [low, high] = yarn ? yarnCorrectionDims(rope.dims, rope.scaling.originalContext, rope.theta) : [0, 0];
  const mscale = magnitudeScale(rope, freqScale);
  const thetaScale = f(Math.pow(rope.theta, -2 / rope.dims));
  const cos = new Float32Array(contextLength * half);
  const sin = new Float32Array(contextLength * half);
  for (let p = 0; p < contextLength; p++) {
    let theta = f(p);
    for (let i = 0; i < half; i++) {
      const extrapolated = factors ? f(theta / factors[i]) : theta;
      let angle = f(freqScale * extrapolated);
      if (yarn) {
        const ramp = 1 - Math.min(1, Math.max(0, f((i - low) / Math.max(0.001, high - low))));
        angle = f(f(angle * f(1 - ramp)) + f(extrapolated * ramp));
      }
      cos[p * half + i] = f(Math.cos(angle) * mscale);
      sin[p * half + i] = f(Math.sin(angle) * mscale);
      theta = f(theta * thetaScale);
    }
  }
  return { cos, sin };
}

/** The cos/sin caches of one rotary spec as initializers `<name>.cos` / `<name>.sin` (name default "rope"). */
export async function rotaryCaches(ctx: BlockContext, rope: RopeSpec, contextLength: number, name = "rope"): Promise<[string, string]> {
  const factors = rope.freqFactors ? await ctx.w.floats(rope.freqFactors) : undefined;
  const { cos, sin } = rotaryTables(rope, contextLength, factors);
  const half = rope.dims / 2;
  return [ctx.g.weight(`${name}.cos`, DataType.FLOAT, [contextLength, half], cos), ctx.g.weight(`${name}.sin`, DataType.FLOAT, [contextLength, half], sin)];
}

/** Rotates x [B, S, heads*headDim] by `positions` [B, S] (only the first rope.dims of each head). */
export function applyRotary(ctx: BlockContext, x: string, positions: string, heads: number, headDim: number, caches: [string, string], rope: RopeSpec): string {
  const attributes: Record<string, number> = { interleaved: rope.interleaved ? 1 : 0, num_heads: heads };
  if (rope.dims !== headDim) attributes.rotary_embedding_dim = rope.dims;
  return ctx.g.op("RotaryEmbedding", [x, positions, caches[0], caches[1]], { domain: MS, attributes });
}

/** A one-line description of the rotary for the manifest, e.g. "interleaved, theta 500000, rope_freqs.weight factors". */
export function describeRope(rope: RopeSpec, headDim: number): string {
  const parts = [rope.interleaved ? "interleaved" : "half-split", `theta ${rope.theta}`];
  if (rope.dims !== headDim) parts.push(`${rope.dims} of ${headDim} dims`);
  if (rope.freqFactors) parts.push(`${rope.freqFactors} factors`);
  if (rope.scaling.type !== "none") parts.push(`${rope.scaling.type} scaling x${rope.scaling.factor} from ${rope.scaling.originalContext}`);
  if (rope.attnFactor !== 1) parts.push(`attention factor ${rope.attnFactor}`);
  return parts.join(", ");
}

/** The manifest's record of the rotary a graph applies. */
export function rotaryChoice(rope: RopeSpec, headDim: number, why: string): Choice {
  return { what: "rotary", choice: `RotaryEmbedding (${describeRope(rope, headDim)})`, exact: true, why };
}
