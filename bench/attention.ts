/**
 * Attention benchmark: kiln's attention block (compiler/graph/blocks/attention.ts: per-query-head
 * matmuls over the runtime-owned KV cache, which the graph reads in place and extends by returning
 * only the new keys and values) against onnxruntime's fused GroupQueryAttention, the operator
 * onnxruntime-genai's builder emits, on the embedded model's head geometry. Both run as a chain of
 * `--layers` attention layers (each layer's output is the next one's query) in onnxruntime-node,
 * one new token per row, so what differs is only the attention.
 *
 *   npm run bench -- attention [--threads 2] [--repeats 5] [--steps 60] [--layers 30]
 *
 * GroupQueryAttention is measured the two ways onnxruntime-node can run it:
 * - "shared": past and present are one buffer per layer (the present output pre-allocated on the
 *   past input, so the kernel writes the new position in place), as genai runs it; onnxruntime-node
 *   still copies every fetched output back to a new JavaScript buffer, so the whole cache is
 *   copied once per layer and step.
 * - "unfetched": the present outputs are not fetched; the kernel then builds a fresh present
 *   (past copied per KV head) that is thrown away.
 * A native layer over onnxruntime's C API could skip the copy of "shared"; the kernel's own time
 * lies between "shared" and what kiln's block costs only where "shared" is close to kiln's.
 *
 * Before timing, both blocks run on the same random cache and queries and the largest difference
 * of the last layer's output is printed (they compute the same attention in float32).
 * Each case alternates the variants `--repeats` times and prints medians of ms per step and the
 * ratio to kiln's block (above 1: slower than kiln's).
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import * as ort from "onnxruntime-node";
import { cachedAttention } from "../src/compiler/graph/blocks/attention.js";
import { blockContext } from "../src/compiler/graph/blocks/context.js";
import type { WeightSource } from "../src/compiler/graph/weights.js";
import { GraphBuilder } from "../src/compiler/onnx/graph-builder.js";
import { DataType } from "../src/compiler/onnx/onnx-proto.js";
import { TEXT_GRAPH as IO } from "../src/runtime/artifact/index.js";

const { values: args } = parseArgs({
  options: {
    threads: { type: "string", default: "2" },
    repeats: { type: "string", default: "5" },
    steps: { type: "string", default: "60" },
    layers: { type: "string", default: "30" },
  },
});
const THREADS = Number(args.threads);
const REPEATS = Number(args.repeats);
const STEPS = Number(args.steps);
const LAYERS = Number(args.layers);
/** SmolLM2-135M's attention: 9 query heads sharing 3 KV heads of 64. */
const HEADS = 9;
const KV_HEADS = 3;
const HEAD_DIM = 64;
const GROUP = HEADS / KV_HEADS;
/** (rows decoding together, cached positions per row): the decode points of `bench text` and the 16-sequence row. */
const CASES: Array<[rows: number, past: number]> = [
  [1, 128],
  [1, 512],
  [1, 1024],
  [16, 256],
];

const log = (line: string) => process.stdout.write(line + "\n");
const dir = mkdtempSync(join(tmpdir(), "kiln-bench-attention-"));
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

/** Capacity the runtime would hold for `past` cached positions plus the new one (its 128-position growth). */
const capacityFor = (past: number) => Math.ceil((past + 1) / 128) * 128;

const noWeights: WeightSource = {
  has: () => false,
  dims: () => [],
  floats: () => Promise.reject(new Error("the attention block reads no weights")),
  linear: () => Promise.reject(new Error("the attention block reads no weights")),
};

/** kiln's block: graph inputs q, k, v, the masks and each layer's past; outputs the last layer's mix and the new K/V. */
function buildKiln(path: string): string {
  const g = new GraphBuilder(`${path}.data`);
  const ctx = blockContext(g, noWeights, { accuracyLevel: 4, numerics: "fast" });
  g.input("q", DataType.FLOAT, ["B", "S", HEADS * HEAD_DIM]);
  g.input("k", DataType.FLOAT, ["B", "S", KV_HEADS * HEAD_DIM]);
  g.input("v", DataType.FLOAT, ["B", "S", KV_HEADS * HEAD_DIM]);
  g.input(IO.pastMask, DataType.FLOAT, ["B", 1, 1, "C"]);
  g.input(IO.newMask, DataType.FLOAT, [1, 1, "GS", "S"]);
  let x = "q";
  for (let l = 0; l < LAYERS; l++) {
    g.input(IO.pastKey(l), DataType.FLOAT, ["B", KV_HEADS, HEAD_DIM, "C"]);
    g.input(IO.pastValue(l), DataType.FLOAT, ["B", KV_HEADS, "C", HEAD_DIM]);
    x = cachedAttention(ctx, l, x, "k", "v", { heads: HEADS, kvHeads: KV_HEADS, headDim: HEAD_DIM });
    g.output(IO.presentKey(l), DataType.FLOAT, ["B", KV_HEADS, "S", HEAD_DIM]);
    g.output(IO.presentValue(l), DataType.FLOAT, ["B", KV_HEADS, "S", HEAD_DIM]);
  }
  g.output(x, DataType.FLOAT, ["B", "S", HEADS * HEAD_DIM]);
  writeFileSync(path, g.finish("attention-kiln", "bench", {}));
  return x;
}

/** GroupQueryAttention per layer over [B, kv_heads, capacity, head_dim] caches; q arrives scaled, as in kiln's graphs. */
function buildGqa(path: string): string {
  const g = new GraphBuilder(`${path}.data`);
  g.input("q", DataType.FLOAT, ["B", "S", HEADS * HEAD_DIM]);
  g.input("k", DataType.FLOAT, ["B", "S", KV_HEADS * HEAD_DIM]);
  g.input("v", DataType.FLOAT, ["B", "S", KV_HEADS * HEAD_DIM]);
  g.input("seqlens_k", DataType.INT32, ["B"]);
  g.input("total_sequence_length", DataType.INT32, []);
  let x = "q";
  for (let l = 0; l < LAYERS; l++) {
    g.input(`past_key.${l}`, DataType.FLOAT, ["B", KV_HEADS, "C", HEAD_DIM]);
    g.input(`past_value.${l}`, DataType.FLOAT, ["B", KV_HEADS, "C", HEAD_DIM]);
    [x] = g.node("GroupQueryAttention", [x, "k", "v", `past_key.${l}`, `past_value.${l}`, "seqlens_k", "total_sequence_length"], {
      domain: "com.microsoft",
      outputs: 3,
      names: [`mixed.${l}`, `present_key.${l}`, `present_value.${l}`],
      attributes: { num_heads: HEADS, kv_num_heads: KV_HEADS, scale: { float: 1 } },
    });
    g.output(`present_key.${l}`, DataType.FLOAT, ["B", KV_HEADS, "C", HEAD_DIM]);
    g.output(`present_value.${l}`, DataType.FLOAT, ["B", KV_HEADS, "C", HEAD_DIM]);
  }
  g.output(x, DataType.FLOAT, ["B", "S", HEADS * HEAD_DIM]);
  writeFileSync(path, g.finish("attention-gqa", "bench", {}));
  return x;
}

/** Deterministic values in [-1, 1). */
function randoms(n: number, seed: number): Float32Array {
  let s = seed >>> 0 || 1;
  return Float32Array.from({ length: n }, () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 2 ** 31 - 1;
  });
}

/** One case's feeds for both blocks, from the same cache contents (laid out as each block reads them). */
function caseFeeds(rows: number, past: number) {
  const cap = capacityFor(past);
  const q = randoms(rows * HEADS * HEAD_DIM, 1).map((v) => v / Math.sqrt(HEAD_DIM));
  const shared = {
    q: new ort.Tensor("float32", q, [rows, 1, HEADS * HEAD_DIM]),
    k: new ort.Tensor("float32", randoms(rows * KV_HEADS * HEAD_DIM, 2), [rows, 1, KV_HEADS * HEAD_DIM]),
    v: new ort.Tensor("float32", randoms(rows * KV_HEADS * HEAD_DIM, 3), [rows, 1, KV_HEADS * HEAD_DIM]),
  };
  const mask = new Float32Array(rows * cap).fill(-Infinity);
  for (let r = 0; r < rows; r++) mask.fill(0, r * cap, r * cap + past);
  const kiln: Record<string, ort.Tensor> = {
    ...shared,
    [IO.pastMask]: new ort.Tensor("float32", mask, [rows, 1, 1, cap]),
    [IO.newMask]: new ort.Tensor("float32", new Float32Array(GROUP), [1, 1, GROUP, 1]),
  };
  const gqa: Record<string, ort.Tensor> = {
    ...shared,
    seqlens_k: new ort.Tensor("int32", new Int32Array(rows).fill(past), [rows]),
    total_sequence_length: new ort.Tensor("int32", Int32Array.of(past + 1), []),
  };
  const presents: Record<string, ort.Tensor> = {};
  for (let l = 0; l < LAYERS; l++) {
    const keys = randoms(rows * KV_HEADS * cap * HEAD_DIM, 100 + l); // [B, kvh, cap, hd]
    const values = randoms(rows * KV_HEADS * cap * HEAD_DIM, 200 + l);
    const keysT = new Float32Array(keys.length); // [B, kvh, hd, cap]
    for (let bh = 0; bh < rows * KV_HEADS; bh++) {
      for (let p = 0; p < cap; p++) for (let d = 0; d < HEAD_DIM; d++) keysT[(bh * HEAD_DIM + d) * cap + p] = keys[(bh * cap + p) * HEAD_DIM + d];
    }
    kiln[IO.pastKey(l)] = new ort.Tensor("float32", keysT, [rows, KV_HEADS, HEAD_DIM, cap]);
    kiln[IO.pastValue(l)] = new ort.Tensor("float32", values.slice(), [rows, KV_HEADS, cap, HEAD_DIM]);
    gqa[`past_key.${l}`] = new ort.Tensor("float32", keys, [rows, KV_HEADS, cap, HEAD_DIM]);
    gqa[`past_value.${l}`] = new ort.Tensor("float32", values, [rows, KV_HEADS, cap, HEAD_DIM]);
    presents[`present_key.${l}`] = gqa[`past_key.${l}`];
    presents[`present_value.${l}`] = gqa[`past_value.${l}`];
  }
  return { kiln, gqa, presents };
}

/** Mean ms per step over `STEPS` runs, after a few to warm up. */
async function msPerStep(run: () => Promise<unknown>): Promise<number> {
  for (let i = 0; i < 3; i++) await run();
  const t0 = performance.now();
  for (let i = 0; i < STEPS; i++) await run();
  return (performance.now() - t0) / STEPS;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

const kilnOut = buildKiln(join(dir, "kiln.onnx"));
const gqaOut = buildGqa(join(dir, "gqa.onnx"));
const options: ort.InferenceSession.SessionOptions = {
  intraOpNumThreads: THREADS,
  interOpNumThreads: 1,
  executionMode: "sequential",
  enableCpuMemArena: false,
  enableMemPattern: false,
};
const kilnSession = await ort.InferenceSession.create(join(dir, "kiln.onnx"), options);
const gqaSession = await ort.InferenceSession.create(join(dir, "gqa.onnx"), options);

log(
  `attention of one new token per row, ${LAYERS} layers, ${HEADS} query heads over ${KV_HEADS} KV heads of ${HEAD_DIM}, ${THREADS} thread(s); medians of ${REPEATS} x ${STEPS} steps`,
);
log("rows  past  capacity  max |diff|   kiln ms   GQA shared ms (ratio)   GQA unfetched ms (ratio)");
for (const [rows, past] of CASES) {
  const { kiln, gqa, presents } = caseFeeds(rows, past);
  const a = (await kilnSession.run(kiln))[kilnOut].data as Float32Array;
  const b = (await gqaSession.run(gqa, { [gqaOut]: null, ...presents }))[gqaOut].data as Float32Array;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff = Math.max(diff, Math.abs(a[i] - b[i]));
  const times = { kiln: [] as number[], shared: [] as number[], unfetched: [] as number[] };
  for (let r = 0; r < REPEATS; r++) {
    times.kiln.push(await msPerStep(() => kilnSession.run(kiln)));
    times.shared.push(await msPerStep(() => gqaSession.run(gqa, { [gqaOut]: null, ...presents })));
    times.unfetched.push(await msPerStep(() => gqaSession.run(gqa, [gqaOut])));
  }
  const [k, s, u] = [median(times.kiln), median(times.shared), median(times.unfetched)];
  log(
    `${String(rows).padStart(4)}  ${String(past).padStart(4)}  ${String(capacityFor(past)).padStart(8)}  ${diff.toExponential(1).padStart(10)}  ${k.toFixed(2).padStart(8)}` +
      `   ${s.toFixed(2).padStart(13)} (${(s / k).toFixed(2)}x)   ${u.toFixed(2).padStart(16)} (${(u / k).toFixed(2)}x)`,
  );
}
