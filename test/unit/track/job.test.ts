/** Job files: the shipped ones load, and every mistake is named with its file and field. */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { listModels } from "../../../src/catalogue/catalogue.js";
import { JobError, jobsDir, loadJob, loadJobs, parseJob } from "../../../src/track/index.js";

const minimal = {
  slug: "smollm2-135m-instruct",
  schedule: "17 2 * * *",
  budgetMinutes: 30,
  quality: { maxKlDivergence: 0.03, maxPerplexityRatio: 1.02 },
  searchSpace: { prefillChunk: [128, 256] },
};

function problems(data: unknown, expectedSlug?: string): string[] {
  try {
    parseJob(data, "job.json", expectedSlug);
  } catch (err) {
    expect(err).toBeInstanceOf(JobError);
    return (err as JobError).problems;
  }
  return [];
}

describe("track jobs", () => {
  let dir: string;
  beforeEach(() => (dir = mkdtempSync(join(tmpdir(), "kiln-jobs-"))));
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it("loads the shipped job of the embedded model", () => {
    const { jobs, errors } = loadJobs(jobsDir({}));
    expect(errors).toEqual([]);
    const job = jobs.find((j) => j.slug === "smollm2-135m-instruct")!;
    expect(job).toMatchObject({ schedule: expect.any(String), threadBudget: 1, workload: { batchSizes: [1, 16] } });
    expect(Object.keys(job.searchSpace).sort()).toEqual([
      "accuracyLevel",
      "gateUp",
      "graphOptimizationLevel",
      "lmHead",
      "maxRunning",
      "minFold",
      "numerics",
      "prefillChunk",
      "stepTokens",
      "threads",
    ]);
  });

  it("ships one job for every text model of the catalogue, each firing at a time of its own", () => {
    const { jobs, errors } = loadJobs(jobsDir({}));
    expect(errors).toEqual([]);
    const textModels = listModels({ kind: "text" }).map((m) => m.slug);
    expect(jobs.map((j) => j.slug).sort()).toEqual(textModels.sort());
    expect(new Set(jobs.map((j) => j.schedule)).size).toBe(jobs.length);
    for (const job of jobs) {
      // The thread budget is among the thread counts tried, so a run measures at least one of them.
      expect(job.searchSpace.threads, job.slug).toContain(job.threadBudget);
      expect(job.budgetMinutes, job.slug).toBeGreaterThanOrEqual(job.candidateMinutes);
    }
  });

  it("fills in the defaults", () => {
    expect(parseJob(minimal, "job.json")).toEqual({
      ...minimal,
      candidateMinutes: 10,
      maxCandidates: 8,
      threadBudget: 1,
      quality: { ...minimal.quality, probeTokens: 256 },
      workload: { promptTokens: 512, contextTokens: 128, decodeTokens: 64, batchSizes: [1, 16], repeats: 3 },
      promotion: {
        metrics: ["decode_tokens_per_second", "prefill_tokens_per_second", "batch16_tokens_per_second"],
        minGain: 0.03,
        noiseFactor: 2,
        maxNoise: 0.25,
        remeasureEvery: 4,
      },
    });
  });

  it("names every problem with its field", () => {
    expect(problems({ ...minimal, schedule: "every night" })).toEqual([expect.stringMatching(/^schedule: not a cron expression/)]);
    expect(problems({ ...minimal, slug: "no-such-model" })).toEqual(["slug: unknown model no-such-model (see `kiln models`)"]);
    expect(problems({ ...minimal, slug: "whisper-tiny-en" })).toEqual(["slug: whisper-tiny-en is a transcription model; the track measures text models only"]);
    expect(problems({ ...minimal, budgetMinutes: -5, extra: 1 })).toEqual(["budgetMinutes: Too small: expected number to be >0", 'Unrecognized key: "extra"']);
    expect(problems({ ...minimal, searchSpace: { numerics: ["fast", "exact"], prefillChunk: [128, 128], cores: [2] } })).toEqual([
      'searchSpace.numerics[1]: Invalid option: expected one of "fast"|"llama.cpp"',
      "searchSpace.prefillChunk: values must be distinct",
      'searchSpace: Unrecognized key: "cores"',
    ]);
    expect(problems({ ...minimal, quality: { maxKlDivergence: 0.03 } })).toEqual([expect.stringMatching(/^quality\.maxPerplexityRatio: /)]);
    expect(problems({ ...minimal, workload: { batchSizes: [16] } })).toEqual(["workload.batchSizes: must include 1 (the single-stream decode)"]);
    expect(problems({ ...minimal, workload: { batchSizes: [1, 8] } })).toEqual([
      "promotion.metrics[2]: batch16_tokens_per_second is not measured (one of decode_tokens_per_second, prefill_tokens_per_second, ttft_ms, batch8_tokens_per_second)",
    ]);
    expect(problems(minimal, "smollm2-360m-instruct")).toEqual(["slug: smollm2-135m-instruct does not match the file name (smollm2-360m-instruct.json)"]);
  });

  it("reads files, saying which one is wrong, and keeps the good ones of a folder", () => {
    writeFileSync(join(dir, "smollm2-135m-instruct.json"), JSON.stringify(minimal));
    writeFileSync(join(dir, "smollm2-360m-instruct.json"), "{ not json");
    writeFileSync(join(dir, "notes.txt"), "ignored");
    const { jobs, errors } = loadJobs(dir);
    expect(jobs.map((j) => j.slug)).toEqual(["smollm2-135m-instruct"]);
    expect(errors).toHaveLength(1);
    expect(errors[0].message).toMatch(new RegExp(`^${join(dir, "smollm2-360m-instruct.json")}: not JSON: `));
    expect(() => loadJob(join(dir, "qwen2-5-0-5b-instruct.json"))).toThrow(`${join(dir, "qwen2-5-0-5b-instruct.json")}: no such job file`);
    expect(loadJobs(join(dir, "missing"))).toEqual({ jobs: [], errors: [] });
  });

  it("takes the folder from KILN_JOBS", () => {
    expect(jobsDir({ KILN_JOBS: dir })).toBe(dir);
    expect(jobsDir({})).toMatch(/compiler-jobs$/);
  });
});
