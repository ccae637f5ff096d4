/**
 * Sliding-window models (Gemma 2 and 3) on onnxruntime's WebGPU provider (on CI, Mesa's lavapipe),
 * on tiny random models whose window (4 positions) every prompt here outgrows:
 * - the WebGPU text session gives the CPU artifact's next-token logits on a prompt, a chunk after it
 *   and decode steps of two rows at different lengths, in float32 and in float16. On both targets
 *   a sliding-window layer keeps a ring of 4 positions a slot; on the device the graph computes which
 *   position each ring index holds, and writes a longer chunk's last 4 only;
 * - the engine on the device reuses a cached prefix exactly where the CPU's engine does (while the
 *   rings still hold the window before it), with the CPU's tokens, and gives each sequence what it
 *   gets alone.
 *
 * Bounds, measured on lavapipe (2026-11-28; the test prints them): float32 differs from the CPU
 * artifact by at most 2.8e-6 in a logit, so 1e-3 leaves room for another summation order and still
 * catches a wrong mask (ignoring the window moves these logits by more than 0.01:
 * test/unit/compiler/graph/device-architectures.test.ts); float16 by at most 0.018, bounded at 0.05.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { compileGguf, type CompileResult } from "../../../../src/compiler/compile.js";
import { GgmlType } from "../../../../src/compiler/gguf/types.js";
import { kvBytesPerSlot } from "../../../../src/runtime/artifact/index.js";
import { LoadedModel } from "../../../../src/runtime/loaded-model.js";
import { TextSession } from "../../../../src/runtime/text-worker/session.js";
import { type DeviceStepInputs, WebGpuTextSession } from "../../../../src/runtime/text-worker/webgpu-session.js";
import { type EmittedTokenLogprob, type GenerationRequest, serveLoadedModel, type ServedModel } from "../../../../src/scheduler/index.js";
import { type TinyGemmaSpec, writeTinyGemma } from "../../../fixtures/synthetic/tiny-gemma.js";
import { beyondRounding } from "../../../support/rounding.js";
import { tinyTokenizer } from "../../../unit/provision/tiny-gguf.js";

const F32 = GgmlType.F32 as const;
const TYPES = { embedding: F32, attnQ: F32, attnK: F32, attnV: F32, attnOutput: F32, ffnGate: F32, ffnUp: F32, ffnDown: F32 };
const BASE = { hidden: 32, heads: 4, headDim: 16, ffn: 64, contextLength: 64, rmsEps: 1e-6, types: TYPES };
const VOCAB = 40;
const WINDOW = 4;
const FLOAT32_BOUND = 1e-3;
const FLOAT16_BOUND = 0.05;

const MODELS: Record<string, TinyGemmaSpec> = {
  gemma2: { ...BASE, architecture: "gemma2", seed: 41, layers: 3, kvHeads: 2, ropeTheta: 10000, window: WINDOW, attentionSoftcap: 4, finalSoftcap: 15 },
  gemma3: {
    ...BASE,
    architecture: "gemma3",
    seed: 43,
    layers: 3,
    kvHeads: 1,
    ropeTheta: 1000000,
    localRopeTheta: 20000,
    window: WINDOW,
    windowPattern: 3,
    finalSoftcap: 15,
  },
};

let home: string;
const built: Record<string, { gguf: string; cpu: CompileResult }> = {};

beforeAll(async () => {
  home = mkdtempSync(join(tmpdir(), "kiln-webgpu-window-"));
  for (const [name, spec] of Object.entries(MODELS)) {
    const gguf = join(home, `${name}.gguf`);
    await writeTinyGemma(gguf, spec, tinyTokenizer(VOCAB));
    built[name] = { gguf, cpu: await compileGguf({ slug: name, ggufPath: gguf, home }) };
  }
});

afterAll(() => rmSync(home, { recursive: true, force: true }));

/** Inputs of a step with no constraint and no adjustments. */
function plainInputs(s: WebGpuTextSession, rows: number): DeviceStepInputs {
  return {
    allPositions: false,
    tokenMask: new Int32Array(rows * s.maskWords).fill(-1),
    adjustIds: new BigInt64Array(rows),
    adjustBias: new Float32Array(rows),
    adjustRepetition: new Float32Array(rows).fill(1),
    adjustSubtract: new Float32Array(rows),
    scoreTargets: new BigInt64Array(rows),
  };
}

/** The steps both sessions take: a prompt past the window, a chunk, a second slot's prompt, then both slots decoding together. */
const STEPS: Array<[firstSlot: number, tokens: number[][]]> = [
  [0, [[3, 17, 1, 12, 30, 8, 22]]],
  [0, [[9, 4, 36]]],
  [1, [[5, 2]]],
  [0, [[11], [27]]],
  [0, [[6], [14]]],
  [0, [[38], [19]]],
];

// Gemma 2's soft-capped scores take the explicit attention whatever is asked; Gemma 3's layers GroupQueryAttention by default.
describe.each([
  ["gemma2", "float32", "gqa"],
  ["gemma2", "float16", "gqa"],
  ["gemma3", "float32", "gqa"],
  ["gemma3", "float16", "gqa"],
  ["gemma3", "float32", "explicit"],
] as const)("%s's GPU artifact in %s, %s attention asked for", (name, activations, attention) => {
  it("gives the CPU artifact's logits on a prompt, a chunk and decode steps past the window, two rows at different lengths", async () => {
    const gpu = await compileGguf({
      slug: name,
      ggufPath: built[name].gguf,
      home,
      device: "webgpu",
      deviceActivations: activations,
      deviceAttention: attention,
    });
    const device = await WebGpuTextSession.load(gpu.dir, { slots: 2, deviceKvPositions: 64 });
    const reference = await TextSession.load(built[name].cpu.dir, { slots: 2 });
    try {
      let worst = 0;
      for (const [firstSlot, tokens] of STEPS) {
        const rows = tokens.length;
        const out = await device.forward(firstSlot, rows, tokens[0].length, tokens.flat(), plainInputs(device, rows));
        const want = await reference.forward(firstSlot, rows, tokens[0].length, tokens.flat());
        for (let r = 0; r < rows; r++) {
          const row = want.subarray(r * VOCAB, (r + 1) * VOCAB);
          expect(Number(out.candidateIds[r * out.candidates])).toBe(row.indexOf(Math.max(...row)));
          for (let i = 0; i < out.candidates; i++) {
            const id = Number(out.candidateIds[r * out.candidates + i]);
            worst = Math.max(worst, Math.abs(out.candidateLogits[r * out.candidates + i] - row[id]));
          }
        }
      }
      console.log(`${name} ${activations} ${attention} on the device: largest logit difference from the CPU artifact ${worst.toExponential(2)}`);
      expect(worst).toBeLessThan(activations === "float32" ? FLOAT32_BOUND : FLOAT16_BOUND);
    } finally {
      await device.release();
      await reference.release();
    }
  }, 240_000);
});

describe("the engine on a sliding-window GPU model", () => {
  it("reuses a cached prefix while the rings hold its window, as on the CPU, and gives each sequence what it gets alone", async () => {
    const gpu = await compileGguf({ slug: "gemma3", ggufPath: built.gemma3.gguf, home, device: "webgpu" });
    const slots = 2;
    const capacity = 128;
    const serve = async (dir: string, device: "cpu" | "webgpu") => {
      const loaded = await LoadedModel.load(dir, { device, slots, ...(device === "webgpu" ? { deviceKvPositions: capacity } : {}) });
      // Prompts a token a step: the engine reuses a cached prefix only at whole prefill chunks, and the rings are short.
      return serveLoadedModel(loaded, { maxRunning: slots, prefillChunk: 1, kvMemoryBytes: slots * kvBytesPerSlot(loaded.manifest.shape, capacity) });
    };
    const onDevice = await serve(gpu.dir, "webgpu");
    const onCpu = await serve(built.gemma3.cpu.dir, "cpu");
    try {
      const ask = (promptIds: number[], maxTokens: number): GenerationRequest => ({
        promptIds,
        maxTokens,
        // The end token (id 0) kept out, so that every run decodes its steps.
        sampling: { temperature: 0, logprobs: true, top_logprobs: 5, logit_bias: { "0": -100 } },
        logprobs: { top: 5 },
      });
      const run = async (model: ServedModel, request: GenerationRequest) => {
        const steps: EmittedTokenLogprob[] = [];
        let cached = 0;
        for await (const e of model.engine.submit(request)) {
          if (e.type === "delta") steps.push(...(e.logprobs ?? []));
          if (e.type === "finish") cached = e.cachedPromptTokens;
        }
        return { steps, cached };
      };
      const prefix = [3, 17, 1, 12, 30, 8, 22, 9, 4, 36, 11];
      // The second prompt continues the first: its 11 cached positions are reused while the rings (4 positions) still hold the window before them.
      const first = ask(prefix, 1);
      const second = ask([...prefix, 27, 6, 14], 5);
      const other = ask([5, 2, 27, 6, 14, 38, 19, 1], 5);
      const results: Record<string, Array<{ steps: EmittedTokenLogprob[]; cached: number }>> = {};
      for (const [name, model] of [
        ["cpu", onCpu],
        ["webgpu", onDevice],
      ] as const) {
        results[name] = [await run(model, first), await run(model, second)];
      }
      const [cpuSecond, gpuSecond] = [results.cpu[1], results.webgpu[1]];
      expect(cpuSecond.cached).toBeGreaterThan(WINDOW);
      expect(gpuSecond.cached).toBe(cpuSecond.cached);
      expect(gpuSecond.steps).toHaveLength(5);
      expect(gpuSecond.steps.map((s) => s.token)).toEqual(cpuSecond.steps.map((s) => s.token));
      expect(beyondRounding(cpuSecond.steps, gpuSecond.steps)).toBeNull();
      // Two sequences at once on the device, each as alone.
      const otherAlone = await run(onDevice, other);
      const [a, b] = await Promise.all([run(onDevice, second), run(onDevice, other)]);
      expect(beyondRounding(gpuSecond.steps, a.steps)).toBeNull();
      expect(beyondRounding(otherAlone.steps, b.steps)).toBeNull();
    } finally {
      await onDevice.close();
      await onCpu.close();
    }
  }, 240_000);
});
