/**
 * The GPU compile target on every architecture the CPU target builds, without a GPU: the device graph
 * is plain ONNX, so onnxruntime's CPU provider runs it here on tiny random models (F32 weights, so
 * that both graphs compute the same products). Each step's candidates and log-normalizer must be the
 * CPU graph's on a prompt, a chunk after it and decode steps of two rows at different lengths, with
 * GroupQueryAttention (the default) and with the explicit attention.
 *
 * Sliding-window models (Gemma 2 and 3, window 4, which every prompt here outgrows): their
 * sliding-window layers keep rings of 4 positions on both targets (on the device, position p at index
 * p mod 4, positions computed in the graph; a 7-token prompt writes only its last 4), attended by the
 * explicit attention masked to each query's last 4 positions; Gemma 2's soft-capped scores take the
 * explicit attention on every layer. The same model without its window gives logits far outside the
 * tolerance, so a window the device graph ignored would fail.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as ort from "onnxruntime-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { compileGguf, type CompileResult } from "../../../../src/compiler/compile.js";
import { GgmlType } from "../../../../src/compiler/gguf/types.js";
import { meta } from "../../../fixtures/gguf/write-gguf.js";
import { ARTIFACT_FILES, DEVICE_GRAPH as D, devicePoolDims, maskWords, type ModelShape, slidingCacheCapacity } from "../../../../src/runtime/artifact/index.js";
import { TextSession } from "../../../../src/runtime/text-worker/session.js";
import { type TinyGemmaSpec, writeTinyGemma } from "../../../fixtures/synthetic/tiny-gemma.js";
import { writeTinyMixtral } from "../../../fixtures/synthetic/tiny-mixtral.js";
import { Random, type TinyModelSpec, writeTinyModel } from "../../../fixtures/synthetic/tiny-model.js";
import { tinyTokenizer } from "../../provision/tiny-gguf.js";
import { decodeMessage, messages, stepResults, text } from "../support.js";

/** A step graph's run, unpacked. */
const results = (out: Record<string, ort.Tensor>) => stepResults(out, VOCAB);

const F32 = GgmlType.F32 as const;
const TYPES = { embedding: F32, attnQ: F32, attnK: F32, attnV: F32, attnOutput: F32, ffnGate: F32, ffnUp: F32, ffnDown: F32 };
/** Head dim 16 over a hidden width of 32 and 4 heads: not hidden / heads, as in Gemma. */
const BASE = { hidden: 32, heads: 4, headDim: 16, ffn: 64, contextLength: 64, rmsEps: 1e-6, types: TYPES };
const VOCAB = 40;
const WINDOW = 4;
const SLOTS = 2;
const CAPACITY = 32;

/** The Llama family's base: head dim hidden / heads (8), below the 16 GroupQueryAttention needs to rotate itself, so rotary runs before it. */
const { headDim: _gemmaHeadDim, ...FAMILY_BASE } = BASE;

const LLAMA_FAMILY: Record<string, TinyModelSpec> = {
  // QKV biases and a linear rotary scaling.
  qwen2: {
    ...FAMILY_BASE,
    architecture: "qwen2",
    seed: 51,
    layers: 2,
    kvHeads: 2,
    ropeTheta: 10000,
    qkvBias: true,
    extraMetadata: [
      ["qwen2.rope.scaling.type", meta.str("linear")],
      ["qwen2.rope.scaling.factor", meta.f32(2)],
    ],
  },
  // Per-head Q/K norms before rotary; an untied head.
  // Head dim 16: GroupQueryAttention applies the rotary itself.
  qwen3: {
    ...FAMILY_BASE,
    headDim: 16,
    architecture: "qwen3",
    seed: 52,
    layers: 2,
    kvHeads: 1,
    ropeTheta: 1000000,
    qkNorm: true,
    types: { ...TYPES, output: F32 },
  },
  // Fused QKV and gate/up, a rotary over half of each head with LongRoPE factors.
  phi3: {
    ...FAMILY_BASE,
    architecture: "phi3",
    seed: 53,
    layers: 2,
    kvHeads: 4,
    ropeTheta: 10000,
    ropeDims: 8,
    fusedQkv: true,
    fusedGateUp: true,
    extraTensors: [
      { name: "rope_factors_long.weight", dims: [4], type: F32, values: Float32Array.from({ length: 4 }, (_, i) => 1 + 3 * i + new Random(i).uniform()) },
      { name: "rope_factors_short.weight", dims: [4], type: F32, values: Float32Array.of(1, 1.1, 1.2, 1.3) },
    ],
    extraMetadata: [
      ["phi3.rope.scaling.original_context_length", meta.u32(16)],
      ["phi3.rope.scaling.attn_factor", meta.f32(1.2)],
    ],
  },
};

const MODELS: Record<string, TinyGemmaSpec> = {
  // Layers 0 and 2 slide; soft-capped scores and logits.
  gemma2: { ...BASE, architecture: "gemma2", seed: 41, layers: 3, kvHeads: 2, ropeTheta: 10000, window: WINDOW, attentionSoftcap: 4, finalSoftcap: 15 },
  // Layers 0 and 1 slide, layer 2 is global with its own rotary base; Q/K norms; one KV head.
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
beforeAll(() => {
  home = mkdtempSync(join(tmpdir(), "kiln-device-architectures-"));
});
afterAll(() => rmSync(home, { recursive: true, force: true }));

/** One step's feeds for rows of the same token count in consecutive slots from `firstSlot`, after `pasts` cached positions each. */
function stepFeeds(shape: ModelShape, pools: Record<string, ort.Tensor>, firstSlot: number, pasts: number[], tokens: number[][]): Record<string, ort.Tensor> {
  const rows = tokens.length;
  const s = tokens[0].length;
  const group = shape.heads / shape.kvHeads;
  const pastMask = new Float32Array(rows * CAPACITY).fill(-Infinity);
  pasts.forEach((past, r) => pastMask.fill(0, r * CAPACITY, r * CAPACITY + past));
  const newMask = new Float32Array(group * s * s);
  for (let g = 0; g < group; g++) for (let q = 0; q < s; q++) for (let k = q + 1; k < s; k++) newMask[(g * s + q) * s + k] = -Infinity;
  const words = maskWords(shape.vocab);
  return {
    [D.inputIds]: new ort.Tensor("int64", BigInt64Array.from(tokens.flat(), BigInt), [rows, s]),
    [D.positionIds]: new ort.Tensor(
      "int64",
      BigInt64Array.from(
        tokens.flatMap((row, r) => row.map((_, i) => pasts[r] + i)),
        BigInt,
      ),
      [rows, s],
    ),
    [D.pastMask]: new ort.Tensor("float32", pastMask, [rows, 1, 1, CAPACITY]),
    [D.newMask]: new ort.Tensor("float32", newMask, [1, 1, group * s, s]),
    [D.logitsFrom]: new ort.Tensor("int64", BigInt64Array.of(-1n), [1]),
    [D.firstSlot]: new ort.Tensor("int64", BigInt64Array.of(BigInt(firstSlot)), [1]),
    [D.tokenMask]: new ort.Tensor("int32", new Int32Array(rows * words).fill(-1), [rows, words]),
    [D.adjustIds]: new ort.Tensor("int64", new BigInt64Array(rows), [rows, 1]),
    [D.adjustBias]: new ort.Tensor("float32", new Float32Array(rows), [rows, 1]),
    [D.adjustRepetition]: new ort.Tensor("float32", new Float32Array(rows).fill(1), [rows, 1]),
    [D.adjustSubtract]: new ort.Tensor("float32", new Float32Array(rows), [rows, 1]),
    [D.scoreTargets]: new ort.Tensor("int64", new BigInt64Array(rows), [rows, 1]),
    ...pools,
  };
}

/** The device graph on the CPU provider with its pools carried from step to step, beside the CPU graph's session. */
class Pair {
  private pools: Record<string, ort.Tensor> = {};
  private readonly lengths = new Array<number>(SLOTS).fill(0);

  private constructor(
    private readonly shape: ModelShape,
    private readonly device: ort.InferenceSession,
    readonly reference: TextSession,
  ) {
    for (let l = 0; l < shape.layers; l++) {
      // A sliding-window layer's pools are rings, as the runtime makes them (DeviceKvPool).
      const sw = shape.slidingWindow;
      const positions = sw?.layers.includes(l) ? Math.min(CAPACITY, slidingCacheCapacity(sw.window)) : CAPACITY;
      const n = SLOTS * positions * shape.kvHeads * shape.headDim;
      for (const name of [D.keyPool(l), D.valuePool(l)])
        this.pools[name] = new ort.Tensor("float32", new Float32Array(n), devicePoolDims(SLOTS, positions, shape));
    }
  }

  static async open(gpu: CompileResult, cpu: CompileResult): Promise<Pair> {
    const device = await ort.InferenceSession.create(join(gpu.dir, ARTIFACT_FILES.graph));
    return new Pair(gpu.manifest.shape, device, await TextSession.load(cpu.dir, { slots: SLOTS }));
  }

  /** One step on both; returns the worst logit difference over every row's candidates, after checking ids and normalizers. */
  async step(firstSlot: number, tokens: number[][]): Promise<number> {
    const pasts = tokens.map((_, r) => this.lengths[firstSlot + r]);
    const out = await this.device.run(stepFeeds(this.shape, this.pools, firstSlot, pasts, tokens));
    for (let l = 0; l < this.shape.layers; l++) {
      this.pools[D.keyPool(l)] = out[D.keyPoolOut(l)] as ort.Tensor;
      this.pools[D.valuePool(l)] = out[D.valuePoolOut(l)] as ort.Tensor;
    }
    tokens.forEach((row, r) => (this.lengths[firstSlot + r] += row.length));
    const want = await this.reference.forward(firstSlot, tokens.length, tokens[0].length, tokens.flat());
    const k = results(out).candidates;
    const ids = results(out).candidateIds;
    const logits = results(out).candidateLogits;
    let worst = 0;
    for (let r = 0; r < tokens.length; r++) {
      const row = want.subarray(r * this.shape.vocab, (r + 1) * this.shape.vocab);
      const best = row.indexOf(Math.max(...row));
      expect(Number(ids[r * k])).toBe(best);
      for (let i = 0; i < k; i++) worst = Math.max(worst, Math.abs(logits[r * k + i] - row[Number(ids[r * k + i])]));
      const lse = Math.log(row.reduce((sum, v) => sum + Math.exp(v), 0));
      expect(results(out).logNormalizer[r]).toBeCloseTo(lse, 4);
    }
    return worst;
  }

  async release(): Promise<void> {
    await this.device.release();
    await this.reference.release();
  }
}

/** Writes one model of the table below. */
const WRITERS: Record<string, (path: string) => Promise<unknown>> = {
  ...Object.fromEntries(Object.entries(LLAMA_FAMILY).map(([name, spec]) => [name, (path: string) => writeTinyModel(path, spec, tinyTokenizer(VOCAB))])),
  llama: (path) => writeTinyModel(path, { ...FAMILY_BASE, architecture: "llama", seed: 50, layers: 2, kvHeads: 2, ropeTheta: 10000 }, tinyTokenizer(VOCAB)),
  // Mixtral: a llama with 4 experts, 2 per token.
  mixtral: (path) =>
    writeTinyMixtral(
      path,
      {
        ...FAMILY_BASE,
        seed: 54,
        layers: 2,
        kvHeads: 2,
        experts: 4,
        expertsUsed: 2,
        ropeTheta: 10000,
        types: { embedding: F32, attention: F32, router: F32, gateExps: F32, upExps: F32, downExps: F32 },
      },
      tinyTokenizer(VOCAB),
    ),
};

/** A prompt past Gemma's window, a chunk, a second slot's prompt, then both slots decoding together. */
async function runSteps(pair: Pair): Promise<number> {
  const worst: number[] = [];
  worst.push(await pair.step(0, [[3, 17, 1, 12, 30, 8, 22]]));
  worst.push(await pair.step(0, [[9, 4, 36]]));
  worst.push(await pair.step(1, [[5, 2]]));
  for (const next of [
    [11, 27],
    [6, 14],
    [38, 19],
    [1, 33],
  ])
    worst.push(await pair.step(0, [[next[0]], [next[1]]]));
  return Math.max(...worst);
}

describe.each(Object.keys(WRITERS))("the GPU target on %s", (name) => {
  let ggufPath: string;
  let cpu: CompileResult;
  beforeAll(async () => {
    ggufPath = join(home, `${name}.gguf`);
    await WRITERS[name](ggufPath);
    cpu = await compileGguf({ slug: name, ggufPath, home });
  });

  it.each(["gqa", "explicit"] as const)(
    "gives the CPU graph's candidates with %s attention: a prompt, a chunk, two rows at different lengths",
    async (attention) => {
      const gpu = await compileGguf({ slug: name, ggufPath, home, device: "webgpu", deviceAttention: attention });
      const pair = await Pair.open(gpu, cpu);
      try {
        expect(await runSteps(pair)).toBeLessThan(1e-4);
      } finally {
        await pair.release();
      }
    },
  );
});

describe.each(Object.entries(MODELS))("the GPU target on %s's sliding-window layers", (name, spec) => {
  let ggufPath: string;
  let cpu: CompileResult;
  let gpu: CompileResult;
  beforeAll(async () => {
    ggufPath = join(home, `${name}.gguf`);
    await writeTinyGemma(ggufPath, spec, tinyTokenizer(VOCAB));
    cpu = await compileGguf({ slug: name, ggufPath, home });
    gpu = await compileGguf({ slug: name, ggufPath, home, device: "webgpu" });
  });

  it("keeps their KV in rings attended by the explicit attention, and says so; GroupQueryAttention stays on the other layers unless soft-capped scores need the explicit one", () => {
    expect(gpu.manifest.shape.slidingWindow).toEqual(cpu.manifest.shape.slidingWindow);
    const window = gpu.manifest.choices.find((c) => c.what === "device sliding window")?.choice;
    expect(window).toContain(`rings of ${slidingCacheCapacity(WINDOW)} positions`);
    expect(window).toContain(`masked to each query's last ${WINDOW} positions`);
    const attention = gpu.manifest.choices.find((c) => c.what === "device attention")?.choice;
    if (spec.attentionSoftcap === undefined) expect(attention).toBeUndefined();
    else expect(attention).toBe("explicit on every layer, GroupQueryAttention asked for");
    expect(gpu.manifest.io.inputs).not.toContain("ring_positions");
  });

  it("writes each ring only after reading it: every ring ScatterND depends on its layer's past slice", () => {
    // NodeProto: input 1, output 2, op_type 4; ModelProto.graph 7, GraphProto.node 1.
    const graph = decodeMessage(messages(decodeMessage(readFileSync(join(gpu.dir, ARTIFACT_FILES.graph))), 7)[0]);
    const nodes = messages(graph, 1).map((bytes) => {
      const node = decodeMessage(bytes);
      return { op: text(messages(node, 4)[0]), inputs: messages(node, 1).map(text), outputs: messages(node, 2).map(text) };
    });
    const producer = new Map(nodes.flatMap((n) => n.outputs.map((o) => [o, n] as const)));
    const dependsOn = (tensor: string, wanted: string): boolean => {
      const seen = new Set<string>();
      const stack = [tensor];
      while (stack.length > 0) {
        const t = stack.pop()!;
        if (t === wanted) return true;
        if (seen.has(t)) continue;
        seen.add(t);
        stack.push(...(producer.get(t)?.inputs ?? []));
      }
      return false;
    };
    const sw = gpu.manifest.shape.slidingWindow!;
    for (let l = 0; l < gpu.manifest.shape.layers; l++) {
      const write = producer.get(D.keyPoolOut(l))!;
      expect(write.op).toBe("ScatterND");
      // Its indices (input 1) wait for the layer's past slice where the pool is a ring.
      expect(dependsOn(write.inputs[1], `past_value.${l}`), `layer ${l}`).toBe(sw.layers.includes(l));
    }
  });

  it.each(["gqa", "explicit"] as const)(
    "gives the CPU graph's candidates with %s attention asked for on a prompt, a chunk and decode steps past the window, two rows at different lengths",
    async (attention) => {
      const pair = await Pair.open(await compileGguf({ slug: name, ggufPath, home, device: "webgpu", deviceAttention: attention }), cpu);
      try {
        expect(await runSteps(pair)).toBeLessThan(1e-4);
      } finally {
        await pair.release();
      }
    },
  );

  it("would fail with the window ignored: the same model without it is far from these logits", async () => {
    const unwindowed = join(home, `${name}-unwindowed.gguf`);
    await writeTinyGemma(unwindowed, { ...spec, window: undefined }, tinyTokenizer(VOCAB));
    const plain = await TextSession.load((await compileGguf({ slug: `${name}-plain`, ggufPath: unwindowed, home })).dir, { slots: 1 });
    const windowed = await TextSession.load(cpu.dir, { slots: 1 });
    try {
      const prompt = [3, 17, 1, 12, 30, 8, 22, 9, 4, 36];
      const a = await plain.forward(0, 1, prompt.length, prompt);
      const b = await windowed.forward(0, 1, prompt.length, prompt);
      expect(Math.max(...a.map((v, i) => Math.abs(v - b[i])))).toBeGreaterThan(0.01);
    } finally {
      await plain.release();
      await windowed.release();
    }
  });
});
