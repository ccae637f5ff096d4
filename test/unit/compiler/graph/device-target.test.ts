/**
 * The GPU compile target without a GPU: its graphs are plain ONNX, so onnxruntime's CPU provider
 * runs them here on a tiny random model. The target is its own artifact with the device contract;
 * its candidates are the CPU graph's logits, masked and adjusted as asked; its pools carry a
 * sequence from step to step and from slot to slot; its weight forms (`deviceWeights`) are
 * MatMulNBits of the asked bits and blocks, or dense.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as ort from "onnxruntime-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { compileGguf, type CompileResult } from "../../../../src/compiler/compile.js";
import { ARTIFACT_FILES, DEVICE_GRAPH as D, deviceGraphIo, devicePoolDims, maskWords, SLOT_COPY_GRAPH } from "../../../../src/runtime/artifact/index.js";
import { TextSession } from "../../../../src/runtime/text-worker/session.js";
import { writeTinyGguf } from "../../provision/tiny-gguf.js";
import { decodeMessage, messages, stepResults, text } from "../support.js";

/** A step graph's run, unpacked. */
const results = (out: Record<string, ort.Tensor>) => stepResults(out, gpu.manifest.shape.vocab);

let home: string;
let cpu: CompileResult;
let gpu: CompileResult;
let step: ort.InferenceSession;
let copy: ort.InferenceSession;
const SLOTS = 2;
const CAPACITY = 16;

beforeAll(async () => {
  home = mkdtempSync(join(tmpdir(), "kiln-device-target-"));
  const ggufPath = join(home, "tiny.gguf");
  await writeTinyGguf(ggufPath);
  cpu = await compileGguf({ slug: "tiny", ggufPath, home });
  gpu = await compileGguf({ slug: "tiny", ggufPath, home, device: "webgpu" });
  step = await ort.InferenceSession.create(join(gpu.dir, ARTIFACT_FILES.graph));
  copy = await ort.InferenceSession.create(join(gpu.dir, ARTIFACT_FILES.slotCopyGraph));
});

afterAll(async () => {
  await step?.release();
  await copy?.release();
  rmSync(home, { recursive: true, force: true });
});

/** A device step's feeds for `tokens` of one row in slot `slot` after `past` cached positions, reading `span` positions of the slot (its past span; default: all). */
function feeds(
  pools: Record<string, ort.Tensor>,
  slot: number,
  past: number,
  tokens: number[],
  options: { mask?: Int32Array; adjust?: [number, number, number, number]; half?: boolean; span?: number } = {},
) {
  const shape = gpu.manifest.shape;
  const s = tokens.length;
  const group = shape.heads / shape.kvHeads;
  const span = options.span ?? CAPACITY;
  const pastMask = new Float32Array(span).fill(-Infinity).fill(0, 0, past);
  const newMask = new Float32Array(group * s * s);
  for (let g = 0; g < group; g++) for (let q = 0; q < s; q++) for (let k = q + 1; k < s; k++) newMask[(g * s + q) * s + k] = -Infinity;
  const [id, bias, repetition, subtract] = options.adjust ?? [0, 0, 1, 0];
  return {
    [D.inputIds]: new ort.Tensor("int64", BigInt64Array.from(tokens, BigInt), [1, s]),
    [D.positionIds]: new ort.Tensor(
      "int64",
      BigInt64Array.from(tokens, (_, i) => BigInt(past + i)),
      [1, s],
    ),
    [D.pastMask]: additive(pastMask, [1, 1, 1, span], options.half),
    [D.newMask]: additive(newMask, [1, 1, group * s, s], options.half),
    [D.logitsFrom]: new ort.Tensor("int64", BigInt64Array.of(-1n), [1]),
    [D.firstSlot]: new ort.Tensor("int64", BigInt64Array.of(BigInt(slot)), [1]),
    [D.tokenMask]: new ort.Tensor("int32", options.mask ?? new Int32Array(maskWords(shape.vocab)).fill(-1), [1, maskWords(shape.vocab)]),
    [D.adjustIds]: new ort.Tensor("int64", BigInt64Array.of(BigInt(id)), [1, 1]),
    [D.adjustBias]: new ort.Tensor("float32", Float32Array.of(bias), [1, 1]),
    [D.adjustRepetition]: new ort.Tensor("float32", Float32Array.of(repetition), [1, 1]),
    [D.adjustSubtract]: new ort.Tensor("float32", Float32Array.of(subtract), [1, 1]),
    [D.scoreTargets]: new ort.Tensor("int64", new BigInt64Array(1), [1, 1]),
    ...pools,
  };
}

/** A decode step of slots 0 and 1, one token each after `pasts` cached positions, reading `span` positions of each. */
function twoRows(pools: Record<string, ort.Tensor>, pasts: [number, number], tokens: [number, number], span = CAPACITY) {
  const words = maskWords(gpu.manifest.shape.vocab);
  const group = gpu.manifest.shape.heads / gpu.manifest.shape.kvHeads;
  const pastMask = new Float32Array(2 * span).fill(-Infinity);
  pasts.forEach((past, r) => pastMask.fill(0, r * span, r * span + past));
  return {
    ...feeds(pools, 0, 0, [0]),
    [D.inputIds]: new ort.Tensor("int64", BigInt64Array.from(tokens, BigInt), [2, 1]),
    [D.positionIds]: new ort.Tensor("int64", BigInt64Array.from(pasts, BigInt), [2, 1]),
    [D.pastMask]: new ort.Tensor("float32", pastMask, [2, 1, 1, span]),
    [D.newMask]: new ort.Tensor("float32", new Float32Array(group), [1, 1, group, 1]),
    [D.tokenMask]: new ort.Tensor("int32", new Int32Array(2 * words).fill(-1), [2, words]),
    [D.adjustIds]: new ort.Tensor("int64", new BigInt64Array(2), [2, 1]),
    [D.adjustBias]: new ort.Tensor("float32", new Float32Array(2), [2, 1]),
    [D.adjustRepetition]: new ort.Tensor("float32", new Float32Array(2).fill(1), [2, 1]),
    [D.adjustSubtract]: new ort.Tensor("float32", new Float32Array(2), [2, 1]),
    [D.scoreTargets]: new ort.Tensor("int64", new BigInt64Array(2), [2, 1]),
  };
}

/** A 0 / -inf mask as float32, or as float16 for a half-precision graph. */
function additive(values: Float32Array, dims: number[], half = false): ort.Tensor {
  if (!half) return new ort.Tensor("float32", values, dims);
  return new ort.Tensor(
    "float16",
    Uint16Array.from(values, (v) => (v === 0 ? 0 : 0xfc00)),
    dims,
  );
}

/** Zero pools, float32 or (for a half-precision graph, whose pools are in its activations' type) float16. */
function emptyPools(half = false): Record<string, ort.Tensor> {
  const { layers, kvHeads, headDim } = gpu.manifest.shape;
  const pools: Record<string, ort.Tensor> = {};
  const n = SLOTS * CAPACITY * kvHeads * headDim;
  const dims = devicePoolDims(SLOTS, CAPACITY, { kvHeads, headDim });
  for (let l = 0; l < layers; l++) {
    for (const name of [D.keyPool(l), D.valuePool(l)])
      pools[name] = half ? new ort.Tensor("float16", new Uint16Array(n), dims) : new ort.Tensor("float32", new Float32Array(n), dims);
  }
  return pools;
}

/** The output pools of a run, as the next run's input pools. */
function poolsOf(out: ort.InferenceSession.OnnxValueMapType): Record<string, ort.Tensor> {
  const pools: Record<string, ort.Tensor> = {};
  for (let l = 0; l < gpu.manifest.shape.layers; l++) {
    pools[D.keyPool(l)] = out[D.keyPoolOut(l)] as ort.Tensor;
    pools[D.valuePool(l)] = out[D.valuePoolOut(l)] as ort.Tensor;
  }
  return pools;
}

/** The `bits` and `block_size` of each MatMulNBits node of an artifact's step graph (ModelProto.graph 7, GraphProto.node 1, NodeProto op_type 4 and attribute 5). */
function matMulNBits(dir: string): Array<{ bits: number; blockSize: number }> {
  const graph = decodeMessage(messages(decodeMessage(readFileSync(join(dir, ARTIFACT_FILES.graph))), 7)[0]);
  return messages(graph, 1)
    .map((node) => decodeMessage(node))
    .filter((node) => text(messages(node, 4)[0]) === "MatMulNBits")
    .map((node) => {
      // AttributeProto: name 1, i 3.
      const ints = Object.fromEntries(
        messages(node, 5).map((a) => {
          const fields = decodeMessage(a);
          const i = fields.find((f) => f.field === 3);
          return [text(messages(fields, 1)[0]), i ? Number(i.value) : undefined];
        }),
      );
      return { bits: ints.bits!, blockSize: ints.block_size! };
    });
}

/** The CPU graph's logits, descending, as [id, logit]. */
function ranked(logits: Float32Array): Array<[number, number]> {
  return [...logits].map((v, i) => [i, v] as [number, number]).sort((a, b) => b[1] - a[1] || a[0] - b[0]);
}

describe("the GPU compile target", () => {
  it("is its own artifact, with the device contract and a slot-copy graph", () => {
    expect(gpu.dir).not.toBe(cpu.dir);
    expect(cpu.manifest.device).toBeUndefined();
    expect(gpu.manifest.device).toBe("webgpu");
    expect(gpu.manifest.io).toEqual(deviceGraphIo(gpu.manifest.shape.layers));
    expect(gpu.manifest.files.map((f) => f.path)).toContain(ARTIFACT_FILES.slotCopyGraph);
  });

  it("returns the CPU graph's logits as ranked candidates and its normalizer, step after step, slot to slot", async () => {
    const reference = await TextSession.load(cpu.dir, { slots: 1 });
    try {
      const prompt = [3, 7, 1, 12];
      const want = ranked(await reference.forward(0, 1, prompt.length, prompt));
      const first = await step.run(feeds(emptyPools(), 1, 0, prompt));
      const ids = Array.from(results(first).candidateIds, Number);
      expect(ids).toEqual(want.map(([id]) => id));
      want.forEach(([, logit], i) => expect(results(first).candidateLogits[i]).toBeCloseTo(logit, 4));
      const lse = Math.log(want.reduce((sum, [, v]) => sum + Math.exp(v), 0));
      expect(results(first).logNormalizer[0]).toBeCloseTo(lse, 4);
      // Slot 1's cache, copied to slot 0 on the "device", continues there as the CPU cache does.
      const moved = await copy.run({
        [SLOT_COPY_GRAPH.from]: new ort.Tensor("int64", BigInt64Array.of(1n), [1]),
        [SLOT_COPY_GRAPH.to]: new ort.Tensor("int64", BigInt64Array.of(0n), [1]),
        ...poolsOf(first),
      });
      const next = ranked(await reference.forward(0, 1, 1, [want[0][0]]));
      // Read through a past span of the slot's first 8 positions, as the runtime reads a short sequence.
      const second = await step.run(feeds(poolsOf(moved), 0, prompt.length, [want[0][0]], { span: 8 }));
      expect(Number(results(second).candidateIds[0])).toBe(next[0][0]);
      expect(results(second).candidateLogits[0]).toBeCloseTo(next[0][1], 4);
    } finally {
      await reference.release();
    }
  });

  it("masks by the bitset and adjusts before ranking; log-probabilities keep the masked logit", async () => {
    const prompt = [5, 2];
    const free = await step.run(feeds(emptyPools(), 0, 0, prompt));
    const best = Number(results(free).candidateIds[0]);
    const bestLogit = results(free).candidateLogits[0];
    const mask = new Int32Array(maskWords(gpu.manifest.shape.vocab)).fill(-1);
    mask[best >>> 5] &= ~(1 << (best & 31));
    const masked = await step.run(feeds(emptyPools(), 0, 0, prompt, { mask }));
    expect(Array.from(results(masked).candidateIds, Number).slice(0, -1)).not.toContain(best);
    expect(results(masked).candidateLogits.at(-1)).toBe(-Infinity);
    const penalized = await step.run(feeds(emptyPools(), 0, 0, prompt, { adjust: [best, 0.5, 2, 30] }));
    const ids = Array.from(results(penalized).candidateIds, Number);
    const at = ids.indexOf(best);
    const expected = (bestLogit + 0.5 > 0 ? (bestLogit + 0.5) / 2 : (bestLogit + 0.5) * 2) - 30;
    expect(results(penalized).candidateLogits[at]).toBeCloseTo(expected, 4);
    expect(results(penalized).candidateRaw[at]).toBeCloseTo(bestLogit, 4);
  });

  it("with GroupQueryAttention (the default) gives the explicit attention's candidates: a prompt, a chunk after it, decode steps of two rows at different lengths, through past spans shorter than the pools", async () => {
    const explicit = await compileGguf({ slug: "tiny", ggufPath: join(home, "tiny.gguf"), home, device: "webgpu", deviceAttention: "explicit" });
    expect(explicit.dir).not.toBe(gpu.dir);
    expect(explicit.manifest.io).toEqual(gpu.manifest.io);
    expect(gpu.manifest.choices.find((c) => c.what === "options")?.choice).toContain('"attention":"gqa"');
    const session = await ort.InferenceSession.create(join(explicit.dir, ARTIFACT_FILES.graph));
    try {
      let explicitPools = emptyPools();
      let gqaPools = emptyPools();
      /** One step on both graphs from their own pools; their candidates must agree. */
      const both = async (stepFeeds: (pools: Record<string, ort.Tensor>) => Record<string, ort.Tensor>) => {
        const want = await session.run(stepFeeds(explicitPools));
        const got = await step.run(stepFeeds(gqaPools));
        [explicitPools, gqaPools] = [poolsOf(want), poolsOf(got)];
        const wantLogits = results(want).candidateLogits;
        const gotLogits = results(got).candidateLogits;
        expect(Array.from(results(got).candidateIds).slice(0, 5)).toEqual(Array.from(results(want).candidateIds).slice(0, 5));
        gotLogits.forEach((v, i) => expect(v).toBeCloseTo(wantLogits[i], 4));
        Array.from(results(got).logNormalizer).forEach((v, i) => expect(v).toBeCloseTo(results(want).logNormalizer[i], 4));
      };
      await both((pools) => feeds(pools, 0, 0, [3, 7, 1, 12]));
      await both((pools) => feeds(pools, 0, 4, [9, 4, 6], { span: 8 }));
      await both((pools) => feeds(pools, 1, 0, [5, 2], { span: 2 }));
      // Slots 0 and 1 decode together, at 7 and 2 cached positions, in past spans shorter than the capacity.
      await both((pools) => twoRows(pools, [7, 2], [8, 11], 8));
      await both((pools) => twoRows(pools, [8, 3], [13, 1], 12));
      await both((pools) => twoRows(pools, [9, 4], [2, 6]));
    } finally {
      await session.release();
    }
  });

  it("with deviceWeights re-quantizes every linear to MatMulNBits of those bits and blocks, near the float graph; 16 bits are its dense weights", async () => {
    const ggufPath = join(home, "tiny.gguf");
    // The default form is the source's: the same artifact, its options silent about it; the CPU ignores the option.
    expect((await compileGguf({ slug: "tiny", ggufPath, home, device: "webgpu", options: { deviceWeights: "source" } })).dir).toBe(gpu.dir);
    expect(gpu.manifest.choices.find((c) => c.what === "options")?.choice).not.toContain("deviceWeights");
    expect((await compileGguf({ slug: "tiny", ggufPath, home, options: { deviceWeights: { bits: 8, blockSize: 64 } } })).dir).toBe(cpu.dir);
    // The tiny model's weights are F32: its default GPU graph has dense matmuls only.
    expect(matMulNBits(gpu.dir)).toEqual([]);
    const eight = await compileGguf({ slug: "tiny", ggufPath, home, device: "webgpu", options: { deviceWeights: { bits: 8, blockSize: 64 } } });
    expect(eight.dir).not.toBe(gpu.dir);
    expect(eight.manifest.choices.find((c) => c.what === "options")?.choice).toContain('"deviceWeights":{"bits":8,"blockSize":64}');
    // QKV, the attention output, gate|up, down and the LM head (K = 32 of the hidden width pads one block of 64).
    expect(matMulNBits(eight.dir)).toEqual(Array.from({ length: 5 }, () => ({ bits: 8, blockSize: 64 })));
    const four = await compileGguf({ slug: "tiny", ggufPath, home, device: "webgpu", options: { deviceWeights: { bits: 4, blockSize: 32 } } });
    expect(matMulNBits(four.dir)).toEqual(Array.from({ length: 5 }, () => ({ bits: 4, blockSize: 32 })));
    const dense = await compileGguf({ slug: "tiny", ggufPath, home, device: "webgpu", options: { deviceWeights: { bits: 16 } } });
    expect(dense.manifest.choices.find((c) => c.what === "options")?.choice).toContain('"deviceWeights":{"bits":16}');
    expect(matMulNBits(dense.dir)).toEqual([]);
    const prompt = [3, 7, 1, 12];
    const want = await step.run(feeds(emptyPools(), 0, 0, prompt));
    const wantLogits = results(want).candidateLogits;
    const wantIds = Array.from(results(want).candidateIds, Number);
    for (const [artifact, digits] of [
      [dense, 5],
      [eight, 1],
    ] as const) {
      const session = await ort.InferenceSession.create(join(artifact.dir, ARTIFACT_FILES.graph));
      try {
        const got = await session.run(feeds(emptyPools(), 0, 0, prompt));
        const gotIds = Array.from(results(got).candidateIds, Number);
        expect(gotIds[0]).toBe(wantIds[0]);
        gotIds.forEach((id, i) => expect(results(got).candidateLogits[i]).toBeCloseTo(wantLogits[wantIds.indexOf(id)], digits));
      } finally {
        await session.release();
      }
    }
  });

  it("with float16 activations (and float16 pools) gives the float32 graph's candidates within half-precision rounding, a prompt and a step after it", async () => {
    const ggufPath = join(home, "tiny.gguf");
    const half = await compileGguf({ slug: "tiny", ggufPath, home, device: "webgpu", deviceActivations: "float16" });
    expect(half.dir).not.toBe(gpu.dir);
    const session = await ort.InferenceSession.create(join(half.dir, ARTIFACT_FILES.graph));
    try {
      const prompt = [3, 7, 1, 12];
      const want = await step.run(feeds(emptyPools(), 0, 0, prompt));
      const got = await session.run(feeds(emptyPools(true), 0, 0, prompt, { half: true }));
      const wantLogits = results(want).candidateLogits;
      const gotIds = Array.from(results(got).candidateIds, Number);
      const wantIds = Array.from(results(want).candidateIds, Number);
      expect(gotIds[0]).toBe(wantIds[0]);
      gotIds.forEach((id, i) => expect(results(got).candidateLogits[i]).toBeCloseTo(wantLogits[wantIds.indexOf(id)], 1));
      // Its pools are float16, and a decode step reads the prompt back from them.
      expect(got[D.keyPoolOut(0)].type).toBe("float16");
      const next = [wantIds[0]];
      const wantNext = await step.run(feeds(poolsOf(want), 0, prompt.length, next));
      const gotNext = await session.run(feeds(poolsOf(got), 0, prompt.length, next, { half: true }));
      const wantNextIds = Array.from(results(wantNext).candidateIds, Number);
      expect(Number(results(gotNext).candidateIds[0])).toBe(wantNextIds[0]);
      Array.from(results(gotNext).candidateIds, Number).forEach((id, i) =>
        expect(results(gotNext).candidateLogits[i]).toBeCloseTo(results(wantNext).candidateLogits[wantNextIds.indexOf(id)], 1),
      );
    } finally {
      await session.release();
    }
  });
});
