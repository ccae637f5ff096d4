/** Synthetic models of the Llama-family architecture rules; see architectures-parity.test.ts. */
import { GgmlType } from "../../../../src/compiler/gguf/types.js";
import { meta } from "../../../fixtures/gguf/write-gguf.js";
import { Random, type TinyModelSpec } from "../../../fixtures/synthetic/tiny-model.js";
import type { ParityCase } from "../../../support/synthetic-parity.js";

const { F32, F16, Q8_0, Q4_K, Q6_K } = GgmlType;

const BASE = { layers: 2, hidden: 256, heads: 4, kvHeads: 2, ffn: 512, contextLength: 512, rmsEps: 1e-6 };
const same = (t: TinyModelSpec["types"]["attnQ"]) => ({ attnQ: t, attnK: t, attnV: t, attnOutput: t, ffnGate: t, ffnUp: t, ffnDown: t });

/**
 * Llama 3.1's frequency factors as its converter computes them (rope_type "llama3"): wavelengths
 * shorter than original/high_freq_factor keep 1, longer than original/low_freq_factor take `factor`,
 * smoothly in between. A small original context (256) puts the factors where positions < 50 feel them.
 */
function llama3Factors(dims: number, theta: number, factor: number, original: number, low = 1, high = 4): Float32Array {
  return Float32Array.from({ length: dims / 2 }, (_, i) => {
    const freq = 1 / Math.pow(theta, (2 * i) / dims);
    const wavelen = (2 * Math.PI) / freq;
    if (wavelen < original / high) return 1;
    if (wavelen > original / low) return factor;
    const smooth = (original / wavelen - low) / (high - low);
    return 1 / ((1 - smooth) / factor + smooth);
  });
}

/** LongRoPE factors like Phi-3.5's: long ones growing to ~20 over the frequencies, short ones near 1. */
function longRopeFactors(seed: number, dims: number, spread: number): Float32Array {
  const rnd = new Random(seed);
  return Float32Array.from({ length: dims / 2 }, (_, i) => 1 + (spread * i) / (dims / 2) + 0.1 * rnd.uniform());
}

const PHI_ORIGINAL = 128;
/** Phi-3's converter: sqrt(1 + ln(context / original) / ln(original)). */
const PHI_ATTN_FACTOR = Math.sqrt(1 + Math.log(BASE.contextLength / PHI_ORIGINAL) / Math.log(PHI_ORIGINAL));

/** The cases of architectures-parity.test.ts (a module of their own so a scratch script can measure a broken compiler on them). */
export const ARCHITECTURE_CASES: Array<ParityCase<TinyModelSpec>> = [
  {
    name: "llama 3.1: rope_freqs.weight factors, Q4_K with Q6_K (Q4_K_M-like), theta 500000",
    spec: {
      ...BASE,
      architecture: "llama",
      seed: 31,
      ropeTheta: 500000,
      types: { embedding: Q4_K, output: Q6_K, ...same(Q4_K), attnV: Q6_K, ffnDown: Q6_K },
      extraTensors: [{ name: "rope_freqs.weight", dims: [32], type: GgmlType.F32, values: llama3Factors(64, 500000, 8, 256) }],
    },
    limit: { "llama.cpp": 0.5, fast: 1.2 },
    medianLimit: 0.25,
    choices: ["interleaved, theta 500000, rope_freqs.weight factors"],
  },
  {
    name: "llama with declared YaRN (factor 4 from 128), F32 (no rounding flips: the rotary math alone)",
    spec: {
      ...BASE,
      architecture: "llama",
      seed: 32,
      ropeTheta: 10000,
      types: { embedding: F32, ...same(F32) },
      extraMetadata: [
        ["llama.rope.scaling.type", meta.str("yarn")],
        ["llama.rope.scaling.factor", meta.f32(4)],
        ["llama.rope.scaling.original_context_length", meta.u32(128)],
      ],
    },
    limit: { "llama.cpp": 0.006, fast: 0.02 },
    choices: ["yarn scaling x4 from 128"],
  },
  {
    name: "qwen2 with declared linear scaling (factor 2), QKV bias, F16",
    spec: {
      ...BASE,
      architecture: "qwen2",
      seed: 33,
      ropeTheta: 10000,
      qkvBias: true,
      types: { embedding: F16, ...same(F16) },
      extraMetadata: [
        ["qwen2.rope.scaling.type", meta.str("linear")],
        ["qwen2.rope.scaling.factor", meta.f32(2)],
      ],
    },
    limit: { "llama.cpp": 0.015, fast: 0.025 },
    choices: ["half-split, theta 10000, linear scaling x2"],
  },
  {
    name: "qwen3: per-head Q/K norms, head dim 128 with hidden 256, F16 linears, Q8_0 embedding and untied Q8_0 head",
    spec: { ...BASE, architecture: "qwen3", seed: 34, headDim: 128, ropeTheta: 1000000, qkNorm: true, types: { embedding: Q8_0, output: Q8_0, ...same(F16) } },
    limit: { "llama.cpp": 0.08, fast: 0.12 },
    choices: ["q/k norms: per-head RMS norm", "half-split, theta 1000000", "own weight"],
  },
  {
    name: "phi3 (Phi-3.5-like): fused QKV and gate/up, LongRoPE long factors with attention factor, Q4_K/Q6_K",
    spec: {
      ...BASE,
      architecture: "phi3",
      seed: 35,
      ropeTheta: 10000,
      fusedQkv: true,
      fusedGateUp: true,
      types: { embedding: Q4_K, output: Q6_K, ...same(Q4_K), ffnDown: Q6_K },
      extraTensors: [
        { name: "rope_factors_long.weight", dims: [32], type: GgmlType.F32, values: longRopeFactors(1, 64, 20) },
        { name: "rope_factors_short.weight", dims: [32], type: GgmlType.F32, values: longRopeFactors(2, 64, 1) },
      ],
      extraMetadata: [
        ["phi3.rope.scaling.original_context_length", meta.u32(PHI_ORIGINAL)],
        ["phi3.rope.scaling.attn_factor", meta.f32(PHI_ATTN_FACTOR)],
      ],
    },
    limit: { "llama.cpp": 0.4, fast: 1.5 },
    medianLimit: 0.18,
    choices: ["LongRoPE: rope_factors_long.weight", "half-split, theta 10000, rope_factors_long.weight factors"],
  },
  {
    name: "phi3 (Phi-3-mini/Phi-4-like): fused tensors, partial rotary (32 of 64 dims), declared sliding window 16 not applied, Q8_0",
    spec: {
      ...BASE,
      architecture: "phi3",
      seed: 36,
      ropeTheta: 10000,
      ropeDims: 32,
      fusedQkv: true,
      fusedGateUp: true,
      types: { embedding: Q8_0, ...same(Q8_0) },
      extraMetadata: [["phi3.attention.sliding_window", meta.u32(16)]],
    },
    limit: { "llama.cpp": 0.25, fast: 0.7 },
    choices: ["32 of 64 dims", "sliding window: declared 16, not applied"],
  },
];
