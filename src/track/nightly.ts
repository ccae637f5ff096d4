/**
 * The nightly scheduler: node-cron fires each job at its `schedule`, and the jobs run one at a time
 * (two models measured at once would slow each other and spoil both measurements), each in its own
 * `kiln track run <slug>` child process. A process per job keeps a crash, a hang or a leak of one
 * model's track away from the server and from the other models' tracks, and lets it run at a lower
 * CPU priority than the server it shares the machine with.
 */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { setPriority } from "node:os";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import cron from "node-cron";
import { openDatabase } from "../catalogue/db.js";
import { jobsDir as defaultJobsDir, loadJobs, type TrackJob } from "./job.js";
import { markAbandoned } from "./records.js";

/** Niceness of a track process: the server it runs beside gets the CPU first. */
export const TRACK_NICENESS = 10;
/** Seconds a stopped track process gets to record its state before it is killed. */
const KILL_AFTER_S = 15;

export interface NightlyOptions {
  /** KILN_HOME of the track processes. Default: this process's. */
  home?: string;
  /** Folder of the job files. Default: `$KILN_JOBS`, else `compiler-jobs/`. */
  jobsDir?: string;
  /** Only these models' jobs. Default: every job. */
  slugs?: readonly string[];
  /**
   * Asked each time a job fires: whether its model is wanted now (`kiln serve`: a text model it has
   * served since it started, named at startup or loaded on demand). A job turned down is skipped
   * this time, and the log says so. Default: every job runs.
   */
  wanted?: (slug: string) => boolean;
  /** Why a job `wanted` turns down is skipped, for the log. Default: "not served since the server started". */
  unwantedReason?: string;
  /** When `wanted` takes a job, for the log line that sums the jobs up. Default: "when wanted". */
  wantedWhen?: string;
  /** onnxruntime threads for every job's measurements, instead of each job's `threadBudget`. */
  threadBudget?: number;
  /** One line per event (job scheduled, started, finished, its process's output). */
  onLog?: (line: string) => void;
  /** Runs one job to its end. Default: {@link spawnTrackRun}. */
  runJob?: (job: TrackJob, signal: AbortSignal) => Promise<void>;
  /** Calls `fire` at each time of the cron `expression`. Default: node-cron. */
  schedule?: (expression: string, name: string, fire: () => void) => { stop(): void; nextRun?(): Date | null };
}

function cronSchedule(expression: string, name: string, fire: () => void): { stop(): void; nextRun(): Date | null } {
  const task = cron.schedule(expression, fire, { name, noOverlap: true });
  return { stop: () => void task.destroy(), nextRun: () => task.getNextRun() };
}

/**
 * Schedules the jobs and returns the function that stops them: no job starts after it, and the one
 * running is stopped (its process gets SIGTERM, then SIGKILL) before the returned promise settles.
 * Invalid job files are logged and skipped; the valid ones run.
 */
export function startNightly(options: NightlyOptions = {}): () => Promise<void> {
  const log = options.onLog ?? (() => {});
  const dir = options.jobsDir ?? defaultJobsDir();
  const { jobs, errors } = loadJobs(dir);
  for (const error of errors) log(`track: skipping a job: ${error.message}`);
  const wanted = options.slugs ? jobs.filter((j) => options.slugs!.includes(j.slug)) : jobs;
  const runJob =
    options.runJob ??
    ((job: TrackJob, signal: AbortSignal) => spawnTrackRun(job, signal, { home: options.home, jobsDir: dir, threadBudget: options.threadBudget, onLog: log }));
  const schedule = options.schedule ?? cronSchedule;
  const controller = new AbortController();
  const queue: TrackJob[] = [];
  let running: { job: TrackJob; done: Promise<void> } | null = null;

  const pump = () => {
    if (running || controller.signal.aborted) return;
    const job = queue.shift();
    if (!job) return;
    log(`track: ${job.slug}: starting (budget ${job.budgetMinutes} min)`);
    const started = Date.now();
    const done = runJob(job, controller.signal)
      .then(
        () => log(`track: ${job.slug}: done after ${((Date.now() - started) / 60_000).toFixed(1)} min`),
        (err: unknown) => log(`track: ${job.slug}: failed: ${err instanceof Error ? err.message : String(err)}`),
      )
      .finally(() => {
        running = null;
        pump();
      });
    running = { job, done };
  };

  const fire = (job: TrackJob) => {
    if (controller.signal.aborted) return;
    if (options.wanted && !options.wanted(job.slug)) {
      log(`track: ${job.slug}: ${options.unwantedReason ?? "not served since the server started"}; this one is skipped`);
      return;
    }
    if (running?.job.slug === job.slug || queue.some((q) => q.slug === job.slug)) {
      log(`track: ${job.slug}: still running or queued from its last time; this one is skipped`);
      return;
    }
    if (running) log(`track: ${job.slug}: queued behind ${running.job.slug}`);
    queue.push(job);
    pump();
  };

  // Jobs turned down as they fire (every model's, on a server) are summed up in one line, not listed.
  const listed = options.wanted === undefined;
  let first: { slug: string; at: Date } | null = null;
  const tasks = wanted.map((job) => {
    const task = schedule(job.schedule, `track ${job.slug}`, () => fire(job));
    const next = task.nextRun?.();
    if (listed) log(`track: ${job.slug}: scheduled at "${job.schedule}"${next ? ` (next ${next.toISOString()})` : ""}`);
    if (next && (first === null || next < first.at)) first = { slug: job.slug, at: next };
    return task;
  });
  if (wanted.length === 0) log(`track: no jobs to schedule${forWhom(options.slugs)} in ${dir}`);
  else if (!listed) {
    const soonest = first as { slug: string; at: Date } | null;
    log(
      `track: ${wanted.length} job(s) scheduled from ${dir}${soonest ? `, the first ${soonest.slug}'s at ${soonest.at.toISOString()}` : ""}; each runs only ${options.wantedWhen ?? "when wanted"}`,
    );
  }

  return async () => {
    for (const task of tasks) task.stop();
    queue.length = 0;
    controller.abort();
    await running?.done;
  };
}

/** Whose jobs were wanted, for the log: every model's, the named ones', or none when the server names no model (its models load on demand). */
function forWhom(slugs: readonly string[] | undefined): string {
  if (!slugs) return "";
  return slugs.length > 0 ? ` for ${slugs.join(", ")}` : " (the server names no model at startup)";
}

/** `bin/kiln.mjs`, found by walking up from this module. */
export function kilnBin(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const candidate = join(dir, "bin", "kiln.mjs");
    if (existsSync(candidate)) return candidate;
    const parent = dirname(dir);
    if (parent === dir) throw new Error(`bin/kiln.mjs not found above ${dirname(fileURLToPath(import.meta.url))}`);
    dir = parent;
  }
}

export interface SpawnTrackOptions {
  home?: string;
  /** The folder the job came from, so the process reads the same file. Default: its own default. */
  jobsDir?: string;
  threadBudget?: number;
  onLog?: (line: string) => void;
  /** The command to run instead of `node bin/kiln.mjs` (tests). */
  command?: { file: string; args: string[] };
}

/**
 * Runs `kiln track run <slug>` in a child process at niceness {@link TRACK_NICENESS}, its output
 * passed to `onLog` line by line. Aborting `signal` sends it SIGTERM (it stops after recording the
 * measurement in progress as failed), then SIGKILL. Whatever it left 'running' is then marked
 * failed with its exit status. Resolves when it has exited; rejects when it exited unsuccessfully.
 */
export function spawnTrackRun(job: TrackJob, signal: AbortSignal, options: SpawnTrackOptions = {}): Promise<void> {
  const log = options.onLog ?? (() => {});
  const command = options.command ?? {
    file: process.execPath,
    args: [
      kilnBin(),
      "track",
      "run",
      job.slug,
      ...(options.jobsDir ? [`--jobs=${options.jobsDir}`] : []),
      ...(options.threadBudget ? ["--threads", String(options.threadBudget)] : []),
    ],
  };
  return new Promise((resolve, reject) => {
    const child = spawn(command.file, command.args, {
      env: { ...process.env, ...(options.home ? { KILN_HOME: options.home } : {}) },
      stdio: ["ignore", "pipe", "pipe"],
    });
    if (child.pid !== undefined) {
      try {
        setPriority(child.pid, TRACK_NICENESS);
      } catch {
        // Not allowed here (some containers): it still runs, only at the server's priority.
      }
    }
    for (const stream of [child.stdout, child.stderr]) createInterface({ input: stream }).on("line", (line) => log(`track: ${line}`));
    let killTimer: NodeJS.Timeout | undefined;
    const stop = () => {
      child.kill("SIGTERM");
      killTimer = setTimeout(() => child.kill("SIGKILL"), KILL_AFTER_S * 1000);
      killTimer.unref();
    };
    signal.addEventListener("abort", stop, { once: true });
    child.on("error", (err) => {
      signal.removeEventListener("abort", stop);
      reject(err);
    });
    child.on("close", (code, sig) => {
      clearTimeout(killTimer);
      signal.removeEventListener("abort", stop);
      const status = code !== null ? `exit code ${code}` : `signal ${sig}`;
      if (code !== 0) {
        try {
          const db = openDatabase({ home: options.home });
          try {
            markAbandoned(db, job.slug, `the track process ended (${status}) while this was being measured`);
          } finally {
            db.close();
          }
        } catch (err) {
          log(`track: ${job.slug}: could not mark its unfinished measurements: ${(err as Error).message}`);
        }
        reject(new Error(`kiln track run ${job.slug}: ${status}`));
        return;
      }
      resolve();
    });
  });
}
