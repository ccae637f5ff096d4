/**
 * Where a GPU decode step's time goes: the bare step of a model's GPU artifact (no scheduler, no
 * sampling), per build and row count, timed plain and then again under onnxruntime's profiler, whose
 * WebGPU provider records each kernel's time on the device (timestamp queries).
 *
 *   npm run bench -- gpu-profile [--shape smollm2-135m] [--builds gqa,explicit,float16,explicit+float16]
 *                                [--rows 1,16,64] [--steps 16] [--capacity 1024] [--context 16] [--out dir]
 *                                [--buffer-cache bucket|simple] [--pool-writes inplace|fresh]
 *
 * Per build and row count it prints: wall ms per step; device ms per step (the kernels' summed
 * times); host ms per step (onnxruntime's own time per node, mostly recording the dispatches); the
 * kernels a step runs; the operators taking the most device time, and those taking the most host time. Wall minus device time is what
 * a step spends off the GPU (dispatch, transfers, synchronisation). `--out`: the raw profiles are
 * kept there. `--buffer-cache`: the provider's storage buffer cache (TextSessionOptions.webgpuBufferCache,
 * one per process; default onnxruntime's "bucket"). `--pool-writes`: how a step writes the KV pools
 * (TextSessionOptions.devicePoolWrites; default "inplace"). The synthetic GGUF is written as `bench gpu` writes it (bench/synthetic-gguf.ts).
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import type { DeviceActivations, DeviceAttention } from "../src/compiler/compile.js";
import { checkLocalGguf, provisionLocalGguf } from "../src/provision/index.js";
import type { WebGpuBufferCache } from "../src/runtime/device/execution-providers.js";
import type { DevicePoolWrites } from "../src/runtime/text-worker/device-kv-pool.js";
import { type DeviceStepInputs, WebGpuTextSession } from "../src/runtime/text-worker/webgpu-session.js";
import { ensureSyntheticGguf, shapesNamed } from "./synthetic-gguf.js";

const { values: args } = parseArgs({
  options: {
    shape: { type: "string", default: "smollm2-135m" },
    builds: { type: "string", default: "gqa,explicit,float16,explicit+float16" },
    rows: { type: "string", default: "1,16,64" },
    steps: { type: "string", default: "16" },
    capacity: { type: "string", default: "1024" },
    context: { type: "string", default: "16" },
    top: { type: "string", default: "8" },
    out: { type: "string" },
    "buffer-cache": { type: "string" },
    "pool-writes": { type: "string", default: "inplace" },
    "gguf-dir": { type: "string", default: ".cache/gguf" },
  },
});
const [spec] = shapesNamed(args.shape!);
const rowCounts = args.rows!.split(",").map(Number);
const steps = Number(args.steps);
const capacity = Number(args.capacity);
const context = Number(args.context);
const top = Number(args.top);
const bufferCache = args["buffer-cache"] as WebGpuBufferCache | undefined;
if (bufferCache !== undefined && bufferCache !== "bucket" && bufferCache !== "simple") throw new Error("--buffer-cache: bucket or simple");
const poolWrites = args["pool-writes"] as DevicePoolWrites;
if (poolWrites !== "inplace" && poolWrites !== "fresh") throw new Error("--pool-writes: inplace or fresh");

interface Build {
  name: string;
  attention?: DeviceAttention;
  activations?: DeviceActivations;
}
const builds: Build[] = args.builds!.split(",").map((name) => {
  const build: Build = { name };
  for (const part of name.split("+")) {
    if (part === "explicit" || part === "gqa") build.attention = part;
    else if (part === "float16" || part === "float32") build.activations = part;
    else throw new Error(`--builds: each is explicit, gqa, float16 or float32 joined by "+", not ${name}`);
  }
  return build;
});

/** One trace event of onnxruntime's profile (Chrome trace format). */
interface TraceEvent {
  cat: string;
  name: string;
  dur: number;
  ts: number;
  args?: { op_name?: string };
}

function inputsFor(rows: number, words: number): DeviceStepInputs {
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

/** Loads, takes one untimed step, then `steps` timed ones; returns wall ms per step. */
async function stepSession(dir: string, rows: number, profileFilePrefix?: string): Promise<number> {
  const s = await WebGpuTextSession.load(dir, {
    slots: rows,
    device: "webgpu",
    deviceKvPositions: capacity,
    profileFilePrefix,
    webgpuBufferCache: bufferCache,
    devicePoolWrites: poolWrites,
  });
  try {
    const tokens = Array.from({ length: rows }, (_, i) => 300 + i);
    const inputs = inputsFor(rows, s.maskWords);
    const step = async () => {
      for (let i = 0; i < rows; i++) s.kv.lengths[i] = context;
      await s.forward(0, rows, 1, tokens, inputs);
    };
    await step();
    const t0 = performance.now();
    for (let i = 0; i < steps; i++) await step();
    const ms = (performance.now() - t0) / steps;
    if (profileFilePrefix) s.endProfiling();
    return ms;
  } finally {
    await s.release();
  }
}

/** Drops the first step's share of a profile's events (kernel compilation, uploads): each step runs the same graph. */
function lastSteps(events: TraceEvent[], cat: string): TraceEvent[] {
  const all = events.filter((e) => e.cat === cat).sort((a, b) => a.ts - b.ts);
  const perStep = Math.round(all.length / (steps + 1));
  return all.slice(all.length - perStep * steps);
}

/** The op type of an event: a kernel's name is "node&op&program", a node's carries op_name. */
const opOf = (e: TraceEvent) => (e.cat === "Api" ? (e.name.split("&")[1] ?? e.name) : (e.args?.op_name ?? e.name));

function summarize(events: TraceEvent[]) {
  const kernels = lastSteps(events, "Api");
  const nodes = lastSteps(events, "Node").filter((e) => e.name.endsWith("_kernel_time"));
  const byOp = new Map<string, { us: number; count: number }>();
  for (const k of kernels) {
    const o = byOp.get(opOf(k)) ?? { us: 0, count: 0 };
    o.us += k.dur;
    o.count++;
    byOp.set(opOf(k), o);
  }
  const deviceMs = kernels.reduce((s, e) => s + e.dur, 0) / 1000 / steps;
  const hostMs = nodes.reduce((s, e) => s + e.dur, 0) / 1000 / steps;
  const hostByOp = new Map<string, { us: number; count: number }>();
  for (const n of nodes) {
    const o = hostByOp.get(opOf(n)) ?? { us: 0, count: 0 };
    o.us += n.dur;
    o.count++;
    hostByOp.set(opOf(n), o);
  }
  const ranked = (m: Map<string, { us: number; count: number }>) =>
    [...m.entries()].sort((a, b) => b[1].us - a[1].us).map(([op, o]) => ({ op, ms: o.us / 1000 / steps, perStep: o.count / steps }));
  return { deviceMs, hostMs, kernelsPerStep: kernels.length / steps, nodesPerStep: nodes.length / steps, ops: ranked(byOp), hostOps: ranked(hostByOp) };
}

const out = args.out ?? mkdtempSync(join(tmpdir(), "kiln-gpu-profile-"));
mkdirSync(out, { recursive: true });
const gguf = ensureSyntheticGguf(spec, args["gguf-dir"]!);
const local = await checkLocalGguf(gguf);
console.log(
  `GPU step profile, ${spec.name} (synthetic Q4_0): bare decode steps of ${context} cached positions in pools of ${capacity}, ${steps} timed steps after one untimed, buffer cache ${bufferCache ?? "bucket (default)"}, pools ${poolWrites}`,
);
try {
  for (const build of builds) {
    const { dir } = await provisionLocalGguf(local, { device: "webgpu", deviceAttention: build.attention, deviceActivations: build.activations });
    for (const rows of rowCounts) {
      const wall = await stepSession(dir, rows);
      const prefix = join(out, `${spec.name}-${build.name}-${rows}`);
      const profiledWall = await stepSession(dir, rows, prefix);
      const file = readdirSync(out)
        .filter((f) => f.startsWith(`${spec.name}-${build.name}-${rows}_`))
        .sort()
        .at(0)!;
      const s = summarize(JSON.parse(readFileSync(join(out, file), "utf8")) as TraceEvent[]);
      console.log(
        `\n${build.name}, ${rows} row(s): wall ${wall.toFixed(2)} ms/step (profiled ${profiledWall.toFixed(2)}); device ${s.deviceMs.toFixed(2)} ms in ${s.kernelsPerStep.toFixed(0)} kernels; host ${s.hostMs.toFixed(2)} ms over ${s.nodesPerStep.toFixed(0)} nodes; off the device ${(wall - s.deviceMs).toFixed(2)} ms`,
      );
      const line = (o: { op: string; ms: number; perStep: number }, of: number, what: string) =>
        `  ${o.op.padEnd(34)}${o.ms.toFixed(3).padStart(9)} ms${`${((100 * o.ms) / of).toFixed(0)}%`.padStart(6)}${o.perStep.toFixed(0).padStart(6)} ${what}`;
      for (const o of s.ops.slice(0, top)) console.log(line(o, s.deviceMs, "kernels"));
      console.log("  host time by operator:");
      for (const o of s.hostOps.slice(0, Math.ceil(top / 2))) console.log(line(o, s.hostMs, "nodes"));
    }
  }
} finally {
  if (!args.out) rmSync(out, { recursive: true, force: true });
}
