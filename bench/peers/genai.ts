/**
 * onnxruntime-genai as a peer: runs bench/peers/genai_bench.py in the venv that
 * scripts/peers/genai.sh builds, and scores kiln against the same exact reference that script
 * writes (the float32 checkpoint's log-probs, teacher forced on bench/peers/heldout.txt).
 */
import { spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const REPO = fileURLToPath(new URL("../..", import.meta.url));
/** Where scripts/peers/genai.sh puts the venv, the float32 checkpoint and the int4/int8 builds. */
export const GENAI_ROOT = join(REPO, ".cache", "peers", "genai");
export const GENAI_PYTHON = join(GENAI_ROOT, "venv", "bin", "python");
const SCRIPT = join(REPO, "bench", "peers", "genai_bench.py");

export interface GenaiSpeed {
  /** Single sequence, tokens/s over the timed steps at context 128. */
  decode128: number;
  /** One 512-token prompt into an empty cache, tokens/s. */
  prefill512: number;
  /** 16 sequences stepping together at context 128, tokens/s summed over the sequences. */
  batch16: number;
}

export interface Fidelity {
  /** Fraction of positions whose most likely next token is the reference's. */
  top1: number;
  /** Mean over positions of KL(reference || engine), in nats. */
  klMean: number;
  /** 99th percentile of the per-position KL, in nats. */
  klP99: number;
  positions: number;
}

export interface GenaiBuildResult {
  modelBytes: number;
  loadS: number;
  speed?: GenaiSpeed;
  samples?: Record<keyof GenaiSpeed, number[]>;
  fidelity?: Fidelity;
}

export interface GenaiResult {
  version: string | null;
  threads: number;
  runs: number;
  steps: number;
  /** The token ids the speed workloads used (the held-out text repeated), for running kiln on the same. */
  promptIds: number[];
  builds: Record<string, GenaiBuildResult>;
  loadavg: number[];
}

export interface GenaiOptions {
  /** intra_op_num_threads for every build. Default: 2. */
  threads?: number;
  /** Speed runs; the script reports medians. Default: 3. */
  runs?: number;
  /** Timed single-token forwards per decode run. Default: 64. */
  steps?: number;
  /** Which builds under {@link GENAI_ROOT}. Default: ["int4", "int8"]. */
  builds?: string[];
  /** Measure speed. Default: true. */
  speed?: boolean;
  /** Measure fidelity (and rewrite the reference files). Default: true. */
  fidelity?: boolean;
  /** Progress lines of the script (its stderr). Default: written to this process's stderr. */
  onLog?: (line: string) => void;
}

/** Whether scripts/peers/genai.sh has built what the benchmark needs. */
export function genaiReady(builds: string[] = ["int4", "int8"]): boolean {
  return (
    existsSync(GENAI_PYTHON) && existsSync(join(GENAI_ROOT, "hf", "config.json")) && builds.every((b) => existsSync(join(GENAI_ROOT, b, "genai_config.json")))
  );
}

/** Runs genai_bench.py (no shell) and parses the JSON object it prints last. */
export function runGenai(options: GenaiOptions = {}): Promise<GenaiResult> {
  const argv = [
    SCRIPT,
    "--root",
    GENAI_ROOT,
    "--threads",
    String(options.threads ?? 2),
    "--runs",
    String(options.runs ?? 3),
    "--steps",
    String(options.steps ?? 64),
    "--builds",
    (options.builds ?? ["int4", "int8"]).join(","),
  ];
  if (options.speed === false) argv.push("--no-speed");
  if (options.fidelity === false) argv.push("--no-fidelity");
  const onLog = options.onLog ?? ((l: string) => process.stderr.write(`${l}\n`));
  return new Promise((resolve, reject) => {
    const child = spawn(GENAI_PYTHON, argv, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, TOKENIZERS_PARALLELISM: "false" } });
    let stdout = "";
    let errTail = "";
    let partial = "";
    child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
    child.stderr.setEncoding("utf8").on("data", (d: string) => {
      errTail = (errTail + d).slice(-4000);
      const lines = (partial + d).split("\n");
      partial = lines.pop() ?? "";
      for (const l of lines) if (l.trim() && !l.includes("it/s]")) onLog(l);
    });
    child.on("error", reject);
    child.on("close", (code) => {
      if (code !== 0) return reject(new Error(`genai_bench.py exited ${code}:\n${errTail}`));
      const last = stdout.trim().split("\n").pop() ?? "";
      let raw: any;
      try {
        raw = JSON.parse(last);
      } catch {
        return reject(new Error(`genai_bench.py printed no JSON object:\n${stdout.slice(-2000)}`));
      }
      const builds: Record<string, GenaiBuildResult> = {};
      for (const [name, b] of Object.entries<any>(raw.builds)) {
        builds[name] = {
          modelBytes: b.model_bytes,
          loadS: b.load_s,
          speed: b.speed,
          samples: b.samples,
          fidelity: b.fidelity && { top1: b.fidelity.top1, klMean: b.fidelity.kl_mean, klP99: b.fidelity.kl_p99, positions: b.fidelity.positions },
        };
      }
      resolve({ version: raw.version, threads: raw.threads, runs: raw.runs, steps: raw.steps, promptIds: raw.prompt_ids, builds, loadavg: raw.loadavg });
    });
  });
}

/** The exact reference written by genai_bench.py: row i is log P(token i+1 | tokens 0..i). */
export interface Reference {
  tokenIds: number[];
  positions: number;
  vocab: number;
  /** [positions, vocab] natural-log probabilities. */
  logProbs: Float32Array;
}

export function loadReference(root = GENAI_ROOT): Reference {
  const header = JSON.parse(readFileSync(join(root, "reference.json"), "utf8")) as { token_ids: number[]; positions: number; vocab: number; file: string };
  const bin = readFileSync(join(root, header.file));
  if (bin.byteLength !== header.positions * header.vocab * 4)
    throw new Error(`reference.bin holds ${bin.byteLength} bytes, not ${header.positions} x ${header.vocab} float32`);
  const logProbs = new Float32Array(bin.buffer.slice(bin.byteOffset, bin.byteOffset + bin.byteLength));
  return { tokenIds: header.token_ids, positions: header.positions, vocab: header.vocab, logProbs };
}

/** Natural-log softmax of each `vocab`-wide row of `logits`, in float64 arithmetic. */
export function logSoftmaxRows(logits: Float32Array, vocab: number): Float32Array {
  const out = new Float32Array(logits.length);
  for (let r = 0; r * vocab < logits.length; r++) {
    const row = logits.subarray(r * vocab, (r + 1) * vocab);
    let max = -Infinity;
    for (let i = 0; i < vocab; i++) if (row[i] > max) max = row[i];
    let sum = 0;
    for (let i = 0; i < vocab; i++) sum += Math.exp(row[i] - max);
    const lse = max + Math.log(sum);
    for (let i = 0; i < vocab; i++) out[r * vocab + i] = row[i] - lse;
  }
  return out;
}

/**
 * Top-1 agreement and KL(reference || kiln) of kiln's next-token distributions, given kiln's
 * log-probs for the reference's token ids: either one Float32Array per position or one flat
 * [positions, vocab] array (e.g. `logSoftmaxRows` of `TextSession.forward(..., allPositions)`
 * over `reference.tokenIds.slice(0, positions)`).
 */
export function kilnFidelity(rows: Float32Array | Float32Array[], reference: Reference = loadReference()): Fidelity {
  const { positions, vocab, logProbs: ref } = reference;
  const row = Array.isArray(rows) ? (i: number) => rows[i] : (i: number) => rows.subarray(i * vocab, (i + 1) * vocab);
  const count = Array.isArray(rows) ? rows.length : rows.length / vocab;
  if (count < positions) throw new Error(`kilnFidelity: ${count} rows for ${positions} reference positions`);
  let agree = 0;
  const kls: number[] = [];
  for (let p = 0; p < positions; p++) {
    const k = row(p);
    if (k.length !== vocab) throw new Error(`kilnFidelity: a row of ${k.length} log-probs, the reference's vocabulary is ${vocab}`);
    const base = p * vocab;
    let kl = 0;
    let refBest = 0;
    let kBest = 0;
    for (let i = 0; i < vocab; i++) {
      const lp = ref[base + i];
      if (lp > ref[base + refBest]) refBest = i;
      if (k[i] > k[kBest]) kBest = i;
      const pr = Math.exp(lp);
      if (pr > 0) kl += pr * (lp - k[i]);
    }
    if (refBest === kBest) agree++;
    kls.push(kl);
  }
  // p99 with linear interpolation between order statistics, as numpy.quantile does in genai_bench.py
  const sorted = [...kls].sort((a, b) => a - b);
  const at = 0.99 * (positions - 1);
  const lo = Math.floor(at);
  const klP99 = sorted[lo] + (sorted[Math.min(lo + 1, positions - 1)] - sorted[lo]) * (at - lo);
  return { top1: agree / positions, klMean: kls.reduce((a, b) => a + b, 0) / positions, klP99, positions };
}
