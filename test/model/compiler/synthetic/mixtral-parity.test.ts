/**
 * kiln's mixture-of-experts graph (Mixtral: `llama` with experts) against llama.cpp on tiny
 * synthetic models, by the method of synthetic-parity.test.ts: llama.cpp's top-20 log-probabilities
 * at every prefill (1, 7 and 40 tokens, so the tokens of one step pick different experts) and decode
 * step, both numerics. Each model has 4 experts per layer, 2 used per token, and quantized experts
 * as the real files have them (Q4_K_M: Q4_K gate/up, Q6_K down; or Q8_0), with the F32 router
 * llama.cpp's quantizer keeps.
 *
 * Limits are 2-3x the measured maxima (in CASES). Breaking the routing on purpose in a scratch copy
 * of the compiler, the Q4_K case failed by (largest difference / median step, llama.cpp numerics):
 * top-1 instead of top-2 10.2 / 2.2 nats; the top-2 probabilities not renormalized 1.5 / 0.67;
 * experts in reverse order 17.8 / 8.9; each expert's down projection taken from the next expert
 * 17.2 / 11.1. (Softmax over the chosen experts' logits instead of renormalizing the full softmax is
 * the same function, so it cannot fail.)
 *
 * "fast" numerics differ more (up to ~2 nats): when two experts' probabilities are nearly equal,
 * onnxruntime's own int8 activation rounding can pick the other one, where "llama.cpp" numerics
 * reproduce llama.cpp's rounding. With "llama.cpp" numerics, the median step depends on where the
 * first rounding flip falls (see synthetic-parity.test.ts): over seeds 41-48 of the Q4_K case it was
 * ~1e-4 for 2 and 0.10-0.16 for the others, because one flip early in a prompt changes that position's
 * KV entries and so every later step. That is the dense emulation's residual, not the routing: the
 * second block below shows kiln's MoE path equal, bit for bit, to its dense path on the same weights
 * (one expert), and llama.cpp's MoE path equals its dense path likewise (checked in a scratch script).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { compileGguf } from "../../../../src/compiler/compile.js";
import { readGguf, readTensorBytes } from "../../../../src/compiler/gguf/index.js";
import { GgmlType } from "../../../../src/compiler/gguf/types.js";
import { TextSession } from "../../../../src/runtime/text-worker/session.js";
import { type MetaValue, meta, type TensorSpec, writeGguf } from "../../../fixtures/gguf/write-gguf.js";
import { type TinyMixtralSpec, writeTinyMixtral } from "../../../fixtures/synthetic/tiny-mixtral.js";
import { describeSyntheticParity, makeRuns, type ParityCase, syntheticTokenizer } from "../../../support/synthetic-parity.js";

const { F32, Q8_0, Q4_K, Q6_K } = GgmlType;

const BASE = { layers: 2, hidden: 256, heads: 4, kvHeads: 2, ffn: 256, experts: 4, expertsUsed: 2, contextLength: 512, rmsEps: 1e-5 };

/**
 * Measured maxima over 3 prompts x 6 steps on a 2-core AMD EPYC, node-llama-cpp 3.21.1, "llama.cpp"
 * / "fast" numerics (median step): Q4_K case 0.187 / 2.07 (1.3e-4); Q8_0 case 0.204 / 0.339 (9e-5).
 * The test prints them on every run.
 */
const CASES: Array<ParityCase<TinyMixtralSpec>> = [
  {
    name: "mixtral, 4 experts top-2, Q4_K gate/up + Q6_K down experts (Q4_K_M-like), untied Q6_K output",
    spec: {
      ...BASE,
      seed: 48,
      ropeTheta: 1000000,
      types: { embedding: Q4_K, output: Q6_K, attention: Q4_K, attnV: Q6_K, router: F32, gateExps: Q4_K, upExps: Q4_K, downExps: Q6_K },
    },
    limit: { "llama.cpp": 0.5, fast: 4.5 },
    // The median step of this weight set hangs on where the first rounding flip falls (0.1-0.16 on
    // 6 of seeds 41-48): above the flip-free default, so that a machine whose rounding flips
    // elsewhere still passes. Q8_K emulation itself is held to the default in kquant-parity.
    medianLimit: 0.25,
    choices: ["mixture of 4 experts, top 2", "interleaved, theta 1000000", "own weight"],
  },
  {
    name: "mixtral, 4 experts top-2, Q8_0 experts and attention, Q8_0 tied embedding",
    spec: { ...BASE, seed: 42, ropeTheta: 10000, types: { embedding: Q8_0, attention: Q8_0, router: F32, gateExps: Q8_0, upExps: Q8_0, downExps: Q8_0 } },
    limit: { "llama.cpp": 0.5, fast: 0.8 },
    choices: ["mixture of 4 experts, top 2", "tied to token_embd"],
  },
];

describeSyntheticParity("kiln vs llama.cpp on synthetic Mixtral models", CASES, writeTinyMixtral);

/** The same weights as a dense `llama` file: one expert's tensors renamed, the router and expert keys dropped. */
async function asDense(moePath: string, densePath: string, tokenizer: Array<[string, MetaValue]>): Promise<void> {
  const file = await readGguf(moePath);
  const tensors: TensorSpec[] = [];
  for (const t of file.tensors) {
    if (t.name.endsWith(".ffn_gate_inp.weight")) continue;
    tensors.push({ name: t.name.replace("_exps.", "."), dims: t.dims.slice(0, 2), type: t.type, data: await readTensorBytes(file, t) });
  }
  const floats = new Set(["llama.rope.freq_base", "llama.attention.layer_norm_rms_epsilon"]);
  const metadata: Array<[string, MetaValue]> = Object.entries(file.metadata)
    .filter(([k]) => !k.startsWith("tokenizer.") && !k.startsWith("llama.expert_"))
    .map(([k, v]) => [k, typeof v === "string" ? meta.str(v) : floats.has(k) ? meta.f32(v as number) : meta.u32(v as number)]);
  await writeGguf(densePath, { metadata: [...metadata, ...tokenizer], tensors });
}

describe("kiln's mixture-of-experts path with one expert equals its dense path on the same weights", () => {
  let work: string;
  const sessions: TextSession[] = [];

  beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), "kiln-moe-dense-"));
    const tokenizer = await syntheticTokenizer();
    const moePath = join(work, "moe.gguf");
    const densePath = join(work, "dense.gguf");
    const types: TinyMixtralSpec["types"] = { embedding: Q8_0, attention: Q4_K, attnV: Q6_K, router: F32, gateExps: Q4_K, upExps: Q4_K, downExps: Q6_K };
    await writeTinyMixtral(moePath, { ...BASE, experts: 1, expertsUsed: 1, seed: 49, ropeTheta: 10000, types }, tokenizer);
    await asDense(moePath, densePath, tokenizer);
    for (const path of [moePath, densePath]) {
      const compiled = await compileGguf({ slug: "synthetic", ggufPath: path, home: join(work, "home"), options: { numerics: "llama.cpp" } });
      sessions.push(await TextSession.load(compiled.dir, { threads: 2 }));
    }
  });

  afterAll(async () => {
    for (const s of sessions) await s.release();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it("gives identical logits at every prefill and decode step (llama.cpp numerics)", async () => {
    const [moe, dense] = sessions;
    for (const run of makeRuns()) {
      moe.kv.truncate(0, 0);
      dense.kv.truncate(0, 0);
      for (const ids of [run.prompt, ...run.decode.map((t) => [t])]) {
        const [a, b] = [await moe.forward(0, 1, ids.length, ids), await dense.forward(0, 1, ids.length, ids)];
        expect(a.length).toBe(b.length);
        let differing = 0;
        for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) differing++;
        expect(differing).toBe(0);
      }
    }
  });
});
