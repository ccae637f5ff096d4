/**
 * Text runtime benchmark: kiln's compiled artifact (onnxruntime-node) against llama.cpp
 * (node-llama-cpp) on the same GGUF file, with the same thread count, in the same process, and
 * against llama.cpp's own native tools when they are built (see "native peer" below).
 *
 *   node --import tsx bench/text.ts [--model smollm2-135m-instruct] [--threads 2] [--runs 3]
 *        [--numerics fast|llama.cpp] [--min-fold matmul|8bit|block-means] [--steps 64] [--gguf path] [--skip-profile] [--json]
 *        [--max-busy 0.15] [--retries 2] [--native]
 *
 * The GGUF comes from `pullModel(--model)` (or `--gguf`), the artifact from `compileGguf` (cached).
 * The machine is shared: each sample notes how many cores other processes used meanwhile (from
 * /proc/stat minus this process), and a sample taken while they used more than --max-busy cores is
 * taken again, up to --retries times (while the run is under 7 minutes), keeping the quietest.
 *
 * Workloads (each run, both engines, engine order alternating between runs):
 * - prefill: one 512-token prompt into an empty cache, tokens/s.
 * - decode @L: the first L-1 prompt tokens are prefilled untimed, then `--steps` single-token
 *   steps are timed (the first feeds prompt token L, each later one the previous step's greedy
 *   token), so both engines run exactly `steps` forward passes at contexts L .. L+steps-1.
 *   llama.cpp is told not to stop at end-of-generation tokens.
 * Every run starts from an empty cache: a fresh sequence for llama.cpp, a fresh KV pool for kiln
 * (truncating the old pool would keep its grown capacity, which kiln's graph reads every step; that
 * effect is measured separately as the "stale capacity" row).
 *
 * Physical limits printed beside the results:
 * - decode: memory bandwidth / bytes read per step (weights streamed every step, i.e. the weight
 *   file minus tables that are only gathered (token embedding, rotary caches), plus the KV cache
 *   read at that context). Bandwidth is measured here with large typed-array copies, one per thread.
 * - prefill: achievable GFLOP/s / GFLOP per token. GFLOP/s is measured on onnxruntime's own
 *   MatMulNBits kernel (the one kiln's graph uses) on one layer's linear shapes at 512 rows.
 * Also printed: kiln's KV cache bytes at each context, and a per-step breakdown of one decode at 512
 * (session.run vs. kiln's JS around it, then an onnxruntime profile grouped by op and weight role).
 *
 * Native peer: the node-llama-cpp binding adds JavaScript work per token and so understates
 * llama.cpp. When `llama-bench` and `llama-batched-bench` exist in .cache/peers/llama.cpp/bin
 * (built with GGML_NATIVE from the llama.cpp vendored in the pinned llama-cpp-python sdist by
 * scripts/peers/llama-cpp-native.sh; `--native` runs that script first), a second table puts
 * kiln beside them on the same GGUF (bench/peers/llama-native.ts): decode @128 (+steps) at 1 and
 * --threads threads (llama-bench -d 128 -n steps), prefill 512 (llama-bench -p 512), and 16
 * sequences decoding together after 128-token prompts (llama-batched-bench's S_TG; kiln: one
 * 16-slot session, each step one row per sequence). kiln's side of that table is measured again,
 * alternating with the native binaries run by run, so both sides of each ratio share the machine's
 * state; each decode row also gives both engines' share of the memory-bandwidth limit.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Worker } from "node:worker_threads";
import { getLlama, type LlamaContext, type LlamaModel, type Token } from "node-llama-cpp";
import * as ort from "onnxruntime-node";
import { pullModel } from "../src/catalogue/pull/index.js";
import { compileGguf, type MinFold } from "../src/compiler/compile.js";
import { readGguf } from "../src/compiler/gguf/reader.js";
import { GgmlType } from "../src/compiler/gguf/types.js";
import { GraphBuilder } from "../src/compiler/onnx/graph-builder.js";
import { DataType } from "../src/compiler/onnx/onnx-proto.js";
import { ARTIFACT_FILES, KV_GROWTH_POSITIONS, type ModelShape } from "../src/runtime/artifact/index.js";
import { KvPool } from "../src/runtime/kv-pool.js";
import { MIN_FOLDS } from "../src/track/settings.js";
import { TextSession } from "../src/runtime/text-worker/session.js";
import { benchHasDepth, buildNative, findNative, type NativeBinaries, nativeBatched, nativeDecode, nativePrefill } from "./peers/llama-native.js";

// ── options ─────────────────────────────────────────────────────────────────────────────────

const { values: args } = parseArgs({
  options: {
    model: { type: "string", default: "smollm2-135m-instruct" },
    threads: { type: "string", default: "2" },
    runs: { type: "string", default: "3" },
    numerics: { type: "string", default: "fast" },
    "min-fold": { type: "string", default: "matmul" },
    steps: { type: "string", default: "64" },
    gguf: { type: "string" },
    "skip-profile": { type: "boolean", default: false },
    "max-busy": { type: "string", default: "0.15" },
    retries: { type: "string", default: "2" },
    json: { type: "boolean", default: false },
    native: { type: "boolean", default: false },
  },
});
const slug = args.model!;
const threads = positiveInt("threads", args.threads!);
const runs = positiveInt("runs", args.runs!);
const steps = positiveInt("steps", args.steps!);
const maxBusy = Number(args["max-busy"]);
const retries = Number(args.retries);
if (!(maxBusy >= 0) || !Number.isInteger(retries) || retries < 0) throw new Error("--max-busy must be a number >= 0 and --retries an integer >= 0");
/** No retries after this many seconds of measuring (keeps a full run near 10 minutes). */
const retryDeadlineS = 420;
const numerics = args.numerics as "fast" | "llama.cpp";
if (numerics !== "fast" && numerics !== "llama.cpp") throw new Error(`--numerics must be fast or llama.cpp, not ${args.numerics}`);
const minFold = args["min-fold"] as MinFold;
if (!(MIN_FOLDS as readonly string[]).includes(minFold)) throw new Error(`--min-fold must be one of ${MIN_FOLDS.join(", ")}, not ${minFold}`);

const PREFILL = 512;
const CONTEXTS = [128, 512, 1024];
const KV_CHUNK = KV_GROWTH_POSITIONS; // the KV pool's growth step
const LLAMA_CONTEXT = 2048;
if (Math.max(...CONTEXTS) + steps > LLAMA_CONTEXT) throw new Error(`--steps too large: ${Math.max(...CONTEXTS)} + ${steps} > ${LLAMA_CONTEXT}`);

function positiveInt(name: string, v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer, not ${v}`);
  return n;
}

const now = () => performance.now();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const log = (s: string) => process.stderr.write(`${s}\n`);
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const MB = (b: number) => `${(b / 1e6).toFixed(1)} MB`;

/** Busy CPU seconds of the whole machine (/proc/stat, steal included) and of this process. */
function cpuSnapshot(): { machine: number; ours: number } | null {
  try {
    const f = readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).slice(1).map(Number);
    const [user, nice, system, , , irq, softirq, steal = 0] = f;
    const u = process.cpuUsage();
    return { machine: (user + nice + system + irq + softirq + steal) / 100, ours: (u.user + u.system) / 1e6 };
  } catch {
    return null;
  }
}
/** Cores used by other processes (and the hypervisor) between two snapshots. */
function othersCores(a: ReturnType<typeof cpuSnapshot>, b: ReturnType<typeof cpuSnapshot>, seconds: number): number | null {
  return a && b ? Math.max(0, b.machine - a.machine - (b.ours - a.ours)) / seconds : null;
}

function argmax(a: Float32Array): number {
  let best = 0;
  for (let i = 1; i < a.length; i++) if (a[i] > a[best]) best = i;
  return best;
}

// ── native llama.cpp (built on request, used whenever present) ─────────────────────────────

const setupStart = now();
let native: NativeBinaries | null = findNative();
if (args.native && !native) {
  log("building llama.cpp's native tools (scripts/peers/llama-cpp-native.sh; a few minutes, once) ...");
  native = buildNative();
}

// ── model and artifact ──────────────────────────────────────────────────────────────────────

let ggufPath: string;
if (args.gguf) {
  ggufPath = args.gguf;
} else {
  log(`pulling ${slug} ...`);
  const pulled = await pullModel(slug);
  const file = pulled.files.find((f) => f.path.toLowerCase().endsWith(".gguf"));
  if (!file) throw new Error(`${slug}: pulled files have no .gguf (${pulled.files.map((f) => f.path).join(", ")}); a text model is needed`);
  ggufPath = join(pulled.dir, file.path);
}
log(`compiling ${ggufPath} (numerics ${numerics}; cached by id) ...`);
const compiled = await compileGguf({ slug, ggufPath, options: { numerics, minFold }, onStage: (s) => log(`  compile: ${s}`) });
const artifactDir = compiled.dir;
const shape = compiled.manifest.shape;
const gguf = await readGguf(ggufPath);

// ── static facts: bytes per step, FLOPs per token ──────────────────────────────────────────

interface Inventory {
  total: number;
  /** Tables only gathered by row (token embedding, rotary caches): not streamed per step. */
  gathered: { name: string; bytes: number }[];
  byRole: Map<string, number>;
  nodeRole: Map<string, string>;
}

/** Minimal protobuf walk of model.onnx: initializer sizes (inline and external) and node inputs. */
function onnxInventory(dir: string): Inventory {
  const buf = readFileSync(join(dir, ARTIFACT_FILES.graph));
  const utf8 = new TextDecoder();
  type Field = { f: number; v: number; s: number; e: number };
  const fields = (s: number, e: number): Field[] => {
    const out: Field[] = [];
    let p = s;
    const varint = () => {
      let r = 0;
      let mul = 1;
      let b: number;
      do {
        b = buf[p++];
        r += (b & 0x7f) * mul;
        mul *= 128;
      } while (b & 0x80);
      return r;
    };
    while (p < e) {
      const key = varint();
      const f = Math.floor(key / 8);
      const w = key & 7;
      if (w === 0) out.push({ f, v: varint(), s: 0, e: 0 });
      else if (w === 2) {
        const len = varint();
        out.push({ f, v: len, s: p, e: p + len });
        p += len;
      } else if (w === 1) p += 8;
      else if (w === 5) p += 4;
      else throw new Error(`model.onnx: unexpected wire type ${w}`);
    }
    return out;
  };
  const str = (x: Field) => utf8.decode(buf.subarray(x.s, x.e));
  const graph = fields(0, buf.length).find((x) => x.f === 7);
  if (!graph) throw new Error("model.onnx: no graph");
  const sizes = new Map<string, number>();
  const consumers = new Map<string, { op: string; index: number; node: string }[]>();
  const nodes: { name: string; op: string; inputs: string[] }[] = [];
  for (const g of fields(graph.s, graph.e)) {
    if (g.f === 5) {
      let name = "";
      let bytes = 0;
      for (const t of fields(g.s, g.e)) {
        if (t.f === 8) name = str(t);
        else if (t.f === 9) bytes = t.e - t.s;
        else if (t.f === 13) {
          const kv = fields(t.s, t.e);
          const k = kv.find((x) => x.f === 1);
          const v = kv.find((x) => x.f === 2);
          if (k && v && str(k) === "length") bytes = Number(str(v));
        }
      }
      sizes.set(name, bytes);
    } else if (g.f === 1) {
      const n = { name: "", op: "", inputs: [] as string[] };
      for (const t of fields(g.s, g.e)) {
        if (t.f === 1) n.inputs.push(str(t));
        else if (t.f === 3) n.name = str(t);
        else if (t.f === 4) n.op = str(t);
      }
      nodes.push(n);
      n.inputs.forEach((input, index) => {
        const list = consumers.get(input) ?? [];
        list.push({ op: n.op, index, node: n.name });
        consumers.set(input, list);
      });
    }
  }
  const total = [...sizes.values()].reduce((a, b) => a + b, 0);
  const gathered: Inventory["gathered"] = [];
  for (const [name, bytes] of sizes) {
    const uses = consumers.get(name) ?? [];
    if (
      uses.length > 0 &&
      uses.every((u) => ((u.op === "Gather" || u.op === "GatherBlockQuantized") && u.index !== 1) || (u.op === "RotaryEmbedding" && u.index >= 2))
    )
      gathered.push({ name, bytes });
  }
  // Roles of streamed weights and of nodes (for the profile): the linear a weight belongs to.
  const roleOf = (weight: string): string => {
    if (weight.startsWith("lm_head")) return "lm head";
    const m = /^blk\.\d+\.([a-z_]+)/.exec(weight);
    if (m) return m[1];
    return "other";
  };
  const byRole = new Map<string, number>();
  for (const [name, bytes] of sizes) {
    if (gathered.some((g) => g.name === name) || bytes < 4096) continue;
    const r = roleOf(name);
    byRole.set(r, (byRole.get(r) ?? 0) + bytes);
  }
  const nodeRole = new Map<string, string>();
  for (const n of nodes) {
    if (n.op === "MatMulNBits" || (n.op === "MatMul" && n.inputs.some((i) => sizes.has(i) && (sizes.get(i) ?? 0) > 4096))) {
      const w = n.inputs.find((i) => sizes.has(i)) ?? "";
      nodeRole.set(n.name, `${n.op} ${roleOf(w)}${w.endsWith(".mins") ? " (Q4_1 mins)" : ""}`);
    } else if (n.op === "MatMul" && n.inputs.some((i) => i.startsWith("past_key_t") || i.startsWith("past_value"))) {
      nodeRole.set(n.name, "MatMul attention over cache");
    } else if (n.op === "MatMul") {
      nodeRole.set(n.name, "MatMul attention (new tokens)");
    } else nodeRole.set(n.name, n.op);
  }
  return { total, gathered, byRole, nodeRole };
}

const weightFileBytes = statSync(join(artifactDir, ARTIFACT_FILES.weights)).size;
const inventory = onnxInventory(artifactDir);
const gatheredBytes = inventory.gathered.reduce((a, g) => a + g.bytes, 0);
const kilnStreamed = inventory.total - gatheredBytes;
/** kiln's cache is float32 K and V for every position up to capacity, all read each step (masked). */
const kilnKvPerPosition = 2 * shape.layers * shape.kvHeads * shape.headDim * 4;
const kilnCapacity = (positions: number) => Math.ceil(positions / KV_CHUNK) * KV_CHUNK;

const tiedHead = !gguf.tensors.some((t) => t.name === "output.weight");
const ggufTensorBytes = gguf.tensors.reduce((a, t) => a + t.byteLength, 0);
const ggufEmbd = gguf.tensors.find((t) => t.name === "token_embd.weight");
/** llama.cpp reads every tensor each step; token_embd only by row unless it doubles as the output matrix. */
const llamaStreamed = ggufTensorBytes - (tiedHead ? 0 : (ggufEmbd?.byteLength ?? 0));
const llamaKvPerPosition = 2 * shape.layers * shape.kvHeads * shape.headDim * 2; // f16 cache (node-llama-cpp default)

const linearParams = gguf.tensors.filter((t) => t.name.startsWith("blk.") && t.dims.length === 2).reduce((a, t) => a + t.elementCount, 0);
const headParams = shape.vocab * shape.hidden;
/** FLOPs per token at context c: 2 per linear weight, plus QK^T and PV over c positions. */
const attnFlops = (c: number) => 4 * shape.heads * shape.headDim * c * shape.layers;
const prefillFlopsPerToken = 2 * linearParams + attnFlops((PREFILL + 1) / 2) + (2 * headParams) / PREFILL; // LM head on the last position only
const decodeFlopsPerToken = (c: number) => 2 * linearParams + attnFlops(c) + 2 * headParams;

// ── machine probes ─────────────────────────────────────────────────────────────────────────

/** Copy bandwidth (bytes read + written per second) with `n` threads, each copying its own large buffers. */
async function copyBandwidth(n: number, bytesPerBuffer = 256 * 2 ** 20, reps = 6, trials = 5): Promise<number> {
  const code = `
    const { parentPort, workerData } = require("node:worker_threads");
    const n = workerData.bytes / 8;
    const a = new Float64Array(n).fill(1), b = new Float64Array(n).fill(2);
    b.set(a); a.set(b);
    parentPort.on("message", (m) => {
      if (m === "stop") { parentPort.close(); return; }
      const t = performance.now();
      for (let r = 0; r < workerData.reps; r++) (r & 1 ? a : b).set(r & 1 ? b : a);
      parentPort.postMessage(performance.now() - t);
    });
    parentPort.postMessage("ready");`;
  const workers = Array.from({ length: n }, () => new Worker(code, { eval: true, workerData: { bytes: bytesPerBuffer, reps } }));
  const next = (w: Worker) =>
    new Promise<unknown>((res, rej) => {
      w.once("message", res);
      w.once("error", rej);
    });
  await Promise.all(workers.map(next));
  let best = 0;
  for (let t = 0; t < trials; t++) {
    const done = workers.map(next);
    workers.forEach((w) => w.postMessage("go"));
    const ms = Math.max(...((await Promise.all(done)) as number[]));
    best = Math.max(best, (2 * bytesPerBuffer * reps * n) / (ms / 1000));
  }
  await Promise.all(workers.map((w) => w.terminate()));
  return best;
}

/** One layer's linear shapes [K, N] as kiln fuses them (qkv, attn_output, gate_up, ffn_down), from the GGUF. */
function layerLinears(): { label: string; k: number; n: number }[] {
  const t = (name: string) => gguf.tensors.find((x) => x.name === `blk.0.${name}.weight`);
  const group = (label: string, names: string[]) => {
    const ts = names.map(t);
    if (ts.some((x) => !x)) return null;
    return { label, k: ts[0]!.dims[0], n: ts.reduce((a, x) => a + x!.dims[1], 0) };
  };
  return [
    group("qkv", ["attn_q", "attn_k", "attn_v"]),
    group("attn_output", ["attn_output"]),
    group("gate_up", ["ffn_gate", "ffn_up"]),
    group("ffn_down", ["ffn_down"]),
  ].filter((x): x is { label: string; k: number; n: number } => x !== null);
}

/**
 * Best-of GFLOP/s of onnxruntime's MatMulNBits (4-bit, block 32, kiln's accuracy level) over one
 * layer's linear shapes at M rows, run as one graph; outputs are reduced to a scalar so that copying
 * results back to JS does not count.
 */
async function ortGflops(accuracyLevel: number, M = 512, iterations = 40): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), "kiln-bench-"));
  try {
    const shapes = layerLinears();
    const g = new GraphBuilder(join(dir, "w.data"));
    const inputs = new Map<number, string>();
    for (const { k } of shapes) if (!inputs.has(k)) inputs.set(k, g.input(`x${k}`, DataType.FLOAT, [1, M, k]));
    g.output("y", DataType.FLOAT, []);
    const rnd = (n: number) => Uint8Array.from({ length: n }, () => (Math.random() * 256) | 0);
    const sums = shapes.map(({ label, k, n }) => {
      const kb = k / 32;
      const scales = Float32Array.from({ length: n * kb }, () => 0.01 + Math.random() * 0.01);
      const y = g.op(
        "MatMulNBits",
        [inputs.get(k)!, g.weight(`${label}.q`, DataType.UINT8, [n, kb, 16], rnd(n * kb * 16)), g.weight(`${label}.s`, DataType.FLOAT, [n, kb], scales)],
        {
          domain: "com.microsoft",
          attributes: { K: k, N: n, bits: 4, block_size: 32, accuracy_level: accuracyLevel },
        },
      );
      return g.op("ReduceSum", [y], { attributes: { keepdims: 0 } });
    });
    let total = sums[0];
    for (let i = 1; i < sums.length; i++) total = g.op("Add", [total, sums[i]], i === sums.length - 1 ? { names: ["y"] } : {});
    if (sums.length === 1) g.node("Identity", [total], { names: ["y"] });
    const graphPath = join(dir, "m.onnx");
    writeFileSync(graphPath, g.finish("probe", "0", {}));
    const session = await ort.InferenceSession.create(graphPath, {
      executionProviders: ["cpu"],
      intraOpNumThreads: threads,
      interOpNumThreads: 1,
      graphOptimizationLevel: "all",
    });
    const feeds: Record<string, ort.Tensor> = {};
    for (const [k, name] of inputs)
      feeds[name] = new ort.Tensor(
        "float32",
        Float32Array.from({ length: M * k }, () => Math.random() - 0.5),
        [1, M, k],
      );
    let best = Infinity;
    for (let i = 0; i < iterations + 2; i++) {
      const t = now();
      await session.run(feeds);
      if (i >= 2) best = Math.min(best, now() - t);
    }
    await session.release();
    const flops = 2 * M * shapes.reduce((a, x) => a + x.k * x.n, 0);
    return flops / (best / 1000) / 1e9;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

log("probing memory bandwidth and onnxruntime matmul throughput ...");
const bw1 = await copyBandwidth(1);
// More threads cannot lower the machine's bandwidth: a lower reading is contention, so keep the higher.
const bwN = Math.max(bw1, threads > 1 ? await copyBandwidth(threads) : bw1);
const kilnAccuracy = numerics === "llama.cpp" ? Number(process.env.KILN_EMU_ACC ?? 0) : 4;
const probeCpu = cpuSnapshot();
const probeStart = now();
const gflopsNbits = await ortGflops(kilnAccuracy);
const probeBusy = othersCores(probeCpu, cpuSnapshot(), (now() - probeStart) / 1000);

// ── engines ────────────────────────────────────────────────────────────────────────────────

log(`loading kiln artifact ${compiled.manifest.id} and llama.cpp on ${threads} threads ...`);
const kiln = await TextSession.load(artifactDir, { threads, slots: 1, kvChunk: KV_CHUNK });
/** An empty KV pool with its capacity shrunk back (`truncate(0, 0)` alone keeps the grown capacity). */
function freshCache(session = kiln): KvPool {
  session.kv.reset();
  return session.kv;
}

const llama = await getLlama({ gpu: false });
const llamaModel: LlamaModel = await llama.loadModel({ modelPath: ggufPath });
const llamaCtx: LlamaContext = await llamaModel.createContext({ contextSize: LLAMA_CONTEXT, threads: { ideal: threads, min: threads }, batchSize: 512 });

// Fixed prompt ids, from llama.cpp's tokenizer (same ids fed to both engines).
const PARAGRAPH =
  "The lighthouse keeper climbed the spiral stairs every evening, counting the steps out of habit. " +
  "From the top he could see the harbour, the fishing boats coming home, and the long grey line of the coast " +
  "where the cliffs met the sea. He wrote the weather in a small notebook: wind from the west, light rain, " +
  "visibility good. Some nights a ship would pass far out, its lights moving slowly across the dark water, " +
  "and he would wonder where it was going and what it carried. In the morning he trimmed the wick, cleaned the glass, " +
  "and walked down to the village for bread and news. ";
let promptIds: number[] = [];
for (let text = PARAGRAPH; promptIds.length < Math.max(PREFILL, ...CONTEXTS) + 1; text += PARAGRAPH) promptIds = [...llamaModel.tokenize(text)].map(Number);
if (llamaModel.tokens.bos !== null) promptIds.unshift(Number(llamaModel.tokens.bos));

// ── workloads ──────────────────────────────────────────────────────────────────────────────

interface DecodeResult {
  tps: number;
  kvBytes: number;
}

async function kilnPrefill(ids: number[]): Promise<number> {
  freshCache();
  const t = now();
  await kiln.forward(0, 1, ids.length, ids);
  return ids.length / ((now() - t) / 1000);
}

/** Decode `steps` tokens at context `L`; `grownTo` pre-grows the pool (stale capacity from an earlier sequence). */
async function kilnDecode(L: number, grownTo = 0, session = kiln): Promise<DecodeResult> {
  const kv = freshCache(session);
  if (grownTo) kv.ensure(grownTo);
  await session.forward(0, 1, L - 1, promptIds.slice(0, L - 1));
  let tok = promptIds[L - 1];
  let kvBytes = 0;
  const t = now();
  for (let i = 0; i < steps; i++) {
    tok = argmax(await session.forward(0, 1, 1, [tok]));
    if (i === 0) kvBytes = session.kv.bytes();
  }
  return { tps: steps / ((now() - t) / 1000), kvBytes };
}

/**
 * `session.kv.slots` sequences, each prefilled (untimed) with its own `prompt` tokens, then `steps`
 * steps of one token per sequence in one forward; tokens/s counts every sequence's tokens (as
 * llama-batched-bench's S_TG does).
 */
async function kilnBatched(session: TextSession, prompt: number): Promise<DecodeResult> {
  const rows = session.kv.slots;
  freshCache(session);
  const ids: number[] = [];
  for (let r = 0; r < rows; r++) ids.push(...promptIds.slice(r, r + prompt));
  let logits = await session.forward(0, rows, prompt, ids);
  let kvBytes = 0;
  const vocab = session.vocab;
  const t = now();
  for (let i = 0; i < steps; i++) {
    const next = Array.from({ length: rows }, (_, r) => argmax(logits.subarray(r * vocab, (r + 1) * vocab)));
    logits = await session.forward(0, rows, 1, next);
    if (i === 0) kvBytes = session.kv.bytes();
  }
  return { tps: (rows * steps) / ((now() - t) / 1000), kvBytes };
}

async function llamaPrefill(ids: number[]): Promise<number> {
  const seq = llamaCtx.getSequence();
  try {
    const t = now();
    await seq.evaluateWithoutGeneratingNewTokens(ids as Token[]);
    return ids.length / ((now() - t) / 1000);
  } finally {
    await seq.dispose();
  }
}

async function llamaDecode(L: number): Promise<DecodeResult> {
  const seq = llamaCtx.getSequence();
  try {
    await seq.evaluateWithoutGeneratingNewTokens(promptIds.slice(0, L - 1) as Token[]);
    const gen = seq.evaluate([promptIds[L - 1]] as Token[], { temperature: 0, yieldEogToken: true });
    let n = 0;
    const t = now();
    for (let i = 0; i < steps; i++) {
      const r = await gen.next();
      if (r.done) break;
      n++;
    }
    const dt = now() - t;
    await gen.return();
    if (n !== steps) throw new Error(`llama.cpp stopped after ${n} of ${steps} tokens`);
    return { tps: steps / (dt / 1000), kvBytes: llamaCtx.stateSize };
  } finally {
    await seq.dispose();
  }
}

interface Workload {
  key: string;
  label: string;
  context: number;
  kiln: () => Promise<number | DecodeResult>;
  llama?: () => Promise<number | DecodeResult>;
}
const staleCap = kilnCapacity(Math.max(...CONTEXTS) + steps);
const workloads: Workload[] = [
  {
    key: `prefill-${PREFILL}`,
    label: `prefill ${PREFILL}`,
    context: PREFILL,
    kiln: () => kilnPrefill(promptIds.slice(0, PREFILL)),
    llama: () => llamaPrefill(promptIds.slice(0, PREFILL)),
  },
  ...CONTEXTS.map((L) => ({ key: `decode-${L}`, label: `decode @${L} (+${steps})`, context: L, kiln: () => kilnDecode(L), llama: () => llamaDecode(L) })),
  { key: `decode-128-stale`, label: `decode @128, cap ${staleCap}*`, context: 128, kiln: () => kilnDecode(128, staleCap) },
];

log("warming up ...");
freshCache();
await kiln.forward(0, 1, 64, promptIds.slice(0, 64));
for (let i = 0; i < 4; i++) await kiln.forward(0, 1, 1, [promptIds[64 + i]]);
await llamaPrefill(promptIds.slice(0, 64));
await llamaDecode(64);

const samples = new Map<string, { kiln: number[]; llama: number[]; kilnKv: number[]; llamaKv: number[]; busyKiln: number[]; busyLlama: number[] }>();
for (const w of workloads) samples.set(w.key, { kiln: [], llama: [], kilnKv: [], llamaKv: [], busyKiln: [], busyLlama: [] });
let contendedSamples = 0;
const cpuBefore = cpuSnapshot();
const measureStart = now();
for (let r = 0; r < runs; r++) {
  for (const w of workloads) {
    const s = samples.get(w.key)!;
    const order: ("kiln" | "llama")[] = r % 2 === 0 ? ["kiln", "llama"] : ["llama", "kiln"];
    for (const engine of order) {
      const fn = engine === "kiln" ? w.kiln : w.llama;
      if (!fn) continue;
      // On a shared machine, a sample during which other processes were busy is taken again
      // (up to --retries times, while time allows) and the quietest attempt is kept.
      let kept: { res: number | DecodeResult; busy: number | null } | null = null;
      for (let attempt = 0; attempt <= retries; attempt++) {
        await sleep(150); // let the other engine's spinning worker threads go idle
        const c0 = cpuSnapshot();
        const t0 = now();
        const res = await fn();
        const busy = othersCores(c0, cpuSnapshot(), (now() - t0) / 1000);
        const tps = typeof res === "number" ? res : res.tps;
        log(
          `  run ${r + 1}/${runs} ${w.label.padEnd(24)} ${engine.padEnd(5)} ${tps.toFixed(1).padStart(7)} tok/s${busy === null ? "" : `  (others busy ${busy.toFixed(2)} cores)`}`,
        );
        if (kept === null || (busy ?? 0) < (kept.busy ?? 0)) kept = { res, busy };
        if (busy === null || busy <= maxBusy || now() - measureStart > retryDeadlineS * 1000) break;
      }
      const { res, busy } = kept!;
      if (busy !== null && busy > maxBusy) contendedSamples++;
      s[engine].push(typeof res === "number" ? res : res.tps);
      s[engine === "kiln" ? "busyKiln" : "busyLlama"].push(busy ?? NaN);
      if (typeof res !== "number") s[engine === "kiln" ? "kilnKv" : "llamaKv"].push(res.kvBytes);
    }
  }
}
const measureSeconds = (now() - measureStart) / 1000;
const othersBusy = othersCores(cpuBefore, cpuSnapshot(), measureSeconds);

// ── per-step breakdown (kiln, decode at 512) ───────────────────────────────────────────────

interface Breakdown {
  context: number;
  msPerStep: { total: number; sessionRun: number; kvAppend: number; kvGrow: number; forwardOther: number; argmax: number };
  profile?: { msModelRun: number; msKernels: number; nodesPerStep: number; top: { what: string; ms: number; share: number }[] };
}

async function breakdown(L = 512): Promise<Breakdown> {
  freshCache();
  await kiln.forward(0, 1, L - 1, promptIds.slice(0, L - 1));
  let tRun = 0;
  let tAppend = 0;
  let tEnsure = 0;
  let tArgmax = 0;
  let tok = promptIds[L - 1];
  const t0 = now();
  for (let i = 0; i < steps; i++) {
    const logits = await kiln.forward(0, 1, 1, [tok]);
    tRun += kiln.lastStep.runMs;
    tAppend += kiln.lastStep.appendMs;
    tEnsure += kiln.lastStep.growMs;
    const t = now();
    tok = argmax(logits);
    tArgmax += now() - t;
  }
  const total = now() - t0;
  const per = (x: number) => x / steps;
  const result: Breakdown = {
    context: L,
    msPerStep: {
      total: per(total),
      sessionRun: per(tRun),
      kvAppend: per(tAppend),
      kvGrow: per(tEnsure),
      forwardOther: per(total - tRun - tAppend - tEnsure - tArgmax),
      argmax: per(tArgmax),
    },
  };
  if (!args["skip-profile"]) result.profile = await profileDecode(L);
  return result;
}

/** The same decode on a second model loaded with onnxruntime profiling on (the prefill is skipped in the counts). */
async function profileDecode(L: number) {
  const dir = mkdtempSync(join(tmpdir(), "kiln-prof-"));
  const prof = await TextSession.load(artifactDir, { threads, slots: 1, kvChunk: KV_CHUNK, profileFilePrefix: join(dir, "ort") });
  try {
    await prof.forward(0, 1, L - 1, promptIds.slice(0, L - 1));
    let tok = promptIds[L - 1];
    for (let i = 0; i < steps; i++) tok = argmax(await prof.forward(0, 1, 1, [tok]));
    prof.endProfiling();
    const file = readdirSync(dir).find((f) => f.endsWith(".json"));
    if (!file) return undefined;
    type Ev = { cat: string; name: string; dur: number; ts: number; args?: { op_name?: string } };
    const events = JSON.parse(readFileSync(join(dir, file), "utf8")) as Ev[];
    const runsEv = events.filter((e) => e.cat === "Session" && e.name === "model_run");
    const skip = Math.min(2, runsEv.length - 1); // first runs of a fresh session allocate
    const counted = runsEv.slice(skip);
    const from = counted[0]?.ts ?? 0;
    const byWhat = new Map<string, number>();
    let kernels = 0;
    let nodeEvents = 0;
    for (const e of events) {
      if (e.cat !== "Node" || !e.name.endsWith("_kernel_time") || e.ts < from) continue;
      const node = e.name.slice(0, -"_kernel_time".length);
      const what = inventory.nodeRole.get(node) ?? e.args?.op_name ?? node;
      byWhat.set(what, (byWhat.get(what) ?? 0) + e.dur);
      kernels += e.dur;
      nodeEvents++;
    }
    const n = counted.length;
    const top = [...byWhat.entries()].sort((a, b) => b[1] - a[1]).map(([what, us]) => ({ what, ms: us / 1000 / n, share: us / kernels }));
    return { msModelRun: counted.reduce((a, e) => a + e.dur, 0) / 1000 / n, msKernels: kernels / 1000 / n, nodesPerStep: nodeEvents / n, top };
  } finally {
    await prof.release();
    rmSync(dir, { recursive: true, force: true });
  }
}

log("per-step breakdown (kiln, decode @512) ...");
const bdCpu = cpuSnapshot();
const bdStart = now();
const bd = await breakdown(512);
const bdBusy = othersCores(bdCpu, cpuSnapshot(), (now() - bdStart) / 1000);

// ── native llama.cpp beside kiln ───────────────────────────────────────────────────────────

const NATIVE_CONTEXT = 128;
const BATCH_SEQUENCES = 16;
const nativeThreads = [...new Set([1, threads])];

interface PeerSample {
  tps: number;
  /** Cores other processes used meanwhile (this process and the native child excluded). */
  busy: number | null;
  /** A second figure of the same sample (llama-batched-bench's prompt tokens/s). */
  extra?: number;
}

/**
 * One sample under the main loop's retry rule (taken again while others used more than
 * --max-busy cores, until `retryDeadlineS` after `since`). `fn` reports the CPU seconds of any
 * child it ran, which are not "others".
 */
async function quiet(
  label: string,
  engine: string,
  fn: () => Promise<{ tps: number; childCpuSeconds?: number; extra?: number }>,
  since: number,
): Promise<PeerSample> {
  let kept: PeerSample | null = null;
  for (let attempt = 0; attempt <= retries; attempt++) {
    await sleep(150);
    const c0 = cpuSnapshot();
    const t0 = now();
    const res = await fn();
    const c1 = cpuSnapshot();
    const seconds = (now() - t0) / 1000;
    const child = res.childCpuSeconds ?? 0;
    const busy = c0 && c1 && Number.isFinite(child) ? Math.max(0, c1.machine - c0.machine - (c1.ours - c0.ours) - child) / seconds : null;
    log(`  ${label.padEnd(30)} ${engine.padEnd(6)} ${res.tps.toFixed(1).padStart(7)} tok/s${busy === null ? "" : `  (others busy ${busy.toFixed(2)} cores)`}`);
    if (kept === null || (busy ?? 0) < (kept.busy ?? 0)) kept = { tps: res.tps, busy, extra: res.extra };
    if (busy === null || busy <= maxBusy || now() - since > retryDeadlineS * 1000) break;
  }
  if (kept!.busy !== null && kept!.busy > maxBusy) contendedSamples++;
  return kept!;
}

interface NativeWorkload {
  key: string;
  label: string;
  threads: number;
  /** Sequences decoding together (1 except the batch row); the bandwidth limit scales with it. */
  sequences: number;
  native: () => Promise<{ tps: number; childCpuSeconds: number; extra?: number }>;
  kiln: () => Promise<{ tps: number }>;
}

/**
 * Every workload of the native table, kiln and llama.cpp alternating first between runs as in
 * the main loop, so that both sides of a ratio were measured minutes apart at most. kiln's
 * --threads decode and prefill are measured again here rather than taken from the main table.
 */
async function nativeSection() {
  if (!native) return null;
  const bins = native;
  log(`native llama.cpp (${bins.version ?? "unknown version"}) beside kiln ...`);
  const hasDepth = benchHasDepth(bins);
  if (!hasDepth) log(`  this llama-bench has no -d/--n-depth: its decode is timed from an empty cache, not at ${NATIVE_CONTEXT}`);
  let decodeInfo: { flashAttention: string; kvType: string; buildCommit: string; depth: number } | null = null;
  // kiln at 1 thread needs a session of its own when --threads is not 1; 16 sequences need 16 slots.
  const sessions = new Map<number, TextSession>([[threads, kiln]]);
  for (const t of nativeThreads) if (!sessions.has(t)) sessions.set(t, await TextSession.load(artifactDir, { threads: t, slots: 1, kvChunk: KV_CHUNK }));
  const kilnB = await TextSession.load(artifactDir, { threads, slots: BATCH_SEQUENCES, kvChunk: KV_CHUNK });
  const workloads: NativeWorkload[] = [
    ...nativeThreads.map((t) => ({
      key: `decode-${NATIVE_CONTEXT}-${t}t`,
      label: `decode @${NATIVE_CONTEXT} (+${steps}), ${t}t`,
      threads: t,
      sequences: 1,
      native: async () => {
        const [f] = await nativeDecode(bins, ggufPath, { threads: [t], depth: NATIVE_CONTEXT, tokens: steps, repetitions: 1 });
        decodeInfo = { flashAttention: f.flashAttention, kvType: f.kvType, buildCommit: f.buildCommit, depth: f.depth };
        return { tps: f.tokensPerSecond, childCpuSeconds: f.cpuSeconds };
      },
      kiln: () => kilnDecode(NATIVE_CONTEXT, 0, sessions.get(t)!),
    })),
    {
      key: `prefill-${PREFILL}`,
      label: `prefill ${PREFILL}, ${threads}t`,
      threads,
      sequences: 1,
      native: async () => {
        const f = await nativePrefill(bins, ggufPath, { threads, tokens: PREFILL, repetitions: 1 });
        return { tps: f.tokensPerSecond, childCpuSeconds: f.cpuSeconds };
      },
      kiln: async () => ({ tps: await kilnPrefill(promptIds.slice(0, PREFILL)) }),
    },
    {
      key: `batch-${BATCH_SEQUENCES}`,
      label: `${BATCH_SEQUENCES} seq @${NATIVE_CONTEXT} (+${steps}), ${threads}t`,
      threads,
      sequences: BATCH_SEQUENCES,
      native: async () => {
        const f = await nativeBatched(bins, ggufPath, { threads, sequences: BATCH_SEQUENCES, prompt: NATIVE_CONTEXT, tokens: steps, repetitions: 1 });
        return { tps: f.tokensPerSecond, childCpuSeconds: f.cpuSeconds, extra: f.prefillTokensPerSecond };
      },
      kiln: () => kilnBatched(kilnB, NATIVE_CONTEXT),
    },
  ];
  const samples = new Map(workloads.map((w) => [w.key, { native: [] as PeerSample[], kiln: [] as PeerSample[] }]));
  // Its own retry window: llama.cpp's spinning threads lose far more than kiln's when the two cores
  // are shared, so a contended native sample is worth taking again even late in a long run.
  const sectionStart = now();
  try {
    for (const s of sessions.values()) if (s !== kiln) await kilnDecode(64, 0, s); // warm-up
    await kilnBatched(kilnB, 16);
    for (let r = 0; r < runs; r++) {
      for (const w of workloads) {
        const order: ("kiln" | "native")[] = r % 2 === 0 ? ["native", "kiln"] : ["kiln", "native"];
        for (const engine of order) samples.get(w.key)![engine].push(await quiet(w.label, engine, w[engine], sectionStart));
      }
    }
  } finally {
    for (const s of sessions.values()) if (s !== kiln) await s.release();
    await kilnB.release();
  }
  const batchedPrefill = samples.get(`batch-${BATCH_SEQUENCES}`)!.native.map((x) => x.extra ?? NaN);
  return {
    workloads,
    samples,
    info: decodeInfo as { flashAttention: string; kvType: string; buildCommit: string; depth: number } | null,
    hasDepth,
    batchedPrefill,
  };
}
const nativeStart = now();
const nativeRun = await nativeSection();
const nativeSeconds = (now() - nativeStart) / 1000;

// ── report ─────────────────────────────────────────────────────────────────────────────────

const rows = workloads.map((w) => {
  const s = samples.get(w.key)!;
  const isDecode = w.key.startsWith("decode");
  const kilnMed = median(s.kiln);
  const llamaMed = s.llama.length ? median(s.llama) : null;
  const kvKiln = s.kilnKv.length ? median(s.kilnKv) : kilnKvPerPosition * kilnCapacity(w.context);
  const mid = w.context + steps / 2; // mid-block context
  const capAtContext = w.key.endsWith("stale") ? staleCap : kilnCapacity(mid);
  const kilnLimit = isDecode ? bwN / (kilnStreamed + kilnKvPerPosition * capAtContext) : (gflopsNbits * 1e9) / prefillFlopsPerToken;
  const llamaLimit = isDecode ? bwN / (llamaStreamed + llamaKvPerPosition * mid) : null;
  return {
    key: w.key,
    label: w.label,
    kiln: { median: kilnMed, min: Math.min(...s.kiln), max: Math.max(...s.kiln), runs: s.kiln },
    llama: llamaMed === null ? null : { median: llamaMed, min: Math.min(...s.llama), max: Math.max(...s.llama), runs: s.llama },
    ratio: llamaMed === null ? null : kilnMed / llamaMed,
    /** Ratio of the best runs: less sensitive to other processes than the medians on a shared machine. */
    bestRatio: s.llama.length ? Math.max(...s.kiln) / Math.max(...s.llama) : null,
    othersBusyCores: { kiln: s.busyKiln, llama: s.busyLlama },
    limit: { kiln: kilnLimit, llama: llamaLimit },
    kilnOfLimit: kilnMed / kilnLimit,
    kilnKvBytes: kvKiln,
    llamaStateBytes: s.llamaKv.length ? median(s.llamaKv) : null,
  };
});

/** kiln beside native llama.cpp; decode limits use the 1-thread bandwidth at 1 thread, the best figure otherwise. */
const nativeRows = (() => {
  if (!nativeRun) return null;
  const stats = (xs: PeerSample[]) => {
    const v = xs.map((x) => x.tps);
    return { median: median(v), min: Math.min(...v), max: Math.max(...v), runs: v };
  };
  const mid = NATIVE_CONTEXT + steps / 2;
  const prefillLimit = rows.find((r) => r.key === `prefill-${PREFILL}`)!.limit.kiln;
  return nativeRun.workloads.map((w) => {
    const s = nativeRun.samples.get(w.key)!;
    const n = stats(s.native);
    const k = stats(s.kiln);
    const bw = w.threads === 1 ? bw1 : bwN;
    const isPrefill = w.key.startsWith("prefill");
    const limit = isPrefill
      ? { kiln: prefillLimit, native: null, kind: "compute" as const }
      : {
          kiln: (w.sequences * bw) / (kilnStreamed + w.sequences * kilnKvPerPosition * kilnCapacity(mid)),
          native: (w.sequences * bw) / (llamaStreamed + w.sequences * llamaKvPerPosition * mid),
          kind: "bandwidth" as const,
        };
    return {
      key: w.key,
      label: w.label,
      threads: w.threads,
      sequences: w.sequences,
      native: n,
      kiln: k,
      ratio: k.median / n.median,
      limit,
      kilnOfLimit: k.median / limit.kiln,
      nativeOfLimit: limit.native === null ? null : n.median / limit.native,
      othersBusyCores: { native: s.native.map((x) => x.busy), kiln: s.kiln.map((x) => x.busy) },
    };
  });
})();
const fmt = (x: { median: number; min: number; max: number } | null) =>
  x === null ? "—" : `${x.median.toFixed(x.median < 100 ? 1 : 0)} [${x.min.toFixed(0)}-${x.max.toFixed(0)}]`;
const pad = (s: string, n: number) => s.padEnd(n);
const lpad = (s: string, n: number) => s.padStart(n);

const out: string[] = [];
out.push(`kiln text benchmark: ${slug}, ${gguf.path.split("/").pop()} (${MB(gguf.fileSize)})`);
out.push(`  artifact ${compiled.manifest.id} (numerics ${numerics}), ${threads} threads, ${runs} runs (median [min-max]), decode block ${steps} tokens`);
out.push(
  `  llama.cpp: node-llama-cpp, context ${LLAMA_CONTEXT}, batch 512, flash attention ${String(llamaCtx.flashAttention)}, KV ${GgmlType[llamaCtx.kvCacheKeyType as number] ?? String(llamaCtx.kvCacheKeyType)}`,
);
out.push(
  `  machine: ${cpus()[0]?.model ?? "?"} x${cpus().length}; copy bandwidth ${(bw1 / 1e9).toFixed(1)} GB/s (1 thread), ${(bwN / 1e9).toFixed(1)} GB/s (best of 1 and ${threads} threads)`,
);
out.push(
  `  onnxruntime ${threads}-thread MatMulNBits (4-bit, block 32, accuracy_level ${kilnAccuracy}) on one layer's linears at 512 rows: ${gflopsNbits.toFixed(0)} GFLOP/s` +
    (probeBusy !== null && probeBusy > 0.2 ? ` (others busy ${probeBusy.toFixed(2)} cores during the probe: likely low)` : ""),
);
out.push("");
out.push(
  `${pad("workload", 26)}${lpad("kiln tok/s", 18)}${lpad("llama.cpp tok/s", 20)}${lpad("kiln/llama", 12)}${lpad("(best)", 8)}${lpad("limit kiln", 12)}${lpad("limit llama", 13)}${lpad("kiln/limit", 12)}${lpad("kiln KV", 11)}`,
);
for (const r of rows) {
  out.push(
    `${pad(r.label, 26)}${lpad(fmt(r.kiln), 18)}${lpad(fmt(r.llama), 20)}${lpad(r.ratio === null ? "—" : `${r.ratio.toFixed(2)}x`, 12)}${lpad(r.bestRatio === null ? "—" : `${r.bestRatio.toFixed(2)}x`, 8)}` +
      `${lpad(r.limit.kiln.toFixed(0), 12)}${lpad(r.limit.llama === null ? "—" : r.limit.llama.toFixed(0), 13)}${lpad(`${(100 * r.kilnOfLimit).toFixed(0)}%`, 12)}${lpad(MB(r.kilnKvBytes), 11)}`,
  );
}
if (contendedSamples > 0)
  out.push(
    `  ${contendedSamples} sample(s) kept despite other processes using more than ${maxBusy} cores (after ${retries} retries); see --json othersBusyCores.`,
  );
out.push(
  `  * kiln only: a fresh sequence decoding at 128 in a pool whose capacity an earlier ${Math.max(...CONTEXTS)}+${steps}-token sequence grew to ${staleCap} (truncate never shrinks it).`,
);
out.push(
  `  node-llama-cpp adds JavaScript work per token, so its figures understate llama.cpp; ${nativeRun ? "the native table below does not" : "build the native tools with --native for llama.cpp's own figures"}.`,
);
{
  const d = rows.find((r) => r.key === `decode-${NATIVE_CONTEXT}`)!;
  out.push(
    `  kiln decode @${NATIVE_CONTEXT} (+${steps}), ${threads}t: ${d.kiln.median.toFixed(1)} tok/s = ${(100 * d.kilnOfLimit).toFixed(0)}% of its memory-bandwidth limit ${d.limit.kiln.toFixed(0)} tok/s` +
      ` (${(bwN / 1e9).toFixed(1)} GB/s / ${MB(kilnStreamed + kilnKvPerPosition * kilnCapacity(NATIVE_CONTEXT + steps / 2))} per step).`,
  );
}
if (nativeRows && nativeRun) {
  const info = nativeRun.info;
  const busyMedian = (xs: (number | null)[]) => {
    const v = xs.filter((x): x is number => x !== null);
    return v.length ? median(v).toFixed(2) : "?";
  };
  out.push("");
  out.push(
    `native llama.cpp (${native?.version ?? "?"}, build ${info?.buildCommit ?? "?"}, GGML_NATIVE; flash attention ${info?.flashAttention ?? "?"}, KV ${info?.kvType ?? "?"}; median [min-max] of ${runs} runs, alternating with kiln), same GGUF:`,
  );
  out.push(
    `${pad("workload", 30)}${lpad("native tok/s", 18)}${lpad("kiln tok/s", 18)}${lpad("kiln/native", 13)}${lpad("limit kiln", 12)}${lpad("kiln/limit", 12)}${lpad("limit native", 14)}${lpad("native/limit", 14)}${lpad("others busy", 13)}`,
  );
  for (const r of nativeRows) {
    out.push(
      `${pad(r.label, 30)}${lpad(fmt(r.native), 18)}${lpad(fmt(r.kiln), 18)}${lpad(`${r.ratio.toFixed(2)}x`, 13)}${lpad(r.limit.kiln.toFixed(0), 12)}${lpad(`${(100 * r.kilnOfLimit).toFixed(0)}%`, 12)}` +
        `${lpad(r.limit.native === null ? "—" : r.limit.native.toFixed(0), 14)}${lpad(r.nativeOfLimit === null ? "—" : `${(100 * r.nativeOfLimit).toFixed(0)}%`, 14)}${lpad(`${busyMedian(r.othersBusyCores.native)}/${busyMedian(r.othersBusyCores.kiln)}`, 13)}`,
    );
  }
  if (!nativeRun.hasDepth) out.push(`  this llama-bench has no -d/--n-depth: its decode rows start from an empty cache, not at ${NATIVE_CONTEXT}.`);
  out.push(
    `  decode: llama-bench -p 0 -n ${steps} -d ${NATIVE_CONTEXT}; prefill: llama-bench -p ${PREFILL} -n 0; ${BATCH_SEQUENCES} seq: llama-batched-bench -npp ${NATIVE_CONTEXT} -ntg ${steps} -npl ${BATCH_SEQUENCES} (S_TG, generation only),`,
  );
  out.push(
    `    kiln: one ${BATCH_SEQUENCES}-slot session, each sequence prefilled with its own ${NATIVE_CONTEXT} tokens, then ${steps} steps of ${BATCH_SEQUENCES} rows; every kiln figure here is measured again beside the native run.`,
  );
  out.push(
    `  limits: decode and ${BATCH_SEQUENCES} seq <= sequences x bandwidth (1 thread: ${(bw1 / 1e9).toFixed(1)} GB/s, else ${(bwN / 1e9).toFixed(1)}) / bytes per step (weights + every sequence's KV at mid-block); prefill: kiln's compute limit as above.`,
  );
  out.push(`  others busy: median cores other processes used during the native / kiln samples (the native figure spans its model load too).`);
}
out.push("");
out.push("Limits:");
out.push(`  decode <= bandwidth / bytes per step; bandwidth = the best copy figure (read + write bytes), a rough stand-in for streaming read bandwidth.`);
out.push(
  `    kiln: ${MB(inventory.total)} of initializers (weight file ${MB(weightFileBytes)}) - ${MB(gatheredBytes)} only gathered (${inventory.gathered.map((g) => g.name).join(", ")}) = ${MB(kilnStreamed)} streamed,`,
);
out.push(
  `          + KV cache read every step: ${kilnKvPerPosition} B x capacity (float32 K and V; capacity = context rounded up to ${KV_CHUNK}; masked positions are read too)`,
);
const roles = [...inventory.byRole.entries()].sort((a, b) => b[1] - a[1]).map(([r, b]) => `${r} ${MB(b)}`);
out.push(`          streamed by role: ${roles.join(", ")}`);
out.push(
  `    llama.cpp: ${MB(llamaStreamed)} of GGUF tensors (${tiedHead ? "embedding tied to the output, so read whole each step" : "embedding only gathered"}) + ${llamaKvPerPosition} B x context (f16 K and V)`,
);
out.push(
  `  prefill <= achievable GFLOP/s / GFLOP per token = ${gflopsNbits.toFixed(0)} / ${(prefillFlopsPerToken / 1e9).toFixed(3)} (2 x ${(linearParams / 1e6).toFixed(1)}M linear weights + attention at mean context ${(PREFILL + 1) / 2} + LM head once per prompt);`,
);
out.push(
  `    a decode step is ${(decodeFlopsPerToken(512) / 1e9).toFixed(3)} GFLOP at context 512 (LM head included; ~0.27 in docs/benchmarks.md). The GFLOP/s is onnxruntime's own kernel, not a hardware peak.`,
);
out.push("");
out.push(`kiln per-step cost, decode @${bd.context} (${steps} steps, instrumented run${bdBusy === null ? "" : `; others busy ${bdBusy.toFixed(2)} cores`}):`);
const m = bd.msPerStep;
out.push(
  `  ${m.total.toFixed(2)} ms/step = session.run ${m.sessionRun.toFixed(2)} + KV append (JS) ${m.kvAppend.toFixed(2)} + KV grow ${m.kvGrow.toFixed(2)} + other forward JS (feeds, masks) ${m.forwardOther.toFixed(2)} + argmax ${m.argmax.toFixed(2)}`,
);
if (bd.profile) {
  const p = bd.profile;
  out.push(`  onnxruntime profile (profiling adds per-node cost, so read the shares, not the absolute ms): model_run ${p.msModelRun.toFixed(2)} ms/step,`);
  out.push(
    `    ${p.nodesPerStep.toFixed(0)} nodes/step, kernels ${p.msKernels.toFixed(2)} ms/step (${((1000 * p.msKernels) / p.nodesPerStep).toFixed(1)} us/node); model_run - kernels = scheduling between nodes`,
  );
  for (const t of p.top.slice(0, 10)) out.push(`    ${pad(t.what, 34)}${lpad(t.ms.toFixed(3), 8)} ms ${lpad((100 * t.share).toFixed(1), 6)}%`);
  const rest = p.top.slice(10);
  if (rest.length)
    out.push(
      `    ${pad(`(${rest.length} more kinds)`, 34)}${lpad(rest.reduce((a, t) => a + t.ms, 0).toFixed(3), 8)} ms ${lpad((100 * rest.reduce((a, t) => a + t.share, 0)).toFixed(1), 6)}%`,
    );
}
out.push("");
out.push(
  `setup ${((measureStart - setupStart) / 1000).toFixed(0)} s, measurement ${measureSeconds.toFixed(0)} s${nativeRun ? ` (+ ${nativeSeconds.toFixed(0)} s beside native llama.cpp)` : ""}${othersBusy === null ? "" : `; other processes used ${othersBusy.toFixed(2)} of ${cpus().length} cores meanwhile${othersBusy > 0.2 ? " (contended: treat the numbers as noisy)" : ""}`}`,
);
console.log(out.join("\n"));

if (args.json) {
  console.log(
    JSON.stringify(
      {
        model: slug,
        gguf: { path: ggufPath, bytes: gguf.fileSize, tensorBytes: ggufTensorBytes },
        artifact: {
          id: compiled.manifest.id,
          dir: artifactDir,
          numerics,
          weightFileBytes,
          initializerBytes: inventory.total,
          gatheredBytes,
          streamedBytes: kilnStreamed,
        },
        threads,
        runs,
        decodeSteps: steps,
        machine: {
          cpu: cpus()[0]?.model,
          cpus: cpus().length,
          othersBusyCores: othersBusy,
          copyBandwidth1: bw1,
          copyBandwidthN: bwN,
          ortGflopsNbits: gflopsNbits,
          probeOthersBusyCores: probeBusy,
        },
        flops: { prefillPerToken: prefillFlopsPerToken, decodePerTokenAt512: decodeFlopsPerToken(512) },
        llamaCpp: {
          contextSize: LLAMA_CONTEXT,
          flashAttention: llamaCtx.flashAttention,
          kvType: String(llamaCtx.kvCacheKeyType),
          streamedBytes: llamaStreamed,
        },
        results: rows,
        kilnDecodeBandwidthShare: (() => {
          const d = rows.find((r) => r.key === `decode-${NATIVE_CONTEXT}`)!;
          return { context: NATIVE_CONTEXT, threads, tokensPerSecond: d.kiln.median, limitTokensPerSecond: d.limit.kiln, share: d.kilnOfLimit };
        })(),
        native:
          nativeRows && nativeRun
            ? {
                version: native?.version ?? null,
                ...nativeRun.info,
                hasDepth: nativeRun.hasDepth,
                batchedPrefillTokensPerSecond: nativeRun.batchedPrefill,
                results: nativeRows,
              }
            : null,
        breakdown: { ...bd, othersBusyCores: bdBusy },
      },
      null,
      2,
    ),
  );
}

await llamaCtx.dispose();
await llamaModel.dispose();
await kiln.release();
