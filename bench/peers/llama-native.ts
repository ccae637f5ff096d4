/**
 * llama.cpp's own benchmark tools as a peer: `llama-bench` and `llama-batched-bench`, built natively
 * (GGML_NATIVE) by scripts/peers/llama-cpp-native.sh from the sources vendored in the
 * llama-cpp-python sdist. Unlike the node-llama-cpp binding they add no JavaScript per token, so
 * they show what llama.cpp itself does on this CPU.
 *
 * Each function runs one binary on a GGUF and returns its figures; nothing here prints. Each result
 * carries the child's CPU seconds and wall seconds so that the caller can tell how busy the rest
 * of the machine was meanwhile (a child's CPU time is not in `process.cpuUsage()`).
 */
import { spawn, spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const REPO = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
/** Where scripts/peers/llama-cpp-native.sh installs the binaries. */
export const NATIVE_BIN_DIR = join(REPO, ".cache", "peers", "llama.cpp", "bin");
const SCRIPT = join(REPO, "scripts", "peers", "llama-cpp-native.sh");

export interface NativeBinaries {
  bench: string;
  batchedBench: string;
  /** Built when cheap; absent if its build failed. */
  perplexity: string | null;
  /** `llama-embedding`, likewise. */
  embedding: string | null;
  /** The pinned source, e.g. "llama-cpp-python 0.3.36" (from the install folder), or null. */
  version: string | null;
}

/** The installed binaries, or null when llama-bench or llama-batched-bench is missing. */
export function findNative(binDir = NATIVE_BIN_DIR): NativeBinaries | null {
  const bench = join(binDir, "llama-bench");
  const batchedBench = join(binDir, "llama-batched-bench");
  if (!existsSync(bench) || !existsSync(batchedBench)) return null;
  const perplexity = join(binDir, "llama-perplexity");
  const embedding = join(binDir, "llama-embedding");
  const versionFile = join(binDir, "..", "VERSION");
  return {
    bench,
    batchedBench,
    perplexity: existsSync(perplexity) ? perplexity : null,
    embedding: existsSync(embedding) ? embedding : null,
    version: existsSync(versionFile) ? readFileSync(versionFile, "utf8").trim() : null,
  };
}

/**
 * Builds the binaries through the script (minutes on first use, instant after) and returns them.
 * The script's progress lines go straight to this process's stderr, so a long build shows where it is.
 */
export function buildNative(): NativeBinaries {
  const r = spawnSync("bash", [SCRIPT], { cwd: REPO, stdio: ["ignore", 2, 2] });
  if (r.status !== 0) throw new Error(`${SCRIPT} failed (exit ${r.status ?? r.signal}); the compiler's output is in .cache/peers/build.log`);
  const found = findNative();
  if (!found) throw new Error(`${SCRIPT} succeeded but ${NATIVE_BIN_DIR} lacks llama-bench or llama-batched-bench`);
  return found;
}

interface ChildRun {
  stdout: string;
  stderr: string;
  /** User + system CPU seconds of the binary (from the shell's `times`). */
  cpuSeconds: number;
  wallSeconds: number;
}

/** Runs `bin args` under bash so that `times` reports the child's CPU seconds on the last stderr line. */
function runChild(bin: string, args: string[], timeoutMs: number): Promise<ChildRun> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const child = spawn("bash", ["-c", '"$0" "$@"; rc=$?; times >&2; exit $rc', bin, ...args], { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
    child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.on("error", (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      const wallSeconds = (performance.now() - t0) / 1000;
      if (code !== 0) {
        reject(new Error(`${bin.split("/").pop()} ${args.join(" ")}: exit ${code ?? signal}: ${stderr.trim().split("\n").slice(-6).join(" | ")}`));
        return;
      }
      // `times` prints the shell's own user/sys, then its children's: "0m1.234s 0m0.056s".
      const lines = stderr.trimEnd().split("\n");
      const m = /^(\d+)m([\d.]+)s\s+(\d+)m([\d.]+)s$/.exec(lines[lines.length - 1] ?? "");
      const cpuSeconds = m ? 60 * Number(m[1]) + Number(m[2]) + 60 * Number(m[3]) + Number(m[4]) : NaN;
      resolve({ stdout, stderr: lines.slice(0, -2).join("\n"), cpuSeconds, wallSeconds });
    });
  });
}

export interface NativeFigure {
  /** Mean tokens/s over the repetitions (llama-bench's avg_ts; for batched-bench, over its runs). */
  tokensPerSecond: number;
  /** Each repetition's tokens/s. */
  samples: number[];
  threads: number;
  /** CPU seconds the binary used (model load and warm-up included) and its wall seconds. */
  cpuSeconds: number;
  wallSeconds: number;
}

export interface BenchOptions {
  /** Threads for llama.cpp (`-t`). */
  threads: number;
  /** Repetitions (`-r`); llama-bench also runs one untimed warm-up. Default 3. */
  repetitions?: number;
  /** Per-invocation time limit in milliseconds. Default 300000. */
  timeoutMs?: number;
}

interface LlamaBenchRow {
  n_threads: number;
  n_prompt: number;
  n_gen: number;
  n_depth?: number;
  avg_ts: number;
  samples_ts?: number[];
  flash_attn?: unknown;
  type_k?: string;
  build_commit?: string;
}

/** llama-bench's `-o json` output: one object per test. */
export function parseLlamaBenchJson(stdout: string): LlamaBenchRow[] {
  const start = stdout.indexOf("[");
  const end = stdout.lastIndexOf("]");
  if (start < 0 || end < start) throw new Error(`llama-bench printed no JSON array: ${stdout.slice(0, 200)}`);
  const rows = JSON.parse(stdout.slice(start, end + 1)) as LlamaBenchRow[];
  if (!Array.isArray(rows) || rows.some((r) => typeof r.avg_ts !== "number")) throw new Error("llama-bench JSON: rows without avg_ts");
  return rows;
}

/** Whether this llama-bench takes `-d/--n-depth` (a context already in the cache before the timed test). */
export function benchHasDepth(bins: NativeBinaries): boolean {
  const r = spawnSync(bins.bench, ["--help"], { encoding: "utf8" });
  return /--n-depth/.test(`${r.stdout}${r.stderr}`);
}

function figure(row: LlamaBenchRow, run: ChildRun): NativeFigure {
  return {
    tokensPerSecond: row.avg_ts,
    samples: row.samples_ts ?? [row.avg_ts],
    threads: row.n_threads,
    cpuSeconds: run.cpuSeconds,
    wallSeconds: run.wallSeconds,
  };
}

export interface DecodeFigure extends NativeFigure {
  /** Tokens in the cache before the timed generation (0 when this llama-bench has no `-d`). */
  depth: number;
  flashAttention: string;
  kvType: string;
  buildCommit: string;
}

/**
 * Single-stream decode: llama-bench `-p 0 -n <tokens> -d <depth>` at each thread count in one run
 * (they share the model load, so the CPU seconds are the run's). With no `-d` in this build the
 * depth is 0, and `depth` in the result says so.
 */
export async function nativeDecode(
  bins: NativeBinaries,
  gguf: string,
  opts: { threads: number[]; depth: number; tokens?: number; repetitions?: number; timeoutMs?: number },
): Promise<DecodeFigure[]> {
  const depth = benchHasDepth(bins) ? opts.depth : 0;
  const args = ["-m", gguf, "-p", "0", "-n", String(opts.tokens ?? 64), "-t", opts.threads.join(","), "-r", String(opts.repetitions ?? 3), "-o", "json"];
  if (depth > 0) args.push("-d", String(depth));
  const run = await runChild(bins.bench, args, opts.timeoutMs ?? 300_000);
  return parseLlamaBenchJson(run.stdout).map((row) => ({
    ...figure(row, run),
    depth: row.n_depth ?? 0,
    // llama-bench prints the flash-attention mode as its enum: -1 auto, 0 off, 1 on.
    flashAttention: ({ "-1": "auto", "0": "off", "1": "on" } as Record<string, string>)[String(row.flash_attn)] ?? String(row.flash_attn ?? "?"),
    kvType: String(row.type_k ?? "?"),
    buildCommit: String(row.build_commit ?? "?"),
  }));
}

/** Prefill of one `tokens`-token prompt into an empty cache: llama-bench `-p <tokens> -n 0`. */
export async function nativePrefill(bins: NativeBinaries, gguf: string, opts: BenchOptions & { tokens?: number }): Promise<NativeFigure> {
  const args = ["-m", gguf, "-p", String(opts.tokens ?? 512), "-n", "0", "-t", String(opts.threads), "-r", String(opts.repetitions ?? 3), "-o", "json"];
  const run = await runChild(bins.bench, args, opts.timeoutMs ?? 300_000);
  const [row] = parseLlamaBenchJson(run.stdout);
  return figure(row, run);
}

interface BatchedRow {
  pp: number;
  tg: number;
  pl: number;
  n_threads: number;
  speed_pp: number;
  speed_tg: number;
  speed: number;
}

/** llama-batched-bench's `--output-format jsonl` lines (it prints them through its log, on stdout or stderr). */
export function parseBatchedJsonl(text: string): BatchedRow[] {
  const rows: BatchedRow[] = [];
  for (const line of text.split("\n")) {
    const t = line.trim();
    if (!t.startsWith("{") || !t.includes('"speed_tg"')) continue;
    rows.push(JSON.parse(t) as BatchedRow);
  }
  return rows;
}

/** Markdown table rows of llama-batched-bench (`| PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |`). */
export function parseBatchedMarkdown(text: string): BatchedRow[] {
  const rows: BatchedRow[] = [];
  for (const line of text.split("\n")) {
    const cells = line
      .split("|")
      .map((c) => c.trim())
      .filter((c) => c !== "");
    if (cells.length !== 10 || !cells.every((c) => /^[\d.]+$/.test(c))) continue;
    const [pp, tg, pl, , , speedPp, , speedTg, , speed] = cells.map(Number);
    rows.push({ pp, tg, pl, n_threads: NaN, speed_pp: speedPp, speed_tg: speedTg, speed });
  }
  return rows;
}

export interface BatchedFigure extends NativeFigure {
  sequences: number;
  promptTokens: number;
  generatedTokens: number;
  /** Prefill tokens/s of the sequences' prompts (each its own), mean over the runs. */
  prefillTokensPerSecond: number;
}

/**
 * Generation throughput of `sequences` sequences decoding together: llama-batched-bench
 * `-npp <prompt> -ntg <tokens> -npl <sequences>` (each sequence its own prompt), S_TG t/s =
 * sequences x tokens / generation seconds. The tool times one pass, so it runs `repetitions` times.
 */
export async function nativeBatched(
  bins: NativeBinaries,
  gguf: string,
  opts: BenchOptions & { sequences?: number; prompt?: number; tokens?: number },
): Promise<BatchedFigure> {
  const sequences = opts.sequences ?? 16;
  const prompt = opts.prompt ?? 128;
  const tokens = opts.tokens ?? 64;
  const context = sequences * (prompt + tokens);
  const args = [
    "-m",
    gguf,
    "-c",
    String(context),
    "-b",
    "2048",
    "-ub",
    "512",
    "-npp",
    String(prompt),
    "-ntg",
    String(tokens),
    "-npl",
    String(sequences),
    "-t",
    String(opts.threads),
    "-tb",
    String(opts.threads),
    "--output-format",
    "jsonl",
  ];
  const samples: number[] = [];
  const prefill: number[] = [];
  let cpuSeconds = 0;
  let wallSeconds = 0;
  for (let i = 0; i < (opts.repetitions ?? 3); i++) {
    const run = await runChild(bins.batchedBench, args, opts.timeoutMs ?? 300_000);
    let rows = parseBatchedJsonl(`${run.stdout}\n${run.stderr}`);
    if (rows.length === 0) rows = parseBatchedMarkdown(`${run.stdout}\n${run.stderr}`);
    const row = rows.find((r) => r.pl === sequences);
    if (!row) throw new Error(`llama-batched-bench printed no result for ${sequences} sequences: ${run.stdout.slice(-300)}`);
    samples.push(row.speed_tg);
    prefill.push(row.speed_pp);
    cpuSeconds += run.cpuSeconds;
    wallSeconds += run.wallSeconds;
  }
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  return {
    tokensPerSecond: mean(samples),
    samples,
    threads: opts.threads,
    cpuSeconds,
    wallSeconds,
    sequences,
    promptTokens: prompt,
    generatedTokens: tokens,
    prefillTokensPerSecond: mean(prefill),
  };
}

/** What one `llama-embedding` run did: its prompt-eval milliseconds and tokens (its own timer), and the process's wall seconds. */
export interface EmbeddingRun {
  promptMs: number;
  tokens: number;
  wallSeconds: number;
}

/**
 * Embeds each line of `file` with `llama-embedding`, vectors as pooled (`--embd-normalize -1`). With
 * its default of one "parallel" sequence the tool takes a unified KV cache and packs as many inputs
 * into each batch as `batchTokens` holds; a pooled batch must be one ubatch, so the ubatch is the
 * whole batch, with flash attention to keep its scratch small. Its prompt-eval timer prints at log
 * verbosity 4.
 */
export async function runEmbeddingBinary(
  bin: string,
  gguf: string,
  file: string,
  options: { threads: number; pooling: "last" | "mean"; batchTokens: number; timeoutMs?: number },
): Promise<EmbeddingRun> {
  const batch = String(options.batchTokens);
  const r = await runChild(
    bin,
    ["-m", gguf, "-f", file, "-t", String(options.threads), "--pooling", options.pooling, "--embd-normalize", "-1"]
      .concat(["-c", batch, "-b", batch, "-ub", batch, "-fa", "on"])
      .concat(["--embd-output-format", "json", "-lv", "4"]),
    options.timeoutMs ?? 300_000,
  );
  const m = /prompt eval time =\s+([\d.]+) ms \/\s+(\d+) tokens/.exec(r.stderr);
  if (!m) throw new Error(`llama-embedding printed no prompt eval time: ${r.stderr.split("\n").slice(-4).join(" | ")}`);
  return { promptMs: Number(m[1]), tokens: Number(m[2]), wallSeconds: r.wallSeconds };
}
