/**
 * The GPU target's head on a vocabulary wider than its candidates: one sort of the vocabulary (in
 * blocks, on a vocabulary wider than one dispatch's sort) gives the top alternatives, and the
 * candidates after the logit adjustments are taken from it and the adjusted ids. Over a vocabulary of
 * 300 tokens, one of 5,000 (three blocks, the last padded) and one of 40,000 (two stages of blocks). Checked against the CPU graph's logits with the adjustments applied in JavaScript
 * (onnxruntime's CPU provider runs the GPU graph): adjustments that lift tokens from the bottom of
 * the vocabulary, penalties on the best ones, a row's entries padded by repetition as the runtime
 * pads them, more adjustments than candidates, and a constraint mask that leaves fewer tokens than
 * candidates. With a head size of 16 the default build's GroupQueryAttention applies the rotary
 * itself, so a prompt and a step after it also check that against the CPU graph's RotaryEmbedding;
 * with two KV heads, a step through a past span shorter than the pools checks where the new positions
 * are taken from its presents and written.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as ort from "onnxruntime-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { compileGguf, type CompileResult } from "../../../../src/compiler/compile.js";
import {
  ARTIFACT_FILES,
  DEVICE_CANDIDATES,
  DEVICE_GRAPH as D,
  DEVICE_TOP_LOGPROBS,
  devicePoolDims,
  maskWords,
} from "../../../../src/runtime/artifact/index.js";
import { TextSession } from "../../../../src/runtime/text-worker/session.js";
import { writeTinyGguf } from "../../provision/tiny-gguf.js";
import { decodeMessage, messages, stepResults, text } from "../support.js";

/** The op types of a graph's nodes (ModelProto.graph 7, GraphProto.node 1, NodeProto.op_type 4). */
function opTypes(path: string): string[] {
  const graph = decodeMessage(messages(decodeMessage(readFileSync(path)), 7)[0]);
  return messages(graph, 1).map((node) => text(messages(decodeMessage(node), 4)[0]));
}

/**
 * Vocabularies of one sort's width, of three blocks (the last one padded), and of 20 blocks, whose
 * tops take a second stage of blocks (see rawTop), with the TopK nodes each builds: the raw sorts
 * and the candidates' sort.
 */
describe.each([
  [300, 2],
  [5000, 3],
  [40_000, 4],
])("over %i tokens", (VOCAB, topKs) => {
  /** A step graph's run, unpacked. */
  const results = (out: Record<string, ort.Tensor>) => stepResults(out, VOCAB);
  const CAPACITY = 16;
  const PROMPT = [3, 7, 1, 12];

  let home: string;
  let gpu: CompileResult;
  let step: ort.InferenceSession;
  /** The CPU graph's logits after PROMPT, and after NEXT following it. */
  let logits: Float32Array;
  let nextLogits: Float32Array;
  const NEXT = 9;

  beforeAll(async () => {
    home = mkdtempSync(join(tmpdir(), "kiln-device-head-"));
    const ggufPath = join(home, "tiny.gguf");
    await writeTinyGguf(ggufPath, 3, VOCAB, 2, 2);
    const cpu = await compileGguf({ slug: "tiny", ggufPath, home });
    gpu = await compileGguf({ slug: "tiny", ggufPath, home, device: "webgpu" });
    step = await ort.InferenceSession.create(join(gpu.dir, ARTIFACT_FILES.graph));
    const reference = await TextSession.load(cpu.dir, { slots: 1 });
    try {
      logits = Float32Array.from(await reference.forward(0, 1, PROMPT.length, PROMPT));
      nextLogits = Float32Array.from(await reference.forward(0, 1, 1, [NEXT]));
    } finally {
      await reference.release();
    }
  });

  afterAll(async () => {
    await step?.release();
    rmSync(home, { recursive: true, force: true });
  });

  /** One adjustment entry: [id, bias, repetition, subtract]. */
  type Entry = [number, number, number, number];

  /** The prompt step's feeds with these adjustment entries (in order, repeats included) and mask. */
  function feeds(entries: Entry[], mask?: Int32Array): Record<string, ort.Tensor> {
    const shape = gpu.manifest.shape;
    const s = PROMPT.length;
    const group = shape.heads / shape.kvHeads;
    const newMask = new Float32Array(group * s * s);
    for (let g = 0; g < group; g++) for (let q = 0; q < s; q++) for (let k = q + 1; k < s; k++) newMask[(g * s + q) * s + k] = -Infinity;
    const n = entries.length;
    const pools: Record<string, ort.Tensor> = {};
    const dims = devicePoolDims(1, CAPACITY, shape);
    for (let l = 0; l < shape.layers; l++)
      for (const name of [D.keyPool(l), D.valuePool(l)]) pools[name] = new ort.Tensor("float32", new Float32Array(dims.reduce((a, b) => a * b)), dims);
    return {
      [D.inputIds]: new ort.Tensor("int64", BigInt64Array.from(PROMPT, BigInt), [1, s]),
      [D.positionIds]: new ort.Tensor(
        "int64",
        BigInt64Array.from(PROMPT, (_, i) => BigInt(i)),
        [1, s],
      ),
      [D.pastMask]: new ort.Tensor("float32", new Float32Array(CAPACITY).fill(-Infinity), [1, 1, 1, CAPACITY]),
      [D.newMask]: new ort.Tensor("float32", newMask, [1, 1, group * s, s]),
      [D.logitsFrom]: new ort.Tensor("int64", BigInt64Array.of(-1n), [1]),
      [D.firstSlot]: new ort.Tensor("int64", BigInt64Array.of(0n), [1]),
      [D.tokenMask]: new ort.Tensor("int32", mask ?? new Int32Array(maskWords(VOCAB)).fill(-1), [1, maskWords(VOCAB)]),
      [D.adjustIds]: new ort.Tensor(
        "int64",
        BigInt64Array.from(entries, (e) => BigInt(e[0])),
        [1, n],
      ),
      [D.adjustBias]: new ort.Tensor(
        "float32",
        Float32Array.from(entries, (e) => e[1]),
        [1, n],
      ),
      [D.adjustRepetition]: new ort.Tensor(
        "float32",
        Float32Array.from(entries, (e) => e[2]),
        [1, n],
      ),
      [D.adjustSubtract]: new ort.Tensor(
        "float32",
        Float32Array.from(entries, (e) => e[3]),
        [1, n],
      ),
      [D.scoreTargets]: new ort.Tensor("int64", new BigInt64Array(1), [1, 1]),
      ...pools,
    };
  }

  /** The reference: the masked logits, adjusted as the CPU sampler adjusts them (one entry per id). */
  function reference(entries: Entry[], mask?: Int32Array): { masked: Float32Array; adjusted: Float32Array } {
    const allowed = (id: number) => !mask || (mask[id >>> 5] & (1 << (id & 31))) !== 0;
    const masked = logits.map((v, id) => (allowed(id) ? v : -Infinity));
    const adjusted = Float32Array.from(masked);
    for (const [id, bias, repetition, subtract] of new Map(entries.map((e) => [e[0], e])).values()) {
      const biased = masked[id] + bias;
      adjusted[id] = (biased > 0 ? biased / repetition : biased * repetition) - subtract;
    }
    return { masked, adjusted };
  }

  /** Ids by value descending, lowest id first on ties. */
  const rankedIds = (values: Float32Array) => [...values.keys()].sort((a, b) => values[b] - values[a] || a - b);

  /** Runs the step and checks its candidates and top alternatives against the reference. */
  async function expectHeadMatches(entries: Entry[], mask?: Int32Array): Promise<void> {
    const out = await step.run(feeds(entries, mask));
    const { masked, adjusted } = reference(entries, mask);
    const ids = Array.from(results(out).candidateIds, Number);
    const values = results(out).candidateLogits;
    const raw = results(out).candidateRaw;
    expect(ids).toHaveLength(DEVICE_CANDIDATES);
    const finite = adjusted.filter(Number.isFinite).length;
    const want = rankedIds(adjusted).slice(0, Math.min(DEVICE_CANDIDATES, finite));
    expect(ids.slice(0, want.length)).toEqual(want);
    want.forEach((id, i) => {
      expect(values[i]).toBeCloseTo(adjusted[id], 4);
      expect(raw[i]).toBeCloseTo(masked[id], 4);
    });
    // Past the finite candidates every value is -inf.
    for (let i = want.length; i < DEVICE_CANDIDATES; i++) expect(values[i]).toBe(-Infinity);
    const topIds = Array.from(results(out).topIds, Number);
    const topFinite = Math.min(DEVICE_TOP_LOGPROBS, masked.filter(Number.isFinite).length);
    expect(topIds).toHaveLength(DEVICE_TOP_LOGPROBS);
    expect(topIds.slice(0, topFinite)).toEqual(rankedIds(masked).slice(0, topFinite));
    topIds.slice(0, topFinite).forEach((id, i) => expect(results(out).topLogits[i]).toBeCloseTo(masked[id], 4));
  }

  describe("the GPU target's head", () => {
    it("has a vocabulary wider than its candidates and heads of 16, so the test means something; a wide one is sorted in blocks", () => {
      expect(gpu.manifest.shape.vocab).toBe(VOCAB);
      // The raw sort (one, or one per block and one of their tops) and the candidates' sort.
      expect(opTypes(join(gpu.dir, ARTIFACT_FILES.graph)).filter((op) => op === "TopK")).toHaveLength(topKs);
      expect(VOCAB).toBeGreaterThan(DEVICE_CANDIDATES + 100);
      expect(gpu.manifest.shape.headDim).toBe(16);
    });

    it("continues from its pools as the CPU graph does: GroupQueryAttention's own rotary at the next position", async () => {
      const first = await step.run(feeds([[0, 0, 1, 0]]));
      const pools: Record<string, ort.Tensor> = {};
      for (let l = 0; l < gpu.manifest.shape.layers; l++) {
        pools[D.keyPool(l)] = first[D.keyPoolOut(l)] as ort.Tensor;
        pools[D.valuePool(l)] = first[D.valuePoolOut(l)] as ort.Tensor;
      }
      const pastMask = new Float32Array(CAPACITY).fill(-Infinity).fill(0, 0, PROMPT.length);
      const second = await step.run({
        ...feeds([[0, 0, 1, 0]]),
        ...pools,
        [D.inputIds]: new ort.Tensor("int64", BigInt64Array.of(BigInt(NEXT)), [1, 1]),
        [D.positionIds]: new ort.Tensor("int64", BigInt64Array.of(BigInt(PROMPT.length)), [1, 1]),
        [D.pastMask]: new ort.Tensor("float32", pastMask, [1, 1, 1, CAPACITY]),
        [D.newMask]: new ort.Tensor("float32", new Float32Array(gpu.manifest.shape.heads / gpu.manifest.shape.kvHeads), [
          1,
          1,
          gpu.manifest.shape.heads / gpu.manifest.shape.kvHeads,
          1,
        ]),
      });
      const want = rankedIds(nextLogits).slice(0, DEVICE_CANDIDATES);
      expect(Array.from(results(second).candidateIds, Number)).toEqual(want);
      want.forEach((id, i) => expect(results(second).candidateLogits[i]).toBeCloseTo(nextLogits[id], 4));
    });

    it("reads a past span of its slot and writes only the new positions: slot 1 of two, spans of 4 and 8 of 16 positions", async () => {
      const shape = gpu.manifest.shape;
      const dims = devicePoolDims(2, CAPACITY, shape);
      const zeros = () => new ort.Tensor("float32", new Float32Array(dims.reduce((a, b) => a * b)), dims);
      const pools: Record<string, ort.Tensor> = {};
      for (let l = 0; l < shape.layers; l++) [pools[D.keyPool(l)], pools[D.valuePool(l)]] = [zeros(), zeros()];
      const group = shape.heads / shape.kvHeads;
      const first = await step.run({
        ...feeds([[0, 0, 1, 0]]),
        ...pools,
        [D.firstSlot]: new ort.Tensor("int64", BigInt64Array.of(1n), [1]),
        [D.pastMask]: new ort.Tensor("float32", new Float32Array(PROMPT.length).fill(-Infinity), [1, 1, 1, PROMPT.length]),
      });
      for (let l = 0; l < shape.layers; l++)
        [pools[D.keyPool(l)], pools[D.valuePool(l)]] = [first[D.keyPoolOut(l)] as ort.Tensor, first[D.valuePoolOut(l)] as ort.Tensor];
      const span = 8;
      const second = await step.run({
        ...feeds([[0, 0, 1, 0]]),
        ...pools,
        [D.inputIds]: new ort.Tensor("int64", BigInt64Array.of(BigInt(NEXT)), [1, 1]),
        [D.positionIds]: new ort.Tensor("int64", BigInt64Array.of(BigInt(PROMPT.length)), [1, 1]),
        [D.firstSlot]: new ort.Tensor("int64", BigInt64Array.of(1n), [1]),
        [D.pastMask]: new ort.Tensor("float32", new Float32Array(span).fill(-Infinity).fill(0, 0, PROMPT.length), [1, 1, 1, span]),
        [D.newMask]: new ort.Tensor("float32", new Float32Array(group), [1, 1, group, 1]),
      });
      const want = rankedIds(nextLogits).slice(0, DEVICE_CANDIDATES);
      expect(Array.from(results(second).candidateIds, Number)).toEqual(want);
      want.forEach((id, i) => expect(results(second).candidateLogits[i]).toBeCloseTo(nextLogits[id], 4));
      // Per layer and pool: slot 0 untouched, slot 1 written at its 5 positions and nowhere else.
      const [, kvHeads, capacity, headDim] = dims;
      for (let l = 0; l < shape.layers; l++) {
        for (const name of [D.keyPoolOut(l), D.valuePoolOut(l)]) {
          const pool = second[name].data as Float32Array;
          const written = (slot: number, head: number, position: number) => {
            const at = ((slot * kvHeads + head) * capacity + position) * headDim;
            return pool.subarray(at, at + headDim).some((v) => v !== 0);
          };
          for (let head = 0; head < kvHeads; head++) {
            for (let position = 0; position < capacity; position++) {
              expect(written(0, head, position)).toBe(false);
              expect(written(1, head, position)).toBe(position <= PROMPT.length);
            }
          }
        }
      }
    });

    it("with no adjustment (the runtime's neutral entry) ranks the CPU graph's logits", async () => {
      await expectHeadMatches([[0, 0, 1, 0]]);
    });

    it("lifts tokens from the bottom of the vocabulary and pushes the best ones down, with padded repeats", async () => {
      const order = rankedIds(logits);
      const worst = order.slice(-3);
      const best = order.slice(0, 2);
      const entries: Entry[] = [
        [worst[0], 40, 1, 0],
        [best[0], 0, 1.5, 5],
        [worst[1], 25, 1, 0],
        [best[1], -3, 1, 0],
        [worst[2], 0, 1, -30],
      ];
      await expectHeadMatches([...entries, entries[0], entries[0], entries[0]]);
    });

    it("with more adjustments than candidates (penalties on the top 100 tokens)", async () => {
      const entries = rankedIds(logits)
        .slice(0, 100)
        .map((id, i): Entry => [id, 0, 1.3, i % 3 === 0 ? 0.8 : 0.2]);
      await expectHeadMatches(entries);
    });

    it("under a mask that leaves fewer tokens than candidates, an adjusted token among them counted once", async () => {
      const mask = new Int32Array(maskWords(VOCAB));
      const allowed = [5, 40, 77, 128, 199, 250, 251, VOCAB - 1];
      for (const id of allowed) mask[id >>> 5] |= 1 << (id & 31);
      await expectHeadMatches(
        [
          [77, 12, 1, 0],
          [6, 50, 1, 0], // masked: stays -inf
          [77, 12, 1, 0],
        ],
        mask,
      );
    });
  });
});
