/**
 * Q5_K and Q5_0 weights against llama.cpp, on tiny synthetic Llama-family models (see
 * synthetic-parity.test.ts for the method: llama.cpp's top-20 log-probabilities at every prefill
 * and decode step, both numerics). Q5_K is the K-quant of the catalogue's Q5_K_M files (with Q6_K
 * for attn_v/ffn_down); Q5_0 is what llama.cpp's quantizer falls back to in Q4_K_M files for rows
 * that are not a whole number of 256-blocks, beside Q8_0 for Q6_K's.
 *
 * kiln maps both to 8-bit MatMulNBits (MatMulNBits has no 5-bit form): Q5_K as q+128 with zero
 * point 128 plus blocksum(x) @ mins, as Q4_K; Q5_0 as q+112 with zero point 128. With "llama.cpp"
 * numerics Q5_K's activations are rounded to Q8_K super-blocks and Q5_0's to Q8_0 blocks, as
 * llama.cpp's CPU dot products do.
 *
 * Limits are 2-3x the measured maxima (in CASES). Broken on purpose in a scratch copy of the
 * compiler, the cases failed as follows (largest difference / median step, llama.cpp numerics):
 * Q5_K's fifth bit dropped (the Q4_K part alone) 34.6 / 15.4 nats; the fifth bits of the two
 * sub-blocks of a pair swapped 26.2 / 22.9; Q5_0's fifth bits of elements j and j+16 swapped
 * 30.3 / 25.2. Rounding Q5_K's activations to Q8_0 blocks instead of Q8_K super-blocks (the
 * numerics, not the graph) gives 0.47 / 0.22: the median check catches it.
 */
import { GgmlType } from "../../../../src/compiler/gguf/types.js";
import { type TinyModelSpec, writeTinyModel } from "../../../fixtures/synthetic/tiny-model.js";
import { describeSyntheticParity, type ParityCase } from "../../../support/synthetic-parity.js";

const { Q5_0, Q8_0, Q5_K, Q6_K } = GgmlType;

const BASE = { layers: 2, hidden: 256, heads: 4, kvHeads: 2, ffn: 512, contextLength: 512, rmsEps: 1e-6 };
const same = (t: TinyModelSpec["types"]["attnQ"]) => ({ attnQ: t, attnK: t, attnV: t, attnOutput: t, ffnGate: t, ffnUp: t, ffnDown: t });

/**
 * Measured maxima over 3 prompts x 6 steps on a 2-core AMD EPYC, node-llama-cpp 3.21.1, "llama.cpp"
 * / "fast" numerics (median step with llama.cpp numerics): Q5_K 0.199 / 0.625 (0.00016); Q5_0
 * 0.092 / 0.174 (0.00021). The test prints them on every run.
 */
const CASES: Array<ParityCase<TinyModelSpec>> = [
  {
    name: "llama, Q5_K with Q6_K attn_v/ffn_down (Q5_K_M-like), Q5_K tied embedding",
    spec: { ...BASE, architecture: "llama", seed: 21, ropeTheta: 10000, types: { embedding: Q5_K, ...same(Q5_K), attnV: Q6_K, ffnDown: Q6_K } },
    limit: { "llama.cpp": 0.45, fast: 1.5 },
    choices: ["interleaved, theta 10000", "tied to token_embd"],
  },
  {
    name: "qwen2, Q5_0 linears with Q8_0 attn_v/ffn_down, untied Q5_0 output",
    spec: {
      ...BASE,
      architecture: "qwen2",
      seed: 22,
      ropeTheta: 1000000,
      qkvBias: true,
      types: { embedding: Q8_0, output: Q5_0, ...same(Q5_0), attnV: Q8_0, ffnDown: Q8_0 },
    },
    limit: { "llama.cpp": 0.25, fast: 0.45 },
    choices: ["half-split, theta 1000000", "own weight"],
  },
];

describeSyntheticParity("kiln vs llama.cpp on Q5_K and Q5_0 weights", CASES, writeTinyModel);
