/** `kiln track`, `kiln tracks`, `kiln promote`, `kiln rollback` and `kiln compiler`: arguments, output, records (no model). */
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { openDatabase } from "../../../src/catalogue/db.js";
import { currentPromotion } from "../../../src/catalogue/promotions.js";
import compiler from "../../../src/cli/commands/compiler.js";
import promote from "../../../src/cli/commands/promote.js";
import rollback from "../../../src/cli/commands/rollback.js";
import serve from "../../../src/cli/commands/serve.js";
import track from "../../../src/cli/commands/track.js";
import tracks from "../../../src/cli/commands/tracks.js";
import { main } from "../../../src/cli/kiln.js";
import { runTrack } from "../../../src/track/index.js";
import { kilnBin } from "../../../src/track/nightly.js";
import { fakeMeasurer, SLUG, testJob } from "../track/fakes.js";
import { capture } from "./capture.js";

let home: string;
let saved: { home?: string; jobs?: string };
beforeEach(() => {
  saved = { home: process.env.KILN_HOME, jobs: process.env.KILN_JOBS };
  home = mkdtempSync(join(tmpdir(), "kiln-track-cli-"));
  process.env.KILN_HOME = home;
  delete process.env.KILN_JOBS;
});
afterEach(() => {
  process.env.KILN_HOME = saved.home;
  if (saved.jobs === undefined) delete process.env.KILN_JOBS;
  else process.env.KILN_JOBS = saved.jobs;
  rmSync(home, { recursive: true, force: true });
});

const minimalJob = { slug: SLUG, budgetMinutes: 5, quality: { maxKlDivergence: 0.03, maxPerplexityRatio: 1.02 }, searchSpace: { prefillChunk: [128, 256] } };

async function usage(command: { run(argv: string[], io: ReturnType<typeof capture>["io"]): Promise<number> }, argv: string[]): Promise<string> {
  const c = capture();
  expect(await command.run(argv, c.io)).toBe(2);
  return c.out.stderr.split("\n")[0];
}

/** A compiled artifact as far as the CLI looks: its folder and manifest. */
function fakeArtifact(id: string, slug = SLUG): void {
  const dir = join(home, "artifacts", slug, id);
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, "manifest.json"),
    JSON.stringify({ id, slug, choices: [{ what: "options", choice: '{"accuracyLevel":0,"numerics":"fast"}', exact: true, why: "" }] }),
  );
}

/** Two track runs' records in $KILN_HOME's database (a fake measurer; the second run promotes). */
async function seedRuns(): Promise<void> {
  const db = openDatabase();
  await runTrack(testJob({ maxCandidates: 1 }), { db, measurer: fakeMeasurer() });
  await runTrack(testJob({ maxCandidates: 3 }), {
    db,
    measurer: fakeMeasurer((s) => (s.prefillChunk === 128 ? { metrics: { prefill_tokens_per_second: 1000, decode_tokens_per_second: 110 } } : {})),
  });
  db.close();
}

describe("kiln track", () => {
  it("checks its arguments", async () => {
    expect(await usage(track, [])).toBe("kiln track: which subcommand? (run <slug>)");
    expect(await usage(track, ["start", SLUG])).toBe("kiln track: unknown subcommand start (only run)");
    expect(await usage(track, ["run"])).toBe("kiln track: which model? (a slug with a job in compiler-jobs/)");
    expect(await usage(track, ["run", "no-such-model"])).toMatch(/^kiln track: unknown model/);
    expect(await usage(track, ["run", SLUG, "extra"])).toBe("kiln track: unexpected argument extra");
    expect(await usage(track, ["run", SLUG, "--budget-minutes", "0"])).toBe('kiln track: --budget-minutes needs a number from 0.1 to 1440 (got "0")');
    expect(await usage(track, ["run", SLUG, "--threads", "0"])).toBe('kiln track: --threads needs an integer from 1 to 256 (got "0")');
    const help = capture();
    expect(await track.run(["--help"], help.io)).toBe(0);
    expect(help.out.stdout).toMatch(/^Usage: kiln track run <slug> \[options\]/);
    for (const option of ["--budget-minutes <minutes>", "--threads N", "--max-candidates N", "--jobs <dir>", "--json"])
      expect(help.out.stdout).toContain(option);
  });

  it("fails, naming the file, when the model has no job", async () => {
    process.env.KILN_JOBS = home;
    const c = capture();
    expect(await track.run(["run", SLUG], c.io)).toBe(1);
    expect(c.out.stderr).toBe(`kiln track: ${join(home, `${SLUG}.json`)}: no such job file\n`);
  });
});

describe("kiln tracks", () => {
  it("says when there is nothing yet, and checks its arguments", async () => {
    const c = capture();
    expect(await tracks.run([], c.io)).toBe(0);
    expect(c.out.stdout).toBe("no track records yet (run one with `kiln track run <slug>`)\n");
    expect(await usage(tracks, ["no-such-model"])).toMatch(/^kiln tracks: unknown model/);
    expect(await usage(tracks, [SLUG, "x"])).toBe("kiln tracks: unexpected argument x");
    const json = capture();
    expect(await tracks.run([SLUG, "--json"], json.io)).toBe(0);
    expect(JSON.parse(json.out.stdout)).toEqual({ slug: SLUG, current: null, candidates: [] });
  });

  it("prints each measurement, what serves and the trend; JSON in the documented shape", async () => {
    await seedRuns();
    const c = capture();
    expect(await tracks.run([SLUG], c.io)).toBe(0);
    const lines = c.out.stdout.trimEnd().split("\n");
    expect(lines[0]).toBe(SLUG);
    expect(lines[1]).toMatch(/^WHEN \(UTC\)\s+ARTIFACT\s+DEVICE\s+CHANGE\s+DECODE\s+PREFILL\s+BATCH16\s+TTFT ms\s+RSS MB\s+KL\s+PPL x\s+VERDICT\s+REASON$/);
    // Each run's two repeats, and the incumbent measured again beside each of the second run's two winners.
    expect(lines.filter((l) => l.includes("(incumbent)"))).toHaveLength(6);
    expect(lines.find((l) => l.includes("prefillChunk 256→128") && l.includes("promoted"))).toMatch(
      /acc4\s+cpu\s+prefillChunk 256→128\s+110\.0\s+1000\s+400\.0\s+50\s+500\s+0\.0100\s+1\.0010\s+promoted\s+faster: decode \+10\.0%/,
    );
    expect(lines.at(-2)).toMatch(/^serving: acc4 \(smollm2-135m-instruct-acc4\), promoted \d{4}-.*: track: prefillChunk 256→128: /);
    expect(lines.at(-1)).toMatch(
      /^trend, decode tok\/s serving after each run \(\* promoted\): ▁█ \d\d-\d\d 100\.0 → \d\d-\d\d 110\.0\* \(\+10\.0% over 2 runs\)$/,
    );

    const json = capture();
    expect(await tracks.run(["--json"], json.io)).toBe(0);
    const [history] = JSON.parse(json.out.stdout);
    expect(history.slug).toBe(SLUG);
    expect(history.current).toMatchObject({ artifact: `${SLUG}-acc4`, settings: { prefillChunk: 128 }, reason: expect.stringMatching(/^track: /) });
    expect(history.candidates.map((c: { verdict: string }) => c.verdict)).toEqual([
      "incumbent",
      "incumbent",
      "rejected",
      "incumbent",
      "incumbent",
      "promoted",
      "incumbent",
      "rejected",
      "rejected",
      "incumbent",
    ]);
    expect(Object.keys(history.candidates[0].metrics)).toEqual([
      "decode_tokens_per_second",
      "prefill_tokens_per_second",
      "batch16_tokens_per_second",
      "ttft_ms",
      "peak_rss_mb",
    ]);
    expect(Object.keys(history.candidates[0].quality)).toEqual(["kl_divergence", "perplexity_ratio"]);
    const limited = capture();
    await tracks.run([SLUG, "--json", "--limit", "2"], limited.io);
    expect(JSON.parse(limited.out.stdout).candidates).toHaveLength(2);
  });
});

describe("kiln promote and kiln rollback", () => {
  it("promote checks the model and the artifact", async () => {
    expect(await usage(promote, [SLUG])).toBe("kiln promote: needs a model slug and an artifact id");
    expect(await usage(promote, ["no-such-model", "x"])).toMatch(/^kiln promote: unknown model/);
    expect(await usage(promote, ["whisper-tiny-en", "x"])).toBe("kiln promote: whisper-tiny-en is a transcription model; only text models are promoted");
    expect(await usage(promote, [SLUG, "abc123"])).toMatch(/^kiln promote: no compiled artifact abc123 of smollm2-135m-instruct in /);
    fakeArtifact(`${SLUG}-aaa111`);
    fakeArtifact(`${SLUG}-bbb111`);
    expect(await usage(promote, [SLUG, "111"])).toBe(`kiln promote: 111 names several artifacts of ${SLUG}: ${SLUG}-aaa111, ${SLUG}-bbb111`);
  });

  it("promotes by id or by its hash, with the settings the track measured it with, and rolls back to what served before", async () => {
    await seedRuns();
    fakeArtifact(`${SLUG}-acc4`);
    fakeArtifact(`${SLUG}-acc0`);
    const c = capture();
    expect(await promote.run([SLUG, "acc0", "--reason", "try float activations"], c.io)).toBe(0);
    expect(c.out.stdout).toMatch(
      new RegExp(
        `^${SLUG}: serving ${SLUG}-acc0 with graphOptimizationLevel=all, threads=2, prefillChunk=128, maxRunning=16, stepTokens=512 \\(before: ${SLUG}-acc4\\)\\n$`,
      ),
    );
    const db = openDatabase();
    expect(currentPromotion(db, SLUG)).toMatchObject({ artifactId: `${SLUG}-acc0`, reason: "try float activations", quality: { kl_divergence: 0.01 } });

    const back = capture();
    expect(await rollback.run([SLUG], back.io)).toBe(0);
    expect(back.out.stdout).toMatch(new RegExp(`^${SLUG}: rolled back ${SLUG}-acc0; serving ${SLUG}-acc4 \\(promoted .*: track: prefillChunk 256→128: `));
    expect(currentPromotion(db, SLUG)!.artifactId).toBe(`${SLUG}-acc4`);
    expect(await rollback.run([SLUG], capture().io)).toBe(0);
    expect(currentPromotion(db, SLUG)).toBeNull();
    db.close();
    const none = capture();
    expect(await rollback.run([SLUG], none.io)).toBe(1);
    expect(none.out.stderr).toBe(`kiln rollback: ${SLUG} has no promoted artifact (the default compile serves)\n`);
    expect(await usage(rollback, [])).toBe("kiln rollback: which model?");
    expect(await usage(rollback, ["no-such-model"])).toMatch(/^kiln rollback: unknown model/);
  });

  it("promotes an artifact the track never measured with the default settings", async () => {
    fakeArtifact(`${SLUG}-ccc222`);
    const c = capture();
    expect(await promote.run([SLUG, `${SLUG}-ccc222`], c.io)).toBe(0);
    expect(c.out.stdout).toBe(`${SLUG}: serving ${SLUG}-ccc222 with the default settings (before: the default compile)\n`);
  });
});

describe("kiln compiler and kiln serve --no-nightly", () => {
  it("are declared with their options", async () => {
    expect(await usage(compiler, ["--model", "no-such-model"])).toMatch(/^kiln compiler: unknown model/);
    expect(compiler.help).toMatch(/^Usage: kiln compiler \[options\]/);
    for (const option of ["-m, --model <slug>", "--threads N", "--jobs <dir>"]) expect(compiler.help).toContain(option);
    expect(serve.help).toContain("--no-nightly");
  });

  it("kiln compiler skips, as each fires, the job of a model this machine does not hold", async () => {
    const jobs = join(home, "jobs");
    mkdirSync(jobs);
    writeFileSync(join(jobs, `${SLUG}.json`), JSON.stringify({ ...minimalJob, schedule: "* * * * * *" }));
    const child = spawn(process.execPath, [kilnBin(), "compiler", "--jobs", jobs], {
      env: { ...process.env, KILN_HOME: home },
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    const skipped = new Promise<void>((resolve) =>
      child.stderr.on("data", (chunk: Buffer) => {
        stderr += chunk.toString();
        if (stderr.includes("this one is skipped")) resolve();
      }),
    );
    const exited = new Promise<number | null>((resolve) => child.on("exit", resolve));
    await Promise.race([skipped, exited]);
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
    expect(stderr).toContain(`track: ${SLUG}: not on this machine (\`kiln pull\` it to track it); this one is skipped`);
    expect(stderr).not.toContain(`track: ${SLUG}: starting`);
  }, 30_000);

  it("are listed by kiln --help", async () => {
    const c = capture();
    expect(await main(["--help"], c.io)).toBe(0);
    for (const name of ["track", "tracks", "promote", "rollback", "compiler"]) expect(c.out.stdout).toMatch(new RegExp(`^  ${name} +\\S`, "m"));
  });
});
