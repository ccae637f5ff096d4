/**
 * kiln on a GPU, per model shape, against the peers that bound it on the same device.
 *
 *   npm run bench -- gpu [--device webgpu|cpu] [--shapes smollm2-135m,llama-3.2-1b,llama-3.1-8b]
 *                        [--rows 1,16,64] [--steps 32] [--prompt 512] [--threads N] [--runs 3]
 *                        [--budget-minutes M] [--json out.json] [--skip-torch] [--skip-cpu] [--quick]
 *                        [--bare explicit,float16,...] [--buffer-cache bucket|simple]
 *                        [--pool-writes inplace|fresh]
 *
 * Each shape is a synthetic GGUF (bench/synthetic-gguf.ts: random Q4_0 weights, written here when
 * missing), served the way a user serves a local file (`kiln serve --model ./file.gguf`: the
 * local-GGUF provisioning, the batch engine, the worker thread, `--device`). Per shape it prints:
 * - TTFT of a `--prompt`-token prompt into an empty cache, through the engine;
 * - decode ms per step and tokens/s at each `--rows` count of sequences decoding together through
 *   the engine (greedy, end-of-generation tokens banned; the median engine step in which exactly
 *   that many sequences decode and no prompt is computed, as `kiln bench` measures it), over `--runs`;
 * - the bare graph: the artifact's session stepped in a loop over the same rows (no scheduler, no
 *   sampling), so engine / bare is what the serving path costs; on webgpu `--bare explicit`
 *   (or gqa) also steps the artifact built with that attention (`deviceAttention`, its own compile)
 *   over the same rows, printed as "explicit ms" beside the default build's "bare ms"; `--bare` takes
 *   a list of such builds, each an attention and/or `float16` activations joined by "+" (e.g.
 *   `--bare explicit,float16,explicit+float16`), one column each;
 * - the weight-product floor of the same shape on the same device (bench/floor-graph.ts, one float
 *   read back per step), so floor / engine is the share of the kernels' speed a step reaches;
 * - PyTorch (transformers `generate`, bf16, eager, random weights of the same shape, batch = rows)
 *   when `python3 -c "import torch, transformers"` works and CUDA is present (bench/peers/torch_generate.py);
 * - the CPU engine on this machine's cores (`--device cpu`), unless `--skip-cpu` or the device is the CPU.
 * Ratios are printed against each peer measured in the same run. `--quick`: the tiny shape, rows
 * 1,4, 8 steps, a 64-token prompt, one run (minutes on lavapipe). `--budget-minutes`: shapes not
 * started by then are skipped (said so), for a device lent by the minute. `--buffer-cache`: the WebGPU
 * provider's storage buffer cache for the engine and the bare graphs (TextSessionOptions.webgpuBufferCache).
 * `--pool-writes`: how their steps write the device KV pools (TextSessionOptions.devicePoolWrites).
 */
import { spawnSync } from "node:child_process";
import { availableParallelism } from "node:os";
import { mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { parseArgs } from "node:util";
import * as ort from "onnxruntime-node";
import type { DeviceActivations, DeviceAttention } from "../src/compiler/compile.js";
import { checkLocalGguf, loadLocalGguf, provisionLocalGguf, type LocalGguf } from "../src/provision/index.js";
import type { WebGpuBufferCache } from "../src/runtime/device/execution-providers.js";
import type { ComputeDevice } from "../src/runtime/device/index.js";
import { TextSession } from "../src/runtime/text-worker/session.js";
import type { DevicePoolWrites } from "../src/runtime/text-worker/device-kv-pool.js";
import { type DeviceStepInputs, WebGpuTextSession } from "../src/runtime/text-worker/webgpu-session.js";
import { measureThroughput } from "../src/scheduler/index.js";
import { buildFloorGraph } from "./floor-graph.js";
import { ensureSyntheticGguf, type ModelShapeSpec, shapesNamed } from "./synthetic-gguf.js";

const { values: args } = parseArgs({
  options: {
    device: { type: "string", default: "webgpu" },
    shapes: { type: "string" },
    rows: { type: "string" },
    steps: { type: "string" },
    prompt: { type: "string" },
    threads: { type: "string", default: String(availableParallelism()) },
    runs: { type: "string" },
    "budget-minutes": { type: "string" },
    json: { type: "string" },
    "gguf-dir": { type: "string", default: ".cache/gguf" },
    "skip-torch": { type: "boolean", default: false },
    "skip-cpu": { type: "boolean", default: false },
    quick: { type: "boolean", default: false },
    bare: { type: "string" },
    "buffer-cache": { type: "string" },
    "pool-writes": { type: "string", default: "inplace" },
  },
});
const log = (s: string) => process.stderr.write(`${s}\n`);
/** A GPU build other than the default whose bare graph is stepped beside the default's. */
interface BareBuild {
  name: string;
  attention?: DeviceAttention;
  activations?: DeviceActivations;
}
const bufferCache = args["buffer-cache"] as WebGpuBufferCache | undefined;
if (bufferCache !== undefined && bufferCache !== "bucket" && bufferCache !== "simple") throw new Error("--buffer-cache: bucket or simple");
const poolWrites = args["pool-writes"] as DevicePoolWrites;
if (poolWrites !== "inplace" && poolWrites !== "fresh") throw new Error("--pool-writes: inplace or fresh");
/** The other bare builds (`--bare`). */
const otherBuilds: BareBuild[] = (args.bare ?? "")
  .split(",")
  .filter(Boolean)
  .map((name) => {
    const build: BareBuild = { name };
    for (const part of name.split("+")) {
      if (part === "explicit" || part === "gqa") build.attention = part;
      else if (part === "float16" || part === "float32") build.activations = part;
      else throw new Error(`--bare: each build is explicit, gqa, float16 or float32 joined by "+", not ${name}`);
    }
    return build;
  });
const ints = (name: string, v: string) =>
  v.split(",").map((x) => {
    const n = Number(x);
    if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} takes positive integers separated by commas, not ${v}`);
    return n;
  });
if (args.device !== "webgpu" && args.device !== "cpu") throw new Error(`--device takes webgpu or cpu, not ${args.device}`);
const device = args.device as ComputeDevice;
const quick = args.quick!;
const shapes = shapesNamed(args.shapes ?? (quick ? "tiny" : "smollm2-135m,llama-3.2-1b,llama-3.1-8b"));
const rowCounts = ints("rows", args.rows ?? (quick ? "1,4" : "1,16,64"));
const [steps] = ints("steps", args.steps ?? (quick ? "8" : "32"));
const [promptTokens] = ints("prompt", args.prompt ?? (quick ? "64" : "512"));
const [threads] = ints("threads", args.threads!);
const [runs] = ints("runs", args.runs ?? (quick ? "1" : "3"));
const deadline = args["budget-minutes"] ? performance.now() + Number(args["budget-minutes"]) * 60_000 : Infinity;
/** Prompt tokens of each decoding sequence before its timed steps. */
const DECODE_CONTEXT = 16;

const median = (xs: number[]) => {
  const s = [...xs].filter(Number.isFinite).sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const message = (err: unknown) => (err instanceof Error ? err.message : String(err)).split("\n")[0];

/** ms per step and tokens/s of `rows` sequences stepping together. */
interface StepFigures {
  msPerStep: number;
  tokensPerSecond: number;
}

interface EngineFigures {
  ttftMs: number;
  rows: Record<number, StepFigures>;
}

interface ShapeResult {
  shape: string;
  weightsBytes: number;
  device: ComputeDevice;
  engine?: EngineFigures | { error: string };
  bare?: Record<number, StepFigures> | { error: string };
  /** The bare graph of each `--bare` build (on webgpu), by its name. */
  bareOther?: Record<string, Record<number, StepFigures> | { error: string }>;
  floor?: Record<number, StepFigures> | { error: string };
  torch?: { ttftMs: number; rows: Record<number, StepFigures> } | { skipped: string };
  cpuEngine?: EngineFigures | { error: string };
}

// ── through the engine: the served model, as `kiln serve --model ./file.gguf --device <d>` ──

async function measureEngine(local: LocalGguf, on: ComputeDevice): Promise<EngineFigures> {
  const model = await loadLocalGguf(local, {
    threads,
    maxRunning: Math.max(...rowCounts),
    prefixReuse: "off",
    session: { device: on, webgpuBufferCache: bufferCache, devicePoolWrites: poolWrites },
    onStage: (s) => log(`  ${on}: ${s}`),
  });
  try {
    // What `kiln bench` measures: the engine's decode steps at exactly n rows, the first token of each sequence coming from its prefill.
    const figures = await measureThroughput(model, { promptTokens, rows: rowCounts, steps: steps + 1, runs, decodeContext: DECODE_CONTEXT });
    const rows = Object.fromEntries(figures.decode.map((d) => [d.rows, { msPerStep: d.msPerStep, tokensPerSecond: d.tokensPerSecond }]));
    return { ttftMs: figures.prompt.ttftMs, rows };
  } finally {
    await model.close();
  }
}

function medianRows(rows: Record<number, StepFigures[]>): Record<number, StepFigures> {
  return Object.fromEntries(
    Object.entries(rows).map(([n, xs]) => [n, { msPerStep: median(xs.map((x) => x.msPerStep)), tokensPerSecond: median(xs.map((x) => x.tokensPerSecond)) }]),
  );
}

// ── the bare graph: the artifact's session stepped in a loop ──

async function measureBare(local: LocalGguf, on: ComputeDevice, build: BareBuild = { name: "default" }): Promise<Record<number, StepFigures>> {
  const { dir } = await provisionLocalGguf(local, { device: on, deviceAttention: build.attention, deviceActivations: build.activations });
  const out: Record<number, StepFigures[]> = {};
  for (const n of rowCounts) {
    const s =
      on === "webgpu"
        ? await WebGpuTextSession.load(dir, { threads, slots: n, device: on, webgpuBufferCache: bufferCache, devicePoolWrites: poolWrites })
        : await TextSession.load(dir, { threads, slots: n });
    try {
      const tokens = Array.from({ length: n }, (_, i) => 300 + i);
      const inputs = s instanceof WebGpuTextSession ? unconstrainedInputs(n, s.maskWords) : null;
      const step = async () => {
        for (let i = 0; i < n; i++) s.kv.lengths[i] = DECODE_CONTEXT; // the same context every step
        await (inputs ? (s as WebGpuTextSession).forward(0, n, 1, tokens, inputs) : (s as TextSession).forward(0, n, 1, tokens));
      };
      for (let r = 0; r < runs; r++) (out[n] ??= []).push(await timeSteps(step, n));
    } finally {
      await s.release();
    }
  }
  return medianRows(out);
}

/** A device step's inputs for `rows` unconstrained rows: every token allowed, one adjustment that changes nothing, no scores. */
function unconstrainedInputs(rows: number, words: number): DeviceStepInputs {
  return {
    allPositions: false,
    tokenMask: new Int32Array(rows * words).fill(-1),
    adjustIds: new BigInt64Array(rows),
    adjustBias: new Float32Array(rows),
    adjustRepetition: new Float32Array(rows).fill(1),
    adjustSubtract: new Float32Array(rows),
    scoreTargets: new BigInt64Array(rows),
  };
}

/** ms per step and rows/s of `step` over `steps` calls after one untimed call. */
async function timeSteps(step: () => Promise<unknown>, rows: number): Promise<StepFigures> {
  await step();
  const t0 = performance.now();
  for (let i = 0; i < steps; i++) await step();
  const ms = (performance.now() - t0) / steps;
  return { msPerStep: ms, tokensPerSecond: (1000 * rows) / ms };
}

// ── the weight-product floor on the same device ──

async function measureFloor(gguf: string, on: ComputeDevice, scratch: string): Promise<Record<number, StepFigures>> {
  const out: Record<number, StepFigures[]> = {};
  const path = join(scratch, "floor.onnx");
  // The WebGPU provider has no int8-activation path: its floor takes float activations, as its graphs do.
  const { hidden } = await buildFloorGraph(gguf, path, on === "webgpu" ? { accuracyLevel: 0 } : {}, "rows", true);
  const session = await ort.InferenceSession.create(path, {
    executionProviders: [on],
    logSeverityLevel: 3, // not the provider's note on shape ops kept on the CPU, once per session
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    enableCpuMemArena: false,
    enableMemPattern: false,
  });
  try {
    for (const n of rowCounts) {
      const x = new ort.Tensor(
        "float32",
        Float32Array.from({ length: n * hidden }, (_, i) => Math.sin(i) * 0.5),
        [n, 1, hidden],
      );
      for (let r = 0; r < runs; r++) (out[n] ??= []).push(await timeSteps(() => session.run({ x }), n));
    }
  } finally {
    await session.release();
    rmSync(path, { force: true });
    rmSync(`${path}.data`, { force: true });
  }
  return medianRows(out);
}

// ── PyTorch on the same device ──

function measureTorch(shape: ModelShapeSpec): ShapeResult["torch"] {
  if (args["skip-torch"]) return { skipped: "--skip-torch" };
  const probe = spawnSync("python3", ["-c", "import torch, transformers; print(torch.cuda.is_available())"], { encoding: "utf8" });
  if (probe.status !== 0) return { skipped: "python3 cannot import torch and transformers" };
  if (probe.stdout.trim() !== "True") return { skipped: "torch sees no CUDA device" };
  const script = new URL("./peers/torch_generate.py", import.meta.url).pathname;
  const spec = JSON.stringify({ ...shape, rows: rowCounts, steps, prompt: promptTokens, runs });
  const r = spawnSync("python3", [script, spec], { encoding: "utf8", timeout: 15 * 60_000 });
  if (r.status !== 0) return { skipped: `torch_generate.py failed: ${r.stderr.trim().split("\n").slice(-2).join(" | ")}` };
  const parsed = JSON.parse(r.stdout.trim().split("\n").at(-1)!) as { ttftMs: number; rows: Record<number, StepFigures> };
  return parsed;
}

// ── the table ──

const fmt = (x: number | undefined, digits = 1) => (x === undefined || !Number.isFinite(x) ? "—" : x.toFixed(digits));
const ratio = (a: number | undefined, b: number | undefined) => (a && b && Number.isFinite(a / b) ? `${(a / b).toFixed(2)}x` : "—");
const figuresOf = <T extends object>(x: T | { error: string } | { skipped: string } | undefined): T | undefined =>
  x && !("error" in x) && !("skipped" in x) ? (x as T) : undefined;

function printShape(res: ShapeResult, spec: ModelShapeSpec): void {
  const engine = figuresOf<EngineFigures>(res.engine);
  const bare = figuresOf<Record<number, StepFigures>>(res.bare);
  const bareOther = otherBuilds.map((b) => figuresOf<Record<number, StepFigures>>(res.bareOther?.[b.name]));
  const floor = figuresOf<Record<number, StepFigures>>(res.floor);
  const torch = figuresOf<{ ttftMs: number; rows: Record<number, StepFigures> }>(res.torch);
  const cpu = figuresOf<EngineFigures>(res.cpuEngine);
  const lines = [
    `\n${spec.name} (${spec.layers} layers, hidden ${spec.hidden}, ${spec.heads}/${spec.kvHeads} heads, ffn ${spec.ffn}, vocab ${spec.vocab}; synthetic Q4_0 GGUF ${(res.weightsBytes / 2 ** 20).toFixed(0)} MiB), kiln on ${res.device}, ${threads} thread(s), medians of ${runs}:`,
    `  TTFT of a ${promptTokens}-token prompt: kiln ${fmt(engine?.ttftMs, 0)} ms; PyTorch ${fmt(torch?.ttftMs, 0)} ms (kiln/PyTorch time ${ratio(engine?.ttftMs, torch?.ttftMs)}); CPU engine ${fmt(cpu?.ttftMs, 0)} ms`,
    `  ${"rows".padEnd(6)}${"engine ms/step".padStart(15)}${"tok/s".padStart(9)}${"bare ms".padStart(9)}${"engine/bare".padStart(12)}${otherBuilds.map((b) => `${b.name} ms`.padStart(Math.max(12, b.name.length + 4))).join("")}${"floor ms".padStart(10)}${"floor/engine".padStart(13)}${"PyTorch tok/s".padStart(14)}${"kiln/PyTorch".padStart(13)}${"CPU tok/s".padStart(10)}${"kiln/CPU".padStart(9)}`,
  ];
  for (const n of rowCounts) {
    const e = engine?.rows[n];
    const b = bare?.[n];
    const f = floor?.[n];
    const t = torch?.rows[n];
    const c = cpu?.rows[n];
    lines.push(
      `  ${String(n).padEnd(6)}${fmt(e?.msPerStep, 2).padStart(15)}${fmt(e?.tokensPerSecond).padStart(9)}${fmt(b?.msPerStep, 2).padStart(9)}${ratio(e?.msPerStep, b?.msPerStep).padStart(12)}${otherBuilds.map((b, i) => fmt(bareOther[i]?.[n]?.msPerStep, 2).padStart(Math.max(12, b.name.length + 4))).join("")}${fmt(f?.msPerStep, 2).padStart(10)}${ratio(f?.msPerStep, e?.msPerStep).padStart(13)}${fmt(t?.tokensPerSecond).padStart(14)}${ratio(e?.tokensPerSecond, t?.tokensPerSecond).padStart(13)}${fmt(c?.tokensPerSecond).padStart(10)}${ratio(e?.tokensPerSecond, c?.tokensPerSecond).padStart(9)}`,
    );
  }
  for (const [what, x] of Object.entries({
    engine: res.engine,
    bare: res.bare,
    ...Object.fromEntries(otherBuilds.map((b) => [`bare ${b.name}`, res.bareOther?.[b.name]])),
    floor: res.floor,
    PyTorch: res.torch,
    "CPU engine": res.cpuEngine,
  })) {
    if (x && "error" in x) lines.push(`  ${what}: failed: ${x.error}`);
    if (x && "skipped" in x) lines.push(`  ${what}: not measured: ${x.skipped}`);
  }
  if (engine?.rows[1]) {
    const gbps = (res.weightsBytes * engine.rows[1].tokensPerSecond) / 1e9;
    lines.push(
      `  one stream reads the weights (${(res.weightsBytes / 1e9).toFixed(2)} GB) at ${gbps.toFixed(0)} GB/s: compare with the device's memory bandwidth`,
    );
  }
  console.log(lines.join("\n"));
}

async function attempt<T>(what: string, run: () => Promise<T>): Promise<T | { error: string }> {
  try {
    return await run();
  } catch (err) {
    log(`  ${what} failed: ${message(err)}`);
    return { error: message(err) };
  }
}

const results: ShapeResult[] = [];
const scratch = mkdtempSync(join(tmpdir(), "kiln-bench-gpu-"));
try {
  log(
    `bench gpu: device ${device}, shapes ${shapes.map((s) => s.name).join(", ")}, rows ${rowCounts.join(",")}, ${steps} steps, prompt ${promptTokens}, ${threads} thread(s)`,
  );
  for (const spec of shapes) {
    if (performance.now() > deadline) {
      console.log(`\n${spec.name}: skipped, past --budget-minutes`);
      continue;
    }
    const t0 = performance.now();
    const gguf = ensureSyntheticGguf(spec, args["gguf-dir"]!);
    log(`${spec.name}: ${gguf} (${((performance.now() - t0) / 1000).toFixed(1)} s)`);
    const local = await checkLocalGguf(gguf);
    const res: ShapeResult = { shape: spec.name, weightsBytes: statSync(gguf).size, device };
    res.engine = await attempt(`${spec.name}: engine on ${device}`, () => measureEngine(local, device));
    res.bare = await attempt(`${spec.name}: bare graph on ${device}`, () => measureBare(local, device));
    if (device === "webgpu")
      for (const build of otherBuilds)
        (res.bareOther ??= {})[build.name] = await attempt(`${spec.name}: bare ${build.name} graph on ${device}`, () => measureBare(local, device, build));
    res.floor = await attempt(`${spec.name}: floor on ${device}`, () => measureFloor(gguf, device, scratch));
    res.torch = device === "webgpu" ? measureTorch(spec) : { skipped: "the device is the CPU" };
    if (device !== "cpu" && !args["skip-cpu"]) res.cpuEngine = await attempt(`${spec.name}: engine on the CPU`, () => measureEngine(local, "cpu"));
    results.push(res);
    printShape(res, spec);
    log(`${spec.name}: done in ${((performance.now() - t0) / 1000).toFixed(0)} s`);
  }
  console.log(
    "\n  engine: the served model (local-GGUF provisioning, batch engine, worker), the median engine step with exactly that many rows decoding and no prompt computed (as kiln bench);" +
      "\n  bare: the artifact's session stepped in a loop, no scheduler or sampling; <build> ms: the same with that build (--bare: attention and/or float16 activations); floor: its weight products alone on the same device;" +
      "\n  PyTorch: transformers generate, bf16, eager, random weights of the same shape, batch = rows; CPU: the engine with --device cpu.",
  );
  if (args.json) {
    mkdirSync(dirname(args.json), { recursive: true });
    writeFileSync(args.json, JSON.stringify({ device, threads, steps, promptTokens, runs, results }, null, 1) + "\n");
  }
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
