/** The nightly scheduler: jobs one at a time, failures kept to their job, stop; the child process runner. */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { openDatabase } from "../../../src/catalogue/db.js";
import { DEFAULT_SETTINGS, listCandidates, spawnTrackRun, startCandidate, startNightly, type TrackJob } from "../../../src/track/index.js";
import { OTHER_SLUG, SLUG, testJob } from "./fakes.js";

function jobFile(dir: string, slug: string, schedule: string): void {
  writeFileSync(
    join(dir, `${slug}.json`),
    JSON.stringify({
      slug,
      schedule,
      budgetMinutes: 10,
      quality: { maxKlDivergence: 0.03, maxPerplexityRatio: 1.02 },
      searchSpace: { prefillChunk: [128, 256] },
    }),
  );
}

/** A schedule that fires only when the test says. */
function manualSchedule() {
  const fires = new Map<string, () => void>();
  const stopped: string[] = [];
  return {
    fires,
    stopped,
    schedule: (expression: string, name: string, fire: () => void) => {
      fires.set(name, fire);
      return { stop: () => stopped.push(name), nextRun: () => new Date("2026-11-24T02:17:00Z") };
    },
  };
}

const tick = () => new Promise((resolve) => setTimeout(resolve, 10));

describe("startNightly", () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "kiln-nightly-"));
    jobFile(dir, SLUG, "17 2 * * *");
    jobFile(dir, OTHER_SLUG, "47 3 * * *");
    writeFileSync(join(dir, "qwen2-5-0-5b-instruct.json"), JSON.stringify({ slug: "qwen2-5-0-5b-instruct", schedule: "61 2 * * *" }));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it("schedules the valid jobs, runs them one at a time, and a failed job stops no other", async () => {
    const cron = manualSchedule();
    const log: string[] = [];
    const started: string[] = [];
    const finish = new Map<string, (err?: Error) => void>();
    const runJob = (job: TrackJob) =>
      new Promise<void>((resolve, reject) => {
        started.push(job.slug);
        finish.set(job.slug, (err) => (err ? reject(err) : resolve()));
      });
    const stop = startNightly({ jobsDir: dir, onLog: (l) => log.push(l), runJob, schedule: cron.schedule });
    expect([...cron.fires.keys()]).toEqual([`track ${SLUG}`, `track ${OTHER_SLUG}`]);
    expect(log.some((l) => /skipping a job: .*qwen2-5-0-5b-instruct\.json/.test(l))).toBe(true);
    expect(log).toContain(`track: ${SLUG}: scheduled at "17 2 * * *" (next 2026-11-24T02:17:00.000Z)`);

    cron.fires.get(`track ${SLUG}`)!();
    cron.fires.get(`track ${OTHER_SLUG}`)!();
    cron.fires.get(`track ${SLUG}`)!(); // still running: skipped, not queued twice
    await tick();
    expect(started).toEqual([SLUG]);
    expect(log).toContain(`track: ${OTHER_SLUG}: queued behind ${SLUG}`);
    expect(log).toContain(`track: ${SLUG}: still running or queued from its last time; this one is skipped`);

    finish.get(SLUG)!(new Error("kiln track run smollm2-135m-instruct: signal SIGSEGV"));
    await tick();
    expect(log).toContain(`track: ${SLUG}: failed: kiln track run smollm2-135m-instruct: signal SIGSEGV`);
    expect(started).toEqual([SLUG, OTHER_SLUG]);
    finish.get(OTHER_SLUG)!();
    await tick();
    expect(log.some((l) => l.startsWith(`track: ${OTHER_SLUG}: done after`))).toBe(true);
    await stop();
    expect(cron.stopped).toHaveLength(2);
  });

  it("schedules only the models asked for, and stopping aborts the running job and drops the queue", async () => {
    const cron = manualSchedule();
    let aborted = false;
    const runJob = (_job: TrackJob, signal: AbortSignal) =>
      new Promise<void>((resolve) =>
        signal.addEventListener("abort", () => {
          aborted = true;
          resolve();
        }),
      );
    const stop = startNightly({ jobsDir: dir, slugs: [SLUG], runJob, schedule: cron.schedule });
    expect([...cron.fires.keys()]).toEqual([`track ${SLUG}`]);
    cron.fires.get(`track ${SLUG}`)!();
    await stop();
    expect(aborted).toBe(true);
    cron.fires.get(`track ${SLUG}`)!(); // after stop: nothing starts
  });

  it("runs a job only when its model is wanted as it fires (kiln serve: served since the start), and says when it skips one", async () => {
    const cron = manualSchedule();
    const log: string[] = [];
    const started: string[] = [];
    const served = new Set<string>();
    const stop = startNightly({
      jobsDir: dir,
      wanted: (slug) => served.has(slug),
      onLog: (l) => log.push(l),
      runJob: async (job) => void started.push(job.slug),
      schedule: cron.schedule,
    });
    // Every job is scheduled: a model loaded on demand later gets its track too; one line sums them up.
    expect([...cron.fires.keys()]).toEqual([`track ${SLUG}`, `track ${OTHER_SLUG}`]);
    expect(log.filter((l) => l.includes("scheduled"))).toEqual([
      `track: 2 job(s) scheduled from ${dir}, the first ${SLUG}'s at 2026-11-24T02:17:00.000Z; each runs only when wanted`,
    ]);
    cron.fires.get(`track ${SLUG}`)!();
    await tick();
    expect(started).toEqual([]);
    expect(log).toContain(`track: ${SLUG}: not served since the server started; this one is skipped`);
    served.add(SLUG);
    cron.fires.get(`track ${SLUG}`)!();
    cron.fires.get(`track ${OTHER_SLUG}`)!();
    await tick();
    expect(started).toEqual([SLUG]);
    await stop();
  });

  it("says why it schedules nothing: no job for the named models, or no model named", async () => {
    const log: string[] = [];
    await startNightly({ jobsDir: dir, slugs: ["no-such-model"], onLog: (l) => log.push(l), runJob: async () => {} })();
    await startNightly({ jobsDir: dir, slugs: [], onLog: (l) => log.push(l), runJob: async () => {} })();
    expect(log.filter((l) => l.startsWith("track: no jobs"))).toEqual([
      `track: no jobs to schedule for no-such-model in ${dir}`,
      `track: no jobs to schedule (the server names no model at startup) in ${dir}`,
    ]);
  });

  it("uses node-cron by default", async () => {
    const log: string[] = [];
    const stop = startNightly({ jobsDir: dir, slugs: [SLUG], onLog: (l) => log.push(l), runJob: async () => {} });
    expect(log.find((l) => l.startsWith(`track: ${SLUG}: scheduled`))).toMatch(/\(next \d{4}-\d\d-\d\dT\d\d:17:00\.000Z\)$/);
    await stop();
  });
});

describe("spawnTrackRun", () => {
  let home: string;
  beforeEach(() => (home = mkdtempSync(join(tmpdir(), "kiln-spawn-"))));
  afterEach(() => rmSync(home, { recursive: true, force: true }));

  it("passes the process's output on and resolves when it exits 0", async () => {
    const lines: string[] = [];
    const command = { file: process.execPath, args: ["-e", "console.log('a'); console.error('b')"] };
    await spawnTrackRun(testJob(), new AbortController().signal, { home, onLog: (l) => lines.push(l), command });
    expect(lines.sort()).toEqual(["track: a", "track: b"]);
  });

  it("marks what a crashed process left running as failed with its exit status", async () => {
    const db = openDatabase({ home });
    // What the child would have written before dying: a row under a pid that is gone by the time it is checked.
    startCandidate(db, { runId: "r", slug: SLUG, settings: DEFAULT_SETTINGS, change: "", machine: { pid: 2 ** 22 + 7 } });
    db.close();
    const command = { file: process.execPath, args: ["-e", "process.exit(3)"] };
    await expect(spawnTrackRun(testJob(), new AbortController().signal, { home, command })).rejects.toThrow(`kiln track run ${SLUG}: exit code 3`);
    const after = openDatabase({ home });
    expect(listCandidates(after, SLUG)[0]).toMatchObject({ verdict: "failed", reason: "the track process ended (exit code 3) while this was being measured" });
    after.close();
  });

  it("stops the process with SIGTERM when aborted", async () => {
    const stop = new AbortController();
    const command = { file: process.execPath, args: ["-e", "setInterval(() => {}, 1000)"] };
    const running = spawnTrackRun(testJob(), stop.signal, { home, command });
    setTimeout(() => stop.abort(), 200);
    await expect(running).rejects.toThrow(`kiln track run ${SLUG}: signal SIGTERM`);
  });
});
