/**
 * Whisper on a GPU, per model shape, against the peers that bound it on the same machine.
 *
 *   npm run bench -- gpu-speech [--device webgpu|cpu] [--shapes large-v3-turbo,large-v3] [--rows 5,20]
 *                               [--beams 5] [--context 32] [--steps 32] [--threads N] [--runs 2]
 *                               [--budget-minutes M] [--json out.json] [--skip-torch] [--skip-cpu] [--quick]
 *
 * Each shape is a synthetic CTranslate2 Whisper (bench/synthetic-whisper.ts: random float16 weights,
 * large-v3's vocabulary, written here when missing), compiled the way `kiln pull` + `kiln compile`
 * compile a real one: the GPU artifact for `--device webgpu`, the CPU artifact for the CPU engine.
 * The speech session (the worker's runtime: encoder, device window store, decoder cache) is driven as
 * beam search drives it, without the scheduler. Per shape it prints:
 * - encode: ms to encode one 30 s window into the window store (median of `--runs`, at least 3, after
 *   a warm-up; timed to a small decoder call's answer after it, less that call alone, since a run whose
 *   outputs stay on the device returns before its work is done);
 * - per `--rows` count (transcriptions x `--beams` rows, one window each): the prompt call (each row's
 *   `--context` tokens into an empty cache) and then ms per decoder step of `--steps` one-token calls,
 *   each reordering the beams (a cycle within every transcription, as beam search moves rows) and
 *   fetching each row's 2 x beams likeliest tokens under a rule mask, as the worker does;
 * - a 30 s window's estimate: encode + the prompt + 100 steps (about 100 tokens of speech), in
 *   seconds and as a real-time factor;
 * - PyTorch (transformers' WhisperForConditionalGeneration, float16, random weights of the same shape:
 *   the encoder, then the decoder stepped with its cache, beams reordered each step) when `python3`
 *   imports torch and transformers and sees CUDA (bench/peers/torch_whisper.py);
 * - the CPU engine on this machine's cores (the CPU artifact on `--device cpu`), unless `--skip-cpu`.
 * Ratios are printed against each peer measured in the same run. `--quick`: the tiny shape, 5 rows,
 * 8 tokens of context, 8 steps, one run (a smoke test, under a minute on lavapipe).
 */
import { spawnSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { dirname, join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { compileCt2Whisper } from "../src/compiler/compile-whisper.js";
import type { BuildDevice } from "../src/compiler/compile.js";
import { WINDOW_FRAMES } from "../src/runtime/artifact/index.js";
import type { ComputeDevice } from "../src/runtime/device/index.js";
import { SpeechSession } from "../src/runtime/speech-worker/session.js";
import { ensureSyntheticWhisper, SYNTHETIC_WHISPER_VOCAB, specialId, type WhisperShapeSpec, whisperShapesNamed } from "./synthetic-whisper.js";

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
const [runs] = ints("runs", args.runs ?? (quick ? "1" : "2"));
const deadline = args["budget-minutes"] ? performance.now() + Number(args["budget-minutes"]) * 60_000 : Infinity;
/** Tokens a 30 s window of speech decodes, for the per-window estimate. */
const WINDOW_TOKENS = 100;
/** Where the synthetic folders and their artifacts are kept between runs. */
const dir = resolve(args.dir!);
const home = join(dir, "home");

const median = (xs: number[]) => {
  const s = [...xs].filter(Number.isFinite).sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
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
  /** Seconds each artifact took to compile; absent where it was already compiled (reused). */
  compileSeconds: Partial<Record<BuildDevice, number | "reused">>;
  kiln?: SessionFigures | Skipped;
  torch?: SessionFigures | Skipped;
  cpu?: SessionFigures | Skipped;
}
const figuresOf = (r: SessionFigures | Skipped | undefined) => (r && !("skipped" in r) ? r : undefined);

/** A window's log-mel features: a smooth pattern in Whisper's normalized range, the same every run. */
function melWindow(melBins: number): Float32Array {
  const mel = new Float32Array(melBins * WINDOW_FRAMES);
  for (let m = 0; m < melBins; m++) for (let t = 0; t < WINDOW_FRAMES; t++) mel[m * WINDOW_FRAMES + t] = 0.6 * Math.sin(0.013 * t * (1 + m / 17)) - 0.2;
  return mel;
}

/** The prompt each row starts from: <|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>, then byte tokens. */
function promptTokens(n: number): number[] {
  const head = [specialId("<|startoftranscript|>"), specialId("<|en|>"), specialId("<|transcribe|>"), specialId("<|notimestamps|>")];
  return Array.from({ length: n }, (_, i) => (i < head.length ? head[i] : 65 + (i % 26)));
}

/** The session of `artifactDir` on `on`, stepped as beam search steps it at each row count. */
async function measureSession(artifactDir: string, on: ComputeDevice, shape: WhisperShapeSpec): Promise<SessionFigures> {
  const slots = Math.max(...rowCounts);
  const session = await SpeechSession.load(artifactDir, { device: on, threads, slots, rowsPerWindow: beams });
  try {
    const mel = melWindow(shape.melBins);
    const k = 2 * beams;
    // A run whose outputs stay on the device returns once its work is queued, so an encode is timed
    // with one small decoder call after it (a row that keeps nothing, its top token fetched), less
    // that call alone.
    const oneRowMask = new Float32Array(SYNTHETIC_WHISPER_VOCAB);
    const drain = () => session.decode(0, [0], [false], 1, [specialId("<|startoftranscript|>")], { logits: false, top: { mask: oneRowMask, k: 1 } });
    const timedMs = async (fn: () => Promise<unknown>) => {
      const t0 = performance.now();
      await fn();
      return performance.now() - t0;
    };
    await session.encode(0, mel); // warm-up: the first runs compile the device's kernels
    await drain();
    const encodes: number[] = [];
    const drains: number[] = [];
    for (let r = 0; r < Math.max(runs, 3); r++) {
      encodes.push(
        await timedMs(async () => {
          await session.encode(0, mel);
          await drain();
        }),
      );
      drains.push(await timedMs(drain));
    }
    const figures: SessionFigures = { encodeMs: median(encodes) - median(drains), rows: {} };
    for (const n of rowCounts) {
      for (let slot = 0; slot < n; slot += beams) await session.encode(slot, mel);
      const mask = new Float32Array(n * SYNTHETIC_WHISPER_VOCAB);
      // Whisper's rules at every step: no end of text, no special token but timestamps.
      for (let r = 0; r < n; r++)
        mask.fill(-Infinity, r * SYNTHETIC_WHISPER_VOCAB + specialId("<|endoftext|>"), r * SYNTHETIC_WHISPER_VOCAB + specialId("<|0.00|>"));
      const keep = new Array<boolean>(n).fill(true);
      const prompt = promptTokens(context);
      const runOnce = async (): Promise<RowFigures> => {
        const t0 = performance.now();
        let out = await session.decode(0, new Array<number>(n).fill(0), keep, context, Array.from({ length: n }, () => prompt).flat(), {
          logits: false,
          top: { mask, k },
        });
        const promptMs = performance.now() - t0;
        const t1 = performance.now();
        for (let s = 0; s < steps; s++) {
          // Each transcription's beams rotate by one: every row continues another's hypothesis.
          const from = Array.from({ length: n }, (_, r) => r - (r % beams) + ((r + 1) % beams));
          const next = from.map((f) => out.top!.tokens[f * k]);
          out = await session.decode(0, new Array<number>(n).fill(context + s), keep, 1, next, { logits: false, top: { mask, k } }, from);
        }
        return { promptMs, msPerStep: (performance.now() - t1) / steps };
      };
      await runOnce(); // warm-up at this row count
      const measured: RowFigures[] = [];
      for (let r = 0; r < runs; r++) measured.push(await runOnce());
      figures.rows[n] = { promptMs: median(measured.map((m) => m.promptMs)), msPerStep: median(measured.map((m) => m.msPerStep)) };
      log(`  ${on} ${n} rows: prompt ${fmt(figures.rows[n].promptMs)} ms, ${fmt(figures.rows[n].msPerStep)} ms a step`);
    }
    return figures;
  } finally {
    await session.release();
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
  const kiln = figuresOf(res.kiln);
  const torch = figuresOf(res.torch);
  const cpu = figuresOf(res.cpu);
  const s = res.shape;
  log("");
  log(
    `whisper ${s.name} (synthetic: ${s.encoderLayers}+${s.decoderLayers} layers, width ${s.width}, ${s.melBins} mel bins; written in ${fmt(res.writeSeconds)} s, compiled in ${Object.entries(
      res.compileSeconds,
    )
      .map(([d, t]) => (t === "reused" ? `reused (${d})` : `${fmt(t)} s (${d})`))
      .join(", ")})`,
  );
  for (const [name, r] of [
    ["kiln", res.kiln],
    ["PyTorch", res.torch],
    ["CPU engine", res.cpu],
  ] as const)
    if (r && "skipped" in r) log(`  ${name}: skipped (${r.skipped})`);
  log(
    `  encode a 30 s window: kiln ${fmt(kiln?.encodeMs)} ms; PyTorch ${fmt(torch?.encodeMs)} ms (kiln/PyTorch time ${ratio(kiln?.encodeMs, torch?.encodeMs)}); CPU engine ${fmt(cpu?.encodeMs)} ms (kiln/CPU ${ratio(kiln?.encodeMs, cpu?.encodeMs)})`,
  );
  log(
    `  rows (transcriptions x ${beams} beams) | kiln prompt ms | kiln ms/step | PyTorch ms/step | kiln/PyTorch | CPU ms/step | kiln/CPU | window s (kiln / PyTorch / CPU) | kiln RTF`,
  );
  for (const n of rowCounts) {
    const k = kiln?.rows[n];
    const t = torch?.rows[n];
    const c = cpu?.rows[n];
    const w = windowSeconds(kiln, n);
    log(
      `  ${n} (${n / beams} x ${beams}) | ${fmt(k?.promptMs)} | ${fmt(k?.msPerStep)} | ${fmt(t?.msPerStep)} | ${ratio(k?.msPerStep, t?.msPerStep)} | ${fmt(c?.msPerStep)} | ${ratio(k?.msPerStep, c?.msPerStep)} | ${fmt(w, 2)} / ${fmt(windowSeconds(torch, n), 2)} / ${fmt(windowSeconds(cpu, n), 2)} | ${fmt(w / (30 / (n / beams)), 3)}`,
    );
  }
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
  const res: ShapeResult = { shape, writeSeconds: (performance.now() - t0) / 1000, compileSeconds: {} };
  const compile = async (on: BuildDevice) => {
    const c = await compileCt2Whisper({ slug: `whisper-${shape.name}-synthetic`, modelDir, home, device: on });
    res.compileSeconds[on] = c.reused ? "reused" : c.seconds;
    return c.dir;
  };
  try {
    res.kiln = await measureSession(await compile(device), device, shape);
  } catch (err) {
    res.kiln = { skipped: `failed: ${message(err)}` };
  }
  res.torch = device === "webgpu" ? measureTorch(shape) : { skipped: "the device is the CPU" };
  if (device === "cpu" || args["skip-cpu"]) res.cpu = { skipped: device === "cpu" ? "the device is the CPU" : "--skip-cpu" };
  else {
    try {
      res.cpu = await measureSession(await compile("cpu"), "cpu", shape);
    } catch (err) {
      res.cpu = { skipped: `failed: ${message(err)}` };
    }
  }
  results.push(res);
  report(res);
  // After every shape, so a run cut short by its time limit still leaves what it measured.
  if (args.json) {
    mkdirSync(dirname(resolve(args.json)), { recursive: true });
    writeFileSync(args.json, `${JSON.stringify({ device, beams, context, steps, runs, threads, results }, null, 1)}\n`);
  }
}
