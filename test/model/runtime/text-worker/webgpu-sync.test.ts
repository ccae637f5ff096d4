/**
 * A GPU step waits for the device only to bring back its results: no node of the step graph runs on
 * the CPU provider on a value the device computed. Such a node makes onnxruntime copy the value back
 * mid-step (a MemcpyToHost node), and the copy waits for everything queued before it, so on a GPU the
 * host stops recording the rest of the step while the device drains. Shape and position arithmetic
 * on the CPU provider is fine: it reads only the CPU's inputs, and costs uploads.
 *
 * Checked on onnxruntime's profile of a prompt and two decode steps (on CI, Mesa's lavapipe), on tiny
 * random models of each kind of GPU graph: GroupQueryAttention and the explicit attention, Gemma 2's
 * soft caps, Gemma 3's rings, float16 activations. What makes one: a CPU node on a value the device
 * computed, such as GroupQueryAttention's total length taken over int32 lengths (the provider computes
 * those) or a Slice of uint32 bits (the provider slices no uint32).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { compileGguf, type DeviceActivations, type DeviceAttention } from "../../../../src/compiler/compile.js";
import { GgmlType } from "../../../../src/compiler/gguf/types.js";
import { type DeviceStepInputs, WebGpuTextSession } from "../../../../src/runtime/text-worker/webgpu-session.js";
import { writeTinyGemma } from "../../../fixtures/synthetic/tiny-gemma.js";
import { copiesFromDevice, type ProfiledNode, profiledNodes, ranOn } from "../../../support/onnx-profile.js";
import { tinyTokenizer, writeTinyGguf } from "../../../unit/provision/tiny-gguf.js";

const VOCAB = 40;
const F32 = GgmlType.F32 as const;
const TYPES = { embedding: F32, attnQ: F32, attnK: F32, attnV: F32, attnOutput: F32, ffnGate: F32, ffnUp: F32, ffnDown: F32 };
const GEMMA = { hidden: 32, heads: 4, headDim: 16, ffn: 64, contextLength: 64, rmsEps: 1e-6, types: TYPES, layers: 3, window: 4 };

let home: string;
const gguf: Record<string, string> = {};

beforeAll(async () => {
  home = mkdtempSync(join(tmpdir(), "kiln-webgpu-sync-"));
  gguf.llama = join(home, "llama.gguf");
  await writeTinyGguf(gguf.llama, 5, VOCAB);
  gguf.gemma2 = join(home, "gemma2.gguf");
  await writeTinyGemma(
    gguf.gemma2,
    { ...GEMMA, architecture: "gemma2", seed: 41, kvHeads: 2, ropeTheta: 10000, attentionSoftcap: 4, finalSoftcap: 15 },
    tinyTokenizer(VOCAB),
  );
  gguf.gemma3 = join(home, "gemma3.gguf");
  await writeTinyGemma(
    gguf.gemma3,
    { ...GEMMA, architecture: "gemma3", seed: 43, kvHeads: 1, ropeTheta: 1000000, localRopeTheta: 20000, windowPattern: 3, finalSoftcap: 15 },
    tinyTokenizer(VOCAB),
  );
});

afterAll(() => rmSync(home, { recursive: true, force: true }));

/** A step's inputs with one row's constraint allowing every token, and no adjustments. */
function plainInputs(s: WebGpuTextSession): DeviceStepInputs {
  return {
    allPositions: false,
    tokenMask: new Int32Array(s.maskWords).fill(-1),
    adjustIds: new BigInt64Array(1),
    adjustBias: new Float32Array(1),
    adjustRepetition: new Float32Array(1).fill(1),
    adjustSubtract: new Float32Array(1),
    scoreTargets: new BigInt64Array(1),
  };
}

/** The nodes the step graph ran in onnxruntime's profile of a prompt step and two decode steps over `dir`. */
async function stepNodes(dir: string, name: string): Promise<ProfiledNode[]> {
  const profiles = mkdtempSync(join(home, `profile-${name}-`));
  const s = await WebGpuTextSession.load(dir, { slots: 1, deviceKvPositions: 64, profileFilePrefix: join(profiles, "step") });
  try {
    await s.forward(0, 1, 7, [3, 17, 1, 12, 30, 8, 22], plainInputs(s));
    await s.forward(0, 1, 1, [9], plainInputs(s));
    await s.forward(0, 1, 1, [27], plainInputs(s));
    s.endProfiling();
  } finally {
    await s.release();
  }
  // Both profiles: the step graph's and the slot-copy graph's (which ran nothing here).
  return profiledNodes(profiles);
}

describe.each([
  ["llama", "gqa", "float32"],
  ["llama", "explicit", "float32"],
  ["llama", "gqa", "float16"],
  ["gemma2", "gqa", "float32"],
  ["gemma3", "gqa", "float32"],
] as Array<[string, DeviceAttention, DeviceActivations]>)("a %s GPU step, %s attention asked for, %s activations", (model, attention, activations) => {
  it("copies nothing back from the device before its results", async () => {
    const { dir } = await compileGguf({
      slug: model,
      ggufPath: gguf[model],
      home,
      device: "webgpu",
      deviceAttention: attention,
      deviceActivations: activations,
    });
    const nodes = await stepNodes(dir, `${model}-${attention}-${activations}`);
    // The profile saw both providers at work: the device's kernels and the CPU's position arithmetic.
    expect(ranOn(nodes, "WebGpuExecutionProvider")).toBeGreaterThan(50);
    expect(ranOn(nodes, "CPUExecutionProvider")).toBeGreaterThan(0);
    expect(copiesFromDevice(nodes)).toEqual([]);
  }, 120_000);
});
