/**
 * Decode attention on the WebGPU provider over a device-resident KV cache, the three ways measured
 * so far, as a chain of `--layers` attention layers (each layer's output is the next one's query),
 * one new token per row, every cache a gpu-buffer tensor that never leaves the device:
 * - "pool": the GPU target's explicit build as it was first written: per layer a pool [rows,
 *   capacity, kv_heads, head_dim] (the target's pools are [slots, kv_heads, capacity, head_dim] now)
 *   read through a Slice at slot 0 and transposes, kiln's explicit attention block (the CPU graph's,
 *   masked over the whole capacity), and the new position written by ScatterND into a new pool
 *   (out of place: the whole pool is copied every step), which is fed back;
 * - "gqa": com.microsoft GroupQueryAttention over [rows, kv_heads, capacity, head_dim] caches, its
 *   present outputs (the past copied, the new position written) fed back as the next past;
 * - "gqa-shared": the same graph with each present pre-allocated on its past tensor, from a session
 *   that does not put the presents at gpu-buffer (one that does ignores pre-allocated outputs), so
 *   the kernel writes the new position in place;
 * - "gqa-rows": one batch-1 GroupQueryAttention per row inside the graph (the provider takes its
 *   flash-attention kernel only at batch size 1), each fed its row of the query, the new key and
 *   value and the caches (Split along the batch), the outputs and presents concatenated back: a
 *   graph per row count, its caches copied by the Split and the Concat each step.
 *
 *   npm run bench -- gpu-attention [--shape llama-3.2-1b|llama-3.1-8b|smollm2-135m|tiny] [--layers N]
 *                                  [--rows 1,16,64] [--capacity 1024] [--past 512] [--steps 20] [--repeats 3]
 *
 * Before timing, the last layer's output of each variant is compared with the CPU provider's "gqa"
 * (max |diff|). The variants alternate `--repeats` times; medians of ms per step are printed.
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

/** Attention geometry per shape: query heads, KV heads, head size, layers. */
const SHAPES: Record<string, { heads: number; kvHeads: number; headDim: number; layers: number }> = {
  tiny: { heads: 4, kvHeads: 2, headDim: 16, layers: 2 },
  "smollm2-135m": { heads: 9, kvHeads: 3, headDim: 64, layers: 30 },
  "llama-3.2-1b": { heads: 32, kvHeads: 8, headDim: 64, layers: 16 },
  "llama-3.1-8b": { heads: 32, kvHeads: 8, headDim: 128, layers: 32 },
};
const { values: args } = parseArgs({
  options: {
    shape: { type: "string", default: "llama-3.2-1b" },
    layers: { type: "string" },
    rows: { type: "string", default: "1,16,64" },
    capacity: { type: "string", default: "1024" },
    past: { type: "string", default: "512" },
    steps: { type: "string", default: "20" },
    repeats: { type: "string", default: "3" },
  },
});
const shape = SHAPES[args.shape!];
if (!shape) throw new Error(`--shape: one of ${Object.keys(SHAPES).join(", ")}`);
const { heads: HEADS, kvHeads: KV, headDim: HD } = shape;
const LAYERS = Number(args.layers ?? shape.layers);
const ROWS = args.rows!.split(",").map(Number);
const CAP = Number(args.capacity);
const PAST = Number(args.past);
const STEPS = Number(args.steps);
const REPEATS = Number(args.repeats);
if (!(PAST >= 1 && PAST < CAP)) throw new Error("--past must be at least 1 and below --capacity");

const log = (line: string) => process.stdout.write(line + "\n");
const dir = mkdtempSync(join(tmpdir(), "kiln-bench-gpu-attention-"));
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

const noWeights: WeightSource = {
  has: () => false,
  dims: () => [],
  floats: () => Promise.reject(new Error("the attention block reads no weights")),
  linear: () => Promise.reject(new Error("the attention block reads no weights")),
};
const pool = (l: number, kind: "key" | "value") => `${kind}_pool.${l}`;
const poolOut = (l: number, kind: "key" | "value") => `${kind}_pool_out.${l}`;

/** The GPU target's way: pools in, kiln's block over the sliced and transposed rows, pools out by ScatterND. */
function buildPool(path: string): string {
  const g = new GraphBuilder(`${path}.data`);
  const ctx = blockContext(g, noWeights, { accuracyLevel: 0, numerics: "fast" });
  g.input("q", DataType.FLOAT, ["B", 1, HEADS * HD]);
  g.input("k", DataType.FLOAT, ["B", 1, KV * HD]);
  g.input("v", DataType.FLOAT, ["B", 1, KV * HD]);
  g.input(IO.pastMask, DataType.FLOAT, ["B", 1, 1, "C"]);
  g.input(IO.newMask, DataType.FLOAT, [1, 1, "GS", 1]);
  g.input("write_at", DataType.INT64, ["B", 1, 2]);
  let x = "q";
  for (let l = 0; l < LAYERS; l++) {
    for (const kind of ["key", "value"] as const) {
      g.input(pool(l, kind), DataType.FLOAT, ["B", "C", KV, HD]);
      g.output(poolOut(l, kind), DataType.FLOAT, ["B", "C", KV, HD]);
    }
    const rows = (p: string) => g.op("Slice", [p, g.int64s([0]), g.op("Shape", ["q"], { attributes: { start: 0, end: 1 } }), g.int64s([0])]);
    g.node("Transpose", [rows(pool(l, "key"))], { attributes: { perm: [0, 2, 3, 1] }, names: [IO.pastKey(l)] });
    g.node("Transpose", [rows(pool(l, "value"))], { attributes: { perm: [0, 2, 1, 3] }, names: [IO.pastValue(l)] });
    x = cachedAttention(ctx, l, x, "k", "v", { heads: HEADS, kvHeads: KV, headDim: HD });
    for (const kind of ["key", "value"] as const) {
      const present = kind === "key" ? IO.presentKey(l) : IO.presentValue(l);
      g.node("ScatterND", [pool(l, kind), "write_at", g.op("Transpose", [present], { attributes: { perm: [0, 2, 1, 3] } })], { names: [poolOut(l, kind)] });
    }
  }
  g.output(x, DataType.FLOAT, ["B", 1, HEADS * HD]);
  writeFileSync(path, g.finish("attention-pool", "bench", {}));
  return x;
}

/** GroupQueryAttention per layer over [B, kv_heads, capacity, head_dim] caches; q arrives scaled, as in kiln's graphs. */
function buildGqa(path: string): string {
  const g = new GraphBuilder(`${path}.data`);
  g.input("q", DataType.FLOAT, ["B", 1, HEADS * HD]);
  g.input("k", DataType.FLOAT, ["B", 1, KV * HD]);
  g.input("v", DataType.FLOAT, ["B", 1, KV * HD]);
  g.input("seqlens_k", DataType.INT32, ["B"]);
  g.input("total_sequence_length", DataType.INT32, []);
  let x = "q";
  for (let l = 0; l < LAYERS; l++) {
    g.input(pool(l, "key"), DataType.FLOAT, ["B", KV, CAP, HD]);
    g.input(pool(l, "value"), DataType.FLOAT, ["B", KV, CAP, HD]);
    [x] = g.node("GroupQueryAttention", [x, "k", "v", pool(l, "key"), pool(l, "value"), "seqlens_k", "total_sequence_length"], {
      domain: "com.microsoft",
      outputs: 3,
      names: [`mixed.${l}`, poolOut(l, "key"), poolOut(l, "value")],
      attributes: { num_heads: HEADS, kv_num_heads: KV, scale: { float: 1 } },
    });
    g.output(poolOut(l, "key"), DataType.FLOAT, ["B", KV, CAP, HD]);
    g.output(poolOut(l, "value"), DataType.FLOAT, ["B", KV, CAP, HD]);
  }
  g.output(x, DataType.FLOAT, ["B", 1, HEADS * HD]);
  writeFileSync(path, g.finish("attention-gqa", "bench", {}));
  return x;
}

/** As {@link buildGqa}, with one batch-1 GroupQueryAttention per row of a batch of `rows`, over rows split from the caches and joined again. */
function buildGqaRows(path: string, rows: number): string {
  const g = new GraphBuilder(`${path}.data`);
  g.input("q", DataType.FLOAT, [rows, 1, HEADS * HD]);
  g.input("k", DataType.FLOAT, [rows, 1, KV * HD]);
  g.input("v", DataType.FLOAT, [rows, 1, KV * HD]);
  g.input("seqlens_k", DataType.INT32, [rows]);
  g.input("total_sequence_length", DataType.INT32, []);
  const ones = g.int64s(Array<number>(rows).fill(1));
  const perRow = (name: string) => (rows === 1 ? [name] : g.node("Split", [name, ones], { outputs: rows, attributes: { axis: 0 } }));
  const joined = (names: string[], as?: string) =>
    rows === 1 ? g.op("Identity", names, as ? { names: [as] } : {}) : g.op("Concat", names, { attributes: { axis: 0 }, ...(as ? { names: [as] } : {}) });
  const [k, v, seqlens] = [perRow("k"), perRow("v"), perRow("seqlens_k")];
  let x = "q";
  for (let l = 0; l < LAYERS; l++) {
    g.input(pool(l, "key"), DataType.FLOAT, [rows, KV, CAP, HD]);
    g.input(pool(l, "value"), DataType.FLOAT, [rows, KV, CAP, HD]);
    const [q, keys, values] = [perRow(x), perRow(pool(l, "key")), perRow(pool(l, "value"))];
    const outs = q.map((_, r) =>
      g.node("GroupQueryAttention", [q[r], k[r], v[r], keys[r], values[r], seqlens[r], "total_sequence_length"], {
        domain: "com.microsoft",
        outputs: 3,
        attributes: { num_heads: HEADS, kv_num_heads: KV, scale: { float: 1 } },
      }),
    );
    x = joined(outs.map((o) => o[0]));
    joined(
      outs.map((o) => o[1]),
      poolOut(l, "key"),
    );
    joined(
      outs.map((o) => o[2]),
      poolOut(l, "value"),
    );
    g.output(poolOut(l, "key"), DataType.FLOAT, [rows, KV, CAP, HD]);
    g.output(poolOut(l, "value"), DataType.FLOAT, [rows, KV, CAP, HD]);
  }
  const out = g.op("Identity", [x], { names: ["mixed"] });
  g.output(out, DataType.FLOAT, [rows, 1, HEADS * HD]);
  writeFileSync(path, g.finish("attention-gqa-rows", "bench", {}));
  return out;
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

/** Keys (which 0) or values (1) of every layer's cache at `rows` rows, [rows, kv_heads, capacity, head_dim]. */
const cacheContents = (rows: number, which: number) => randoms(rows * KV * CAP * HD, 100 + which);

const poolPath = join(dir, "pool.onnx");
const gqaPath = join(dir, "gqa.onnx");
const poolOutName = buildPool(poolPath);
const gqaOutName = buildGqa(gqaPath);
const outputsAt = (names: string[], where: ort.Tensor.DataLocation) => Object.fromEntries(names.map((n) => [n, where]));
const cacheNames = Array.from({ length: LAYERS }, (_, l) => [poolOut(l, "key"), poolOut(l, "value")]).flat();
const webgpu = (out: string, caches: "gpu-buffer" | "cpu"): ort.InferenceSession.SessionOptions => ({
  executionProviders: ["webgpu"],
  logSeverityLevel: 3,
  preferredOutputLocation: { [out]: "cpu", ...(caches === "gpu-buffer" ? outputsAt(cacheNames, "gpu-buffer") : {}) },
});
const sessions = {
  pool: await ort.InferenceSession.create(poolPath, webgpu(poolOutName, "gpu-buffer")),
  gqa: await ort.InferenceSession.create(gqaPath, webgpu(gqaOutName, "gpu-buffer")),
  shared: await ort.InferenceSession.create(gqaPath, webgpu(gqaOutName, "cpu")),
  cpu: await ort.InferenceSession.create(gqaPath, { executionProviders: ["cpu"] }),
};
/** The per-row graph of each row count. */
const rowSessions = new Map<number, ort.InferenceSession>();
for (const rows of ROWS) {
  const path = join(dir, `gqa-rows-${rows}.onnx`);
  rowSessions.set(rows, await ort.InferenceSession.create(path, webgpu(buildGqaRows(path, rows), "gpu-buffer")));
}

/** One variant at `rows` rows: its feeds, a step (the caches fed back), and a release of its device tensors. */
async function variant(kind: "pool" | "gqa" | "shared" | "rows", rows: number) {
  const session = kind === "rows" ? rowSessions.get(rows)! : sessions[kind];
  const q = randoms(rows * HEADS * HD, 1).map((v) => v / Math.sqrt(HD));
  const feeds: Record<string, ort.Tensor> = {
    q: new ort.Tensor("float32", q, [rows, 1, HEADS * HD]),
    k: new ort.Tensor("float32", randoms(rows * KV * HD, 2), [rows, 1, KV * HD]),
    v: new ort.Tensor("float32", randoms(rows * KV * HD, 3), [rows, 1, KV * HD]),
  };
  if (kind === "pool") {
    const mask = new Float32Array(rows * CAP).fill(-Infinity);
    for (let r = 0; r < rows; r++) mask.fill(0, r * CAP, r * CAP + PAST);
    feeds[IO.pastMask] = new ort.Tensor("float32", mask, [rows, 1, 1, CAP]);
    feeds[IO.newMask] = new ort.Tensor("float32", new Float32Array(HEADS / KV), [1, 1, HEADS / KV, 1]);
    feeds.write_at = new ort.Tensor(
      "int64",
      BigInt64Array.from({ length: rows * 2 }, (_, i) => BigInt(i % 2 === 0 ? i / 2 : PAST)),
      [rows, 1, 2],
    );
  } else {
    feeds.seqlens_k = new ort.Tensor("int32", new Int32Array(rows).fill(PAST), [rows]);
    feeds.total_sequence_length = new ort.Tensor("int32", Int32Array.of(PAST + 1), []);
  }
  // The same cache contents for every variant, laid out as each reads them; every layer starts from
  // the same keys and values (64 rows of an 8B layer are 256 MiB each: one array, not one per layer).
  for (const [i, name] of (["key", "value"] as const).entries()) {
    const bnsh = cacheContents(rows, i);
    let data = bnsh;
    if (kind === "pool") {
      data = new Float32Array(bnsh.length);
      for (let b = 0; b < rows; b++)
        for (let h = 0; h < KV; h++)
          for (let p = 0; p < CAP; p++) for (let d = 0; d < HD; d++) data[((b * CAP + p) * KV + h) * HD + d] = bnsh[((b * KV + h) * CAP + p) * HD + d];
    }
    for (let l = 0; l < LAYERS; l++) feeds[pool(l, name)] = new ort.Tensor("float32", data, kind === "pool" ? [rows, CAP, KV, HD] : [rows, KV, CAP, HD]);
  }
  const out = kind === "pool" ? poolOutName : kind === "rows" ? "mixed" : gqaOutName;
  const owned: ort.Tensor[] = [];
  // The first run moves the caches onto the device; its output is the one compared.
  const first = await session.run(feeds);
  for (let l = 0; l < LAYERS; l++)
    for (const name of ["key", "value"] as const) {
      feeds[pool(l, name)] = first[poolOut(l, name)];
      owned.push(first[poolOut(l, name)]);
    }
  const output = first[out].data as Float32Array;
  const step = async () => {
    if (kind === "shared") {
      const fetches: Record<string, ort.Tensor | null> = { [out]: null };
      for (let l = 0; l < LAYERS; l++) for (const name of ["key", "value"] as const) fetches[poolOut(l, name)] = feeds[pool(l, name)];
      return session.run(feeds, fetches as ort.InferenceSession.FetchesType);
    }
    const r = await session.run(feeds);
    for (let l = 0; l < LAYERS; l++)
      for (const name of ["key", "value"] as const) {
        feeds[pool(l, name)].dispose();
        feeds[pool(l, name)] = r[poolOut(l, name)];
      }
    return r;
  };
  const release = () => {
    for (let l = 0; l < LAYERS; l++) for (const name of ["key", "value"] as const) feeds[pool(l, name)].dispose();
  };
  return { output, step, release };
}

/** The CPU provider's GroupQueryAttention on the same inputs: the reference output. */
async function reference(rows: number): Promise<Float32Array> {
  const feeds: Record<string, ort.Tensor> = {
    q: new ort.Tensor(
      "float32",
      randoms(rows * HEADS * HD, 1).map((v) => v / Math.sqrt(HD)),
      [rows, 1, HEADS * HD],
    ),
    k: new ort.Tensor("float32", randoms(rows * KV * HD, 2), [rows, 1, KV * HD]),
    v: new ort.Tensor("float32", randoms(rows * KV * HD, 3), [rows, 1, KV * HD]),
    seqlens_k: new ort.Tensor("int32", new Int32Array(rows).fill(PAST), [rows]),
    total_sequence_length: new ort.Tensor("int32", Int32Array.of(PAST + 1), []),
  };
  for (const [i, name] of (["key", "value"] as const).entries()) {
    const data = cacheContents(rows, i);
    for (let l = 0; l < LAYERS; l++) feeds[pool(l, name)] = new ort.Tensor("float32", data, [rows, KV, CAP, HD]);
  }
  return (await sessions.cpu.run(feeds, [gqaOutName]))[gqaOutName].data as Float32Array;
}

async function msPerStep(step: () => Promise<unknown>): Promise<number> {
  for (let i = 0; i < 2; i++) await step();
  const t0 = performance.now();
  for (let i = 0; i < STEPS; i++) await step();
  return (performance.now() - t0) / STEPS;
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const maxDiff = (a: Float32Array, b: Float32Array) => a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i])), 0);

log(
  `WebGPU decode attention, ${args.shape} geometry: ${LAYERS} layers, ${HEADS} query heads over ${KV} KV heads of ${HD}, float32 caches of ${CAP} positions with ${PAST} valid; medians of ${REPEATS} x ${STEPS} steps`,
);
log("rows   pool ms (|diff|)        gqa ms (|diff|)          gqa-shared ms (|diff|)   gqa-rows ms (|diff|)");
for (const rows of ROWS) {
  const ref = await reference(rows);
  const kinds = ["pool", "gqa", "shared", "rows"] as const;
  const runs = [];
  for (const kind of kinds) runs.push(await variant(kind, rows));
  const times: number[][] = kinds.map(() => []);
  for (let r = 0; r < REPEATS; r++) for (const [i, v] of runs.entries()) times[i].push(await msPerStep(v.step));
  for (const v of runs) v.release();
  log(
    `${String(rows).padStart(4)}` +
      runs.map((v, i) => `   ${median(times[i]).toFixed(2).padStart(8)} (${maxDiff(v.output, ref).toExponential(1)})`).join("    "),
  );
}
