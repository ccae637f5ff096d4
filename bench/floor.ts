/**
 * Kernel floor of single-stream decode: how fast a kiln decode step could be if everything but the
 * weights' matrix products were free, against native llama.cpp's whole decode step on the same GGUF.
 *
 *   npm run bench -- floor [--model smollm2-135m-instruct] [--min-fold 8bit,block-means] [--threads 1,2]
 *                          [--runs 5] [--steps 20] [--gguf path]
 *
 * For each `--min-fold` the compiler builds a second graph holding only the artifact's weight
 * products, made by the same code with the same weights and options as the real graph
 * (compiler/graph/blocks: qkvProjection, the output projection, gatedMlp, lmHead): per layer the
 * fused QKV MatMulNBits, attn_output, gate|up, down, and once the LM head, with no norms, rotary,
 * attention or KV cache. Layers are chained through the products' own outputs (Q feeds attn_output,
 * the MLP's output the next layer), so onnxruntime can merge nothing across layers; what it runs
 * besides the products is the QKV Split and the MLP's activation, a few microseconds per layer.
 * Block means (`block-means`) are part of the products and are built as in the real graph.
 *
 * Per thread count, alternating run by run: the floor graph (one row, one token per step), the real
 * artifact's decode step at context 128 (TextSession.forward, the worker's step without sampling)
 * and, when built (scripts/peers/llama-cpp-native.sh, see bench text --native), llama-bench
 * -p 0 -n <steps> -d 128. Where scripts/peers/genai.sh has built onnxruntime-genai's int4 / int8
 * models of the same weights, their MatMulNBits nodes alone (bench/peers/matmul_floor.py; each fed
 * by an input of its width) are timed too, as "floor genai-int4" / "floor genai-int8": the floor of
 * the leanest weights onnxruntime runs here (int4 re-quantized symmetric blocks, lower fidelity).
 * kiln's floor graph also holds the block means' nodes (`block-means`), the QKV Split and the MLP's
 * activation, which genai's extracted nodes lack: a few percent against kiln in that comparison. It prints medians in steps/s and the ratios that bound what any graph
 * change can reach on onnxruntime's kernels: floor / native is the most kiln could do against
 * llama.cpp with attention, norms and the runtime costing nothing.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import * as ort from "onnxruntime-node";
import { pullModel } from "../src/catalogue/pull/index.js";
import { compileGguf, type MinFold } from "../src/compiler/compile.js";
import { MIN_FOLDS } from "../src/track/settings.js";
import { TextSession } from "../src/runtime/text-worker/session.js";
import { buildFloorGraph as buildFloorGraphOf } from "./floor-graph.js";
import { GENAI_PYTHON, GENAI_ROOT } from "./peers/genai.js";
import { findNative, nativeDecode } from "./peers/llama-native.js";

const { values: args } = parseArgs({
  options: {
    model: { type: "string", default: "smollm2-135m-instruct" },
    "min-fold": { type: "string", default: "8bit,block-means" },
    threads: { type: "string", default: "1,2" },
    runs: { type: "string", default: "5" },
    steps: { type: "string", default: "20" },
    gguf: { type: "string" },
  },
});
const log = (s: string) => process.stderr.write(`${s}\n`);
const list = (name: string, v: string) =>
  v.split(",").map((x) => {
    const n = Number(x);
    if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} takes positive integers separated by commas, not ${v}`);
    return n;
  });
const threadCounts = list("threads", args.threads!);
const [runs] = list("runs", args.runs!);
const [steps] = list("steps", args.steps!);
const folds = args["min-fold"]!.split(",") as MinFold[];
for (const f of folds) if (!(MIN_FOLDS as readonly string[]).includes(f)) throw new Error(`--min-fold takes ${MIN_FOLDS.join(", ")}, not ${f}`);
/** Cached positions before each timed step (bench text's and bench peers' decode point). */
const CONTEXT = 128;

let ggufPath = args.gguf;
if (!ggufPath) {
  log(`pulling ${args.model} ...`);
  const pulled = await pullModel(args.model!);
  const file = pulled.files.find((f) => f.path.toLowerCase().endsWith(".gguf"));
  if (!file) throw new Error(`${args.model}: no .gguf among the pulled files`);
  ggufPath = join(pulled.dir, file.path);
}

const scratch = mkdtempSync(join(tmpdir(), "kiln-floor-"));

/** The floor graph of `minFold`: the weight products only, chained layer to layer; returns its path. */
async function buildFloorGraph(minFold: MinFold): Promise<string> {
  const path = join(scratch, `floor-${minFold}.onnx`);
  await buildFloorGraphOf(ggufPath!, path, { minFold });
  return path;
}

/** onnxruntime-genai's `build` (int4, int8) products-only graph, or null when that build or its venv is missing. */
function genaiFloorGraph(build: string): string | null {
  const src = join(GENAI_ROOT, build, "model.onnx");
  if (!existsSync(src) || !existsSync(GENAI_PYTHON)) return null;
  const dir = join(scratch, `genai-${build}`);
  mkdirSync(dir);
  const out = join(dir, "model.onnx");
  const r = spawnSync(GENAI_PYTHON, [new URL("./peers/matmul_floor.py", import.meta.url).pathname, src, out], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`matmul_floor.py ${build}: ${r.stderr.trim().split("\n").slice(-3).join(" | ")}`);
  return out;
}

type Step = () => Promise<unknown>;

/**
 * A products-only graph whose inputs are x<K> (genai's): each fed its own row of width K. Only the
 * last output is fetched: onnxruntime runs every node whatever is fetched, and copying all 151
 * outputs back to JavaScript measured 0.7 ms a step.
 */
async function widthsStep(path: string, threads: number): Promise<Step> {
  const s = await ort.InferenceSession.create(path, { intraOpNumThreads: threads, interOpNumThreads: 1, enableCpuMemArena: false, enableMemPattern: false });
  const feeds: Record<string, ort.Tensor> = {};
  for (const name of s.inputNames) {
    const k = Number(name.slice(1));
    feeds[name] = new ort.Tensor(
      "float32",
      Float32Array.from({ length: k }, (_, i) => Math.sin(i) * 0.5),
      [1, 1, k],
    );
  }
  const fetches = [s.outputNames[s.outputNames.length - 1]];
  return () => s.run(feeds, fetches);
}

async function floorStep(path: string, threads: number, hidden: number): Promise<Step> {
  const s = await ort.InferenceSession.create(path, { intraOpNumThreads: threads, interOpNumThreads: 1, enableCpuMemArena: false, enableMemPattern: false });
  const feeds = {
    x: new ort.Tensor(
      "float32",
      Float32Array.from({ length: hidden }, (_, i) => Math.sin(i) * 0.5),
      [1, 1, hidden],
    ),
  };
  return () => s.run(feeds);
}

async function artifactStep(dir: string, threads: number): Promise<Step> {
  const s = await TextSession.load(dir, { threads, slots: 1 });
  s.kv.ensure(CONTEXT + 1);
  const token = [100];
  return async () => {
    s.kv.lengths[0] = CONTEXT; // the same context every step: the cache's contents do not change the time
    await s.forward(0, 1, 1, token);
  };
}

/** Median steps/s of `steps` calls after one untimed call. */
async function rate(step: Step): Promise<number> {
  await step();
  const t0 = performance.now();
  for (let i = 0; i < steps; i++) await step();
  return (1000 * steps) / (performance.now() - t0);
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

const native = findNative();
if (!native) log("native llama.cpp is not built (scripts/peers/llama-cpp-native.sh): its column stays empty");

const lines: string[] = [];
let hidden = 0;
try {
  const floors = new Map<MinFold, string>();
  const artifacts = new Map<MinFold, string>();
  for (const f of folds) {
    log(`compiling ${f} (cached by id) and building its floor graph ...`);
    const compiled = await compileGguf({ slug: args.model!, ggufPath, options: { minFold: f } });
    artifacts.set(f, compiled.dir);
    hidden = compiled.manifest.shape.hidden;
    floors.set(f, await buildFloorGraph(f));
  }
  const genai = ["int4", "int8"].map((b) => ({ build: b, path: genaiFloorGraph(b) })).filter((x): x is { build: string; path: string } => x.path !== null);
  if (genai.length === 0) log("onnxruntime-genai's builds are absent (scripts/peers/genai.sh): no genai floor rows");
  lines.push(`kernel floor of decode @${CONTEXT}, ${args.model}, medians of ${runs} alternating runs of ${steps} steps (steps/s = tokens/s for one stream):`);
  lines.push(
    `${"threads".padEnd(9)}${"variant".padEnd(16)}${"artifact".padStart(11)}${"floor".padStart(9)}${"artifact/floor".padStart(16)}${"native".padStart(9)}${"artifact/native".padStart(17)}${"floor/native".padStart(14)}`,
  );
  for (const threads of threadCounts) {
    const cases: { label: string; step: Step; samples: number[] }[] = [];
    for (const f of folds) {
      cases.push({ label: `artifact ${f}`, step: await artifactStep(artifacts.get(f)!, threads), samples: [] });
      cases.push({ label: `floor ${f}`, step: await floorStep(floors.get(f)!, threads, hidden), samples: [] });
    }
    for (const { build, path } of genai) cases.push({ label: `floor genai-${build}`, step: await widthsStep(path, threads), samples: [] });
    const nativeSamples: number[] = [];
    for (let r = 0; r < runs; r++) {
      for (const c of r % 2 ? [...cases].reverse() : cases) c.samples.push(await rate(c.step));
      if (native)
        nativeSamples.push(
          (await nativeDecode(native, ggufPath, { threads: [threads], depth: CONTEXT, tokens: Math.max(steps, 32), repetitions: 1 }))[0].tokensPerSecond,
        );
    }
    const nat = nativeSamples.length ? median(nativeSamples) : null;
    for (const f of folds) {
      const a = median(cases.find((c) => c.label === `artifact ${f}`)!.samples);
      const fl = median(cases.find((c) => c.label === `floor ${f}`)!.samples);
      const ratio = (x: number) => (nat === null ? "—" : `${(x / nat).toFixed(2)}x`);
      lines.push(
        `${String(threads).padEnd(9)}${f.padEnd(16)}${a.toFixed(1).padStart(11)}${fl.toFixed(1).padStart(9)}${(a / fl).toFixed(2).padStart(16)}${(nat === null ? "—" : nat.toFixed(1)).padStart(9)}${ratio(a).padStart(17)}${ratio(fl).padStart(14)}`,
      );
    }
    for (const { build } of genai) {
      const fl = median(cases.find((c) => c.label === `floor genai-${build}`)!.samples);
      lines.push(
        `${String(threads).padEnd(9)}${`genai ${build}`.padEnd(16)}${"—".padStart(11)}${fl.toFixed(1).padStart(9)}${"—".padStart(16)}${(nat === null ? "—" : nat.toFixed(1)).padStart(9)}${"—".padStart(17)}${(nat === null ? "—" : `${(fl / nat).toFixed(2)}x`).padStart(14)}`,
      );
    }
  }
  lines.push("  artifact: the compiled model's decode step (TextSession.forward at context 128, one row, no sampling);");
  lines.push("  floor: only its weight products (QKV, attn_output, gate|up, down per layer, LM head), same weights and options;");
  if (genai.length)
    lines.push("  genai: onnxruntime-genai's build of the same weights, its MatMulNBits nodes alone (each fed an input of its width, one output fetched);");
  lines.push(
    `  native: llama-bench -p 0 -n ${Math.max(steps, 32)} -d ${CONTEXT}, its whole decode step${native ? ` (${native.version ?? "unknown version"})` : " (not built)"}.`,
  );
  console.log(lines.join("\n"));
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
