/**
 * Whisper on a GPU, per model shape, against the peers that bound it on the same machine.
 *
 *   npm run bench -- gpu-speech [--device webgpu|cpu] [--shapes large-v3-turbo,large-v3] [--rows 5,20]
 *                               [--builds float32,float16] [--beams 5] [--context 32] [--steps 32]
 *                               [--threads N] [--runs 2] [--budget-minutes M] [--json out.json]
 *                               [--skip-torch] [--skip-cpu] [--quick]
 *
 * Each shape is a synthetic CTranslate2 Whisper (bench/synthetic-whisper.ts: random float16 weights,
 * large-v3's vocabulary, written here when missing), compiled the way `kiln pull` + `kiln compile`
 * compile a real one: on `--device webgpu` the GPU artifact of each of `--builds` (its activations,
 * float32 or float16), the CPU artifact for the CPU engine.
 * Each is measured as `kiln bench <whisper slug>` measures (measureSpeechThroughput): through the
 * speech worker (encoder, device window store, decoder cache on its thread), driven as beam search
 * drives it, without the scheduler. Per shape it prints:
 * - encode: ms to encode one 30 s window into the window store (median of `--runs`, after a warm-up;
 *   timed to a small decoder call's answer after it, less that call alone, since a run whose outputs
 *   stay on the device returns before its work is done);
 * - per `--rows` count (transcriptions x `--beams` rows, one window each): the prompt call (each row's
 *   `--context` tokens into an empty cache) and then ms per decoder step of `--steps` one-token calls,
 *   each reordering the beams (a cycle within every transcription, as beam search moves rows) and
 *   fetching each row's 2 x beams likeliest tokens under Whisper's rules, as the worker does;
 * - a 30 s window's estimate: encode + the prompt + 100 steps (about 100 tokens of speech), in seconds;
 * - PyTorch (transformers' WhisperForConditionalGeneration, float16, random weights of the same shape:
 *   the encoder, then the decoder stepped with its cache, beams reordered each step) when `python3`
 *   imports torch and transformers and sees CUDA (bench/peers/torch_whisper.py);
 * - the CPU engine on this machine's cores (the CPU artifact on `--device cpu`), unless `--skip-cpu`.
 * Each kiln build's time is printed as a ratio to each peer's measured in the same run (below 1: kiln faster). `--quick`: the tiny shape, 5 rows,
 * 8 tokens of context, 8 steps, one run (a smoke test, under a minute on lavapipe).
 */
import { spawnSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { dirname, join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { compileCt2Whisper } from "../src/compiler/compile-whisper.js";
import type { BuildDevice, DeviceActivations } from "../src/compiler/compile.js";
import type { ComputeDevice } from "../src/runtime/device/index.js";
import { LoadedSpeechModel } from "../src/runtime/loaded-speech-model.js";
import { measureSpeechThroughput } from "../src/scheduler/index.js";
import { ensureSyntheticWhisper, SYNTHETIC_WHISPER_VOCAB, type WhisperShapeSpec, whisperShapesNamed } from "./synthetic-whisper.js";

const { values: args } = parseArgs({
  options: {
    device: { type: "string", default: "webgpu" },
    shapes: { type: "string" },
    rows: { type: "string" },
    beams: { type: "string", default: "5" },
    context: { type: "string" },
    steps: { type: "string" },
    threads: { type: "string", default: String(availableParallelism()) },
    runs: { type: "string" },
    "budget-minutes": { type: "string" },
    json: { type: "string" },
    dir: { type: "string", default: ".cache/whisper" },
    "skip-torch": { type: "boolean", default: false },
    "skip-cpu": { type: "boolean", default: false },
    quick: { type: "boolean", default: false },
    builds: { type: "string", default: "float32,float16" },
  },
});
const log = (s: string) => process.stderr.write(`${s}\n`);
const ints = (name: string, v: string) =>
  v.split(",").map((x) => {
    const n = Number(x);
    if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} takes positive integers separated by commas, not ${v}`);
    return n;
  });
if (args.device !== "webgpu" && args.device !== "cpu") throw new Error(`--device takes webgpu or cpu, not ${args.device}`);
const device = args.device as ComputeDevice & BuildDevice;
const quick = args.quick!;
const shapes = whisperShapesNamed(args.shapes ?? (quick ? "tiny" : "large-v3-turbo,large-v3"));
const [beams] = ints("beams", args.beams!);
const rowCounts = ints("rows", args.rows ?? (quick ? String(beams) : `${beams},${4 * beams}`));
for (const n of rowCounts) if (n % beams !== 0) throw new Error(`--rows: ${n} rows are not whole transcriptions of ${beams} beams`);
const [context] = ints("context", args.context ?? (quick ? "8" : "32"));
const [steps] = ints("steps", args.steps ?? (quick ? "8" : "32"));
const [threads] = ints("threads", args.threads!);
/** kiln's GPU builds measured, by activations. */
const builds = args.builds!.split(",").map((b) => {
  if (b !== "float32" && b !== "float16") throw new Error(`--builds takes float32 and/or float16, not ${b}`);
  return b as DeviceActivations;
});
const [runs] = ints("runs", args.runs ?? (quick ? "1" : "2"));
const deadline = args["budget-minutes"] ? performance.now() + Number(args["budget-minutes"]) * 60_000 : Infinity;
/** Tokens a 30 s window of speech decodes, for the per-window estimate. */
const WINDOW_TOKENS = 100;
/** Where the synthetic folders and their artifacts are kept between runs. */
const dir = resolve(args.dir!);
const home = join(dir, "home");

const message = (err: unknown) => (err instanceof Error ? err.message : String(err)).split("\n")[0];
const fmt = (v: number | undefined, digits = 1) => (v === undefined || !Number.isFinite(v) ? "-" : v.toFixed(digits));
const ratio = (a: number | undefined, b: number | undefined) => (a && b && Number.isFinite(a) && Number.isFinite(b) ? `${(a / b).toFixed(2)}x` : "-");

interface RowFigures {
  /** One call of every row's `context` tokens into an empty cache. */
  promptMs: number;
  msPerStep: number;
}
interface SessionFigures {
  encodeMs: number;
  rows: Record<number, RowFigures>;
}
type Skipped = { skipped: string };
interface ShapeResult {
  shape: WhisperShapeSpec;
  writeSeconds: number;
  /** Seconds each build took to compile ("webgpu float16", "cpu", ...), or "reused" where it was already compiled. */
  compileSeconds: Record<string, number | "reused">;
  /** kiln's builds on the device, then the peers, in the order measured. */
  systems: Array<{ name: string; figures: SessionFigures | Skipped }>;
}

/**
 * The model of `artifactDir` on `on`, measured as \`kiln bench <whisper slug>\` measures it
 * (measureSpeechThroughput: through the speech worker, beam search's calls at each row count).
 */
async function measureSession(name: string, artifactDir: string, on: ComputeDevice): Promise<SessionFigures> {
  const slots = Math.max(...rowCounts);
  const model = await LoadedSpeechModel.load(artifactDir, { device: on, threads, slots, rowsPerWindow: beams });
  try {
    const measured = await measureSpeechThroughput(model, { transcriptions: rowCounts.map((n) => n / beams), beams, context, steps, runs: Math.max(runs, 1) });
    const figures: SessionFigures = { encodeMs: measured.encodeMs, rows: {} };
    for (const d of measured.decode) {
      figures.rows[d.rows] = { promptMs: d.promptMs, msPerStep: d.msPerStep };
      log(`  ${name}, ${d.rows} rows: prompt ${fmt(d.promptMs)} ms, ${fmt(d.msPerStep)} ms a step`);
    }
    return figures;
  } finally {
    await model.close();
  }
}

function measureTorch(shape: WhisperShapeSpec): SessionFigures | Skipped {
  if (args["skip-torch"]) return { skipped: "--skip-torch" };
  const probe = spawnSync("python3", ["-c", "import torch, transformers; print(torch.cuda.is_available())"], { encoding: "utf8" });
  if (probe.status !== 0) return { skipped: "python3 cannot import torch and transformers" };
  if (probe.stdout.trim() !== "True") return { skipped: "torch sees no CUDA device" };
  const script = new URL("./peers/torch_whisper.py", import.meta.url).pathname;
  const spec = { ...shape, vocab: SYNTHETIC_WHISPER_VOCAB, rows: rowCounts, beams, context, steps, runs: Math.max(runs, 2), device: "cuda" };
  const r = spawnSync("python3", [script, JSON.stringify(spec)], { encoding: "utf8", timeout: 300_000 });
  if (r.status !== 0) return { skipped: `torch_whisper.py failed: ${(r.stderr ?? "").trim().split("\n").slice(-2).join(" | ")}` };
  return JSON.parse(r.stdout.trim().split("\n").at(-1)!) as SessionFigures;
}

/** Seconds a 30 s window takes: encode, the prompt, then {@link WINDOW_TOKENS} steps. */
const windowSeconds = (f: SessionFigures | undefined, n: number) =>
  f?.rows[n] ? (f.encodeMs + f.rows[n].promptMs + WINDOW_TOKENS * f.rows[n].msPerStep) / 1000 : NaN;

function report(res: ShapeResult): void {
  const s = res.shape;
  log("");
  log(
    `whisper ${s.name} (synthetic: ${s.encoderLayers}+${s.decoderLayers} layers, width ${s.width}, ${s.melBins} mel bins; written in ${fmt(res.writeSeconds)} s; compiled: ${Object.entries(
      res.compileSeconds,
    )
      .map(([build, t]) => `${build} ${t === "reused" ? "reused" : `${fmt(t)} s`}`)
      .join(", ")})`,
  );
  for (const { name, figures } of res.systems) if ("skipped" in figures) log(`  ${name}: skipped (${figures.skipped})`);
  const measured = res.systems.filter((x): x is { name: string; figures: SessionFigures } => !("skipped" in x.figures));
  const perRows = rowCounts.map((n) => `${n} rows (${n / beams} x ${beams}): prompt ms | ms/step | window s`).join(" | ");
  log(`  system | encode ms | ${perRows}`);
  for (const { name, figures: f } of measured)
    log(
      `  ${name} | ${fmt(f.encodeMs)} | ${rowCounts.map((n) => `${fmt(f.rows[n]?.promptMs)} | ${fmt(f.rows[n]?.msPerStep)} | ${fmt(windowSeconds(f, n), 2)}`).join(" | ")}`,
    );
  // Each kiln build's time against each peer's: below 1 is kiln faster.
  for (const ours of measured.filter((x) => x.name.startsWith("kiln")))
    for (const peer of measured.filter((x) => !x.name.startsWith("kiln")))
      log(
        `  ${ours.name} / ${peer.name} time: encode ${ratio(ours.figures.encodeMs, peer.figures.encodeMs)}; ${rowCounts
          .map(
            (n) =>
              `${n} rows: step ${ratio(ours.figures.rows[n]?.msPerStep, peer.figures.rows[n]?.msPerStep)}, window ${ratio(windowSeconds(ours.figures, n), windowSeconds(peer.figures, n))}`,
          )
          .join("; ")}`,
      );
}

const results: ShapeResult[] = [];
log(
  `gpu-speech: ${device}, shapes ${shapes.map((s) => s.name).join(", ")}, rows ${rowCounts.join(",")} (beams ${beams}), context ${context}, ${steps} steps, ${runs} run(s), ${threads} threads`,
);
for (const shape of shapes) {
  if (performance.now() > deadline) {
    log(`whisper ${shape.name}: not started, the --budget-minutes budget is spent`);
    continue;
  }
  const t0 = performance.now();
  const modelDir = ensureSyntheticWhisper(shape, dir);
  const res: ShapeResult = { shape, writeSeconds: (performance.now() - t0) / 1000, compileSeconds: {}, systems: [] };
  const compile = async (on: BuildDevice, activations?: DeviceActivations) => {
    const c = await compileCt2Whisper({ slug: `whisper-${shape.name}-synthetic`, modelDir, home, device: on, deviceActivations: activations });
    res.compileSeconds[activations ? `${on} ${activations}` : on] = c.reused ? "reused" : c.seconds;
    return c.dir;
  };
  const measure = async (name: string, on: ComputeDevice & BuildDevice, activations?: DeviceActivations) => {
    let figures: SessionFigures | Skipped;
    try {
      figures = await measureSession(name, await compile(on, activations), on);
    } catch (err) {
      figures = { skipped: `failed: ${message(err)}` };
    }
    res.systems.push({ name, figures });
  };
  if (device === "cpu") await measure(`kiln cpu (${threads} threads)`, "cpu");
  else for (const build of builds) await measure(`kiln ${device} ${build}`, device, build);
  if (device === "webgpu") res.systems.push({ name: "PyTorch cuda float16", figures: measureTorch(shape) });
  if (device !== "cpu" && !args["skip-cpu"]) await measure(`CPU engine (${threads} threads)`, "cpu");
  results.push(res);
  report(res);
  // After every shape, so a run cut short by its time limit still leaves what it measured.
  if (args.json) {
    mkdirSync(dirname(resolve(args.json)), { recursive: true });
    writeFileSync(args.json, `${JSON.stringify({ device, beams, context, steps, runs, threads, results }, null, 1)}\n`);
  }
}
