/** `kiln track run <slug>`: one night of a model's optimization track, now. */
import { hasModel, UnknownModelError } from "../../catalogue/catalogue.js";
import { openDatabase } from "../../catalogue/db.js";
import { trackHistory } from "../../track/history.js";
import { jobPath, jobsDir, loadJob } from "../../track/job.js";
import type { TrackRunSummary } from "../../track/run.js";
import { defineCommand, type CommandIO } from "../command.js";
import { option, UsageError } from "../options.js";
import { formatTrackTable } from "../track-table.js";

const options = {
  budgetMinutes: option.number({
    value: "<minutes>",
    min: 0.1,
    max: 24 * 60,
    description: "how long the run may take, every measurement included. Default: the job's budgetMinutes",
  }),
  threads: option.integer({ min: 1, max: 256, description: "onnxruntime threads a measurement may use. Default: the job's threadBudget" }),
  maxCandidates: option.integer({ min: 0, max: 1000, description: "most candidates to measure. Default: the job's maxCandidates" }),
  jobs: option.string({ value: "<dir>", env: "KILN_JOBS", description: "folder of the job files (<slug>.json). Default: compiler-jobs/ of this kiln" }),
  json: option.flag({ description: "print the run's records as JSON instead of a table" }),
};

export default defineCommand({
  name: "track",
  description: "Run a model's optimization track now (one night)",
  intro: `Runs the model's job from compiler-jobs/<slug>.json once, now: measures the artifact in service
(the current promotion, or the default compile) twice to know the noise, then candidates around it
(one or two settings of the job's searchSpace changed at a time: compile options, onnxruntime
threads and graph optimization level, prefill chunk, max running sequences, step tokens) until the
time budget is spent. Each measurement (speed workload and quality probe against the
llama.cpp-numerics reference) is a row of track_candidates in $KILN_HOME/kiln.sqlite. A candidate
faster beyond the noise and within the job's quality budget is confirmed side by side (the
incumbent and it loaded at once, their workload passes alternating) and the round's best is
promoted (\`kiln tracks\` shows the history, \`kiln rollback\` undoes it).
Progress goes to stderr, the run's table to stdout. SIGTERM or Ctrl-C stops after recording the
measurement in progress as failed.`,
  positionals: "run <slug>",
  options,
  async run({ options, positionals }, io) {
    const [sub, slug, ...extra] = positionals;
    if (sub !== "run") throw new UsageError(sub ? `unknown subcommand ${sub} (only run)` : "which subcommand? (run <slug>)");
    if (!slug) throw new UsageError("which model? (a slug with a job in compiler-jobs/)");
    if (extra.length > 0) throw new UsageError(`unexpected argument ${extra[0]}`);
    if (!hasModel(slug)) throw new UsageError(new UnknownModelError(slug).message);
    const job = loadJob(jobPath(slug, options.jobs ?? jobsDir()));

    const log = (line: string) => io.stderr.write(`${line}\n`);
    const stop = new AbortController();
    const onSignal = (signal: NodeJS.Signals) => {
      log(`kiln track: ${signal}: stopping after the measurement in progress`);
      stop.abort(new Error(`stopped by ${signal}`));
    };
    process.on("SIGTERM", onSignal);
    process.on("SIGINT", onSignal);
    // Loaded here, not with the command's declaration, so that help and usage errors come at once.
    const { createModelMeasurer, runTrack } = await import("../../track/index.js");
    const db = openDatabase();
    const measurer = createModelMeasurer({ slug, workload: job.workload, probeTokens: job.quality.probeTokens, log });
    try {
      const summary = await runTrack(job, {
        db,
        measurer,
        budgetMinutes: options.budgetMinutes,
        threadBudget: options.threads,
        maxCandidates: options.maxCandidates,
        log,
        signal: stop.signal,
      });
      report(summary, options.json, db, io);
      return summary.incumbent && !stop.signal.aborted ? 0 : 1;
    } finally {
      process.off("SIGTERM", onSignal);
      process.off("SIGINT", onSignal);
      await measurer.close?.();
      db.close();
    }
  },
});

function report(summary: TrackRunSummary, json: boolean, db: ReturnType<typeof openDatabase>, io: CommandIO): void {
  const history = trackHistory(db, summary.slug);
  const rows = history.candidates.filter((c) => c.run === summary.runId);
  if (json) {
    io.stdout.write(
      `${JSON.stringify({ slug: summary.slug, run: summary.runId, ended: summary.ended, seconds: summary.seconds, current: history.current, candidates: rows }, null, 2)}\n`,
    );
    return;
  }
  io.stdout.write(`${formatTrackTable(rows)}\n`);
  const serving = history.current ? `${history.current.artifact} (${history.current.reason})` : "the default compile";
  io.stdout.write(
    `\n${summary.slug}: ${summary.promoted.length} promotion(s) in ${summary.seconds.toFixed(0)} s; ended: ${summary.ended}; serving: ${serving}\n`,
  );
}
