/**
 * Track jobs as data: `compiler-jobs/<slug>.json`, one per model, validated here. A job says when
 * the model's track runs, for how long, what it may try, how it is measured and what quality it
 * must keep; the code that runs it is the same for every model.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import cron from "node-cron";
import { z } from "zod";
import { getModel, hasModel } from "../catalogue/catalogue.js";
import {
  GATE_UP_LAYOUTS,
  GPU_ACTIVATIONS,
  GPU_ATTENTION,
  GPU_BLOCK_SIZES,
  GPU_SHAPES,
  GPU_WEIGHT_BITS,
  GRAPH_OPTIMIZATION_LEVELS,
  LM_HEAD_WEIGHTS,
  MIN_FOLDS,
} from "./settings.js";

/** Speed metrics a promotion may be decided on; `batch<N>_tokens_per_second` for each batch size N > 1. */
export const BASE_METRICS = ["decode_tokens_per_second", "prefill_tokens_per_second", "ttft_ms"] as const;
/** Metrics where less is better (the rest: more is better). */
export const LOWER_IS_BETTER: ReadonlySet<string> = new Set(["ttft_ms", "peak_rss_mb"]);

const positiveInt = (max: number) => z.number().int().min(1).max(max);
const distinct = <T extends z.ZodType>(item: T) =>
  z
    .array(item)
    .min(1)
    .refine((values) => new Set(values as unknown[]).size === values.length, "values must be distinct");

const searchSpaceSchema = z
  .object({
    accuracyLevel: distinct(z.number().int().min(0).max(4)).optional(),
    numerics: distinct(z.enum(["fast", "llama.cpp"])).optional(),
    minFold: distinct(z.enum(MIN_FOLDS)).optional(),
    lmHead: distinct(z.enum(LM_HEAD_WEIGHTS)).optional(),
    gateUp: distinct(z.enum(GATE_UP_LAYOUTS)).optional(),
    threads: distinct(positiveInt(256)).optional(),
    graphOptimizationLevel: distinct(z.enum(GRAPH_OPTIMIZATION_LEVELS)).optional(),
    prefillChunk: distinct(positiveInt(8192)).optional(),
    maxRunning: distinct(positiveInt(256)).optional(),
    stepTokens: distinct(positiveInt(65_536)).optional(),
  })
  .strict();

/**
 * What the GPU lane may try around the WebGPU incumbent: the GPU compile and runtime settings, and
 * the serving settings. Measured only where a hardware WebGPU adapter is present.
 */
const gpuSearchSpaceSchema = z
  .object({
    weightBits: distinct(z.union(GPU_WEIGHT_BITS.map((b) => z.literal(b)) as [z.ZodLiteral<4>, z.ZodLiteral<8>, z.ZodLiteral<16>])).optional(),
    blockSize: distinct(z.union(GPU_BLOCK_SIZES.map((b) => z.literal(b)) as [z.ZodLiteral<32>, z.ZodLiteral<64>, z.ZodLiteral<128>])).optional(),
    activations: distinct(z.enum(GPU_ACTIVATIONS)).optional(),
    attention: distinct(z.enum(GPU_ATTENTION)).optional(),
    shapes: distinct(z.enum(GPU_SHAPES)).optional(),
    graphCapture: distinct(z.boolean()).optional(),
    prefillChunk: distinct(positiveInt(8192)).optional(),
    maxRunning: distinct(positiveInt(256)).optional(),
    stepTokens: distinct(positiveInt(65_536)).optional(),
  })
  .strict();

const jobSchema = z
  .object({
    slug: z.string(),
    /** Cron expression (node-cron, local time): when the track runs. */
    schedule: z.string(),
    /** Minutes one run may take, all measurements included. */
    budgetMinutes: z
      .number()
      .positive()
      .max(24 * 60),
    /** Minutes one measurement may take before it is recorded as failed. Default 10. */
    candidateMinutes: z
      .number()
      .positive()
      .max(24 * 60)
      .default(10),
    /** Most candidates measured in one run (the incumbent's repeats not counted). Default 8. */
    maxCandidates: z.number().int().min(0).max(1000).default(8),
    /** onnxruntime threads a measurement may use, whatever the candidate's own `threads`. Default 1. */
    threadBudget: positiveInt(256).default(1),
    quality: z
      .object({
        /** Largest mean KL divergence (nats) of next-token distributions from the exact-numerics reference. */
        maxKlDivergence: z.number().min(0),
        /** Largest perplexity on the held-out text, as a multiple of the reference's. */
        maxPerplexityRatio: z.number().min(1),
        /** Held-out tokens the probe scores; a value past the text's length (537 tokens for SmolLM2) scores all of it. Default 256. */
        probeTokens: z.number().int().min(16).max(4096).default(256),
      })
      .strict(),
    workload: z
      .object({
        /** Prompt tokens of the prefill measurement (an empty cache). Default 512. */
        promptTokens: z.number().int().min(8).max(32_768).default(512),
        /** Prompt tokens before decoding starts (the context decode runs at). Default 128. */
        contextTokens: z.number().int().min(1).max(32_768).default(128),
        /** Tokens generated per sequence in the decode measurements. Default 64. */
        decodeTokens: z.number().int().min(2).max(4096).default(64),
        /** Sequences decoding together; 1 is the single-stream decode and must be there. Default [1, 16]. */
        batchSizes: distinct(positiveInt(256))
          .refine((sizes) => sizes.includes(1), "must include 1 (the single-stream decode)")
          .default([1, 16]),
        /**
         * Times the whole workload runs within one measurement; each metric is the median of its runs,
         * so that one disturbed run (another process, live traffic) does not decide a verdict. Default 3.
         */
        repeats: z.number().int().min(1).max(25).default(3),
      })
      .strict()
      .default({ promptTokens: 512, contextTokens: 128, decodeTokens: 64, batchSizes: [1, 16], repeats: 3 }),
    promotion: z
      .object({
        /** Metrics a candidate may win on; it must also lose on none of them beyond the threshold. */
        metrics: z.array(z.string()).min(1).default(["decode_tokens_per_second", "prefill_tokens_per_second", "batch16_tokens_per_second"]),
        /** Smallest relative gain that counts (0.03 = 3%). Default 0.03. */
        minGain: z.number().min(0).max(10).default(0.03),
        /** A gain must exceed this many times the incumbent's relative repeat spread. Default 2. */
        noiseFactor: z.number().min(0).max(100).default(2),
        /**
         * Largest relative spread of the incumbent's repeats, on a promotion metric, that a run still
         * judges by (0.25 = 25%); beyond it the machine is too busy to tell anything. Default 0.25.
         */
        maxNoise: z.number().positive().max(10).default(0.25),
        /**
         * The incumbent is measured again after this many candidates (0: never), and the spread of
         * all its measurements becomes the noise: a machine that drifts during a run widens the
         * thresholds instead of making later candidates look slower or faster. Default 4.
         */
        remeasureEvery: z.number().int().min(0).max(1000).default(4),
      })
      .strict()
      .default({
        metrics: ["decode_tokens_per_second", "prefill_tokens_per_second", "batch16_tokens_per_second"],
        minGain: 0.03,
        noiseFactor: 2,
        maxNoise: 0.25,
        remeasureEvery: 4,
      }),
    searchSpace: searchSpaceSchema,
    /** The GPU lane's search space; absent: the track measures on the CPU only. */
    gpuSearchSpace: gpuSearchSpaceSchema.optional(),
  })
  .strict()
  .superRefine((job, ctx) => {
    const check = cron.validateDetailed(job.schedule);
    if (!check.valid) {
      const why = check.errors.map((e) => `${e.field}: ${e.message}`).join("; ");
      ctx.addIssue({ code: "custom", path: ["schedule"], message: `not a cron expression (${why || "unparsable"})` });
    }
    if (!hasModel(job.slug)) ctx.addIssue({ code: "custom", path: ["slug"], message: `unknown model ${job.slug} (see \`kiln models\`)` });
    else if (getModel(job.slug).kind !== "text")
      ctx.addIssue({ code: "custom", path: ["slug"], message: `${job.slug} is a ${getModel(job.slug).kind} model; the track measures text models only` });
    if (job.workload.contextTokens + job.workload.decodeTokens > 32_768)
      ctx.addIssue({ code: "custom", path: ["workload"], message: "contextTokens + decodeTokens must stay within 32768" });
    const measured = new Set<string>([...BASE_METRICS, ...job.workload.batchSizes.filter((b) => b > 1).map(batchMetric)]);
    job.promotion.metrics.forEach((metric, i) => {
      if (!measured.has(metric))
        ctx.addIssue({ code: "custom", path: ["promotion", "metrics", i], message: `${metric} is not measured (one of ${[...measured].join(", ")})` });
    });
  });

export type TrackJob = z.output<typeof jobSchema>;
/** A lane's search space: the CPU's (`searchSpace`) or the GPU's (`gpuSearchSpace`). */
export type SearchSpace = z.output<typeof searchSpaceSchema> & z.output<typeof gpuSearchSpaceSchema>;
export type Workload = TrackJob["workload"];
export type QualityBudget = TrackJob["quality"];
export type PromotionPolicy = TrackJob["promotion"];

/** The metric name of N sequences decoding together. */
export function batchMetric(size: number): string {
  return `batch${size}_tokens_per_second`;
}

/** A job file that cannot be used: the message names the file and every problem, one per line. */
export class JobError extends Error {
  constructor(
    readonly file: string,
    readonly problems: string[],
  ) {
    super(`${file}: ${problems.length === 1 ? problems[0] : `\n  ${problems.join("\n  ")}`}`);
    this.name = "JobError";
  }
}

/** Checks a parsed job (`source` names it in errors); `expectedSlug` is the slug its file name says. */
export function parseJob(data: unknown, source: string, expectedSlug?: string): TrackJob {
  const result = jobSchema.safeParse(data);
  if (!result.success) {
    throw new JobError(
      source,
      result.error.issues.map((issue) => {
        const at =
          issue.path.length > 0
            ? issue.path
                .map((p) => (typeof p === "number" ? `[${p}]` : `.${String(p)}`))
                .join("")
                .replace(/^\./, "")
            : "";
        return at ? `${at}: ${issue.message}` : issue.message;
      }),
    );
  }
  if (expectedSlug !== undefined && result.data.slug !== expectedSlug)
    throw new JobError(source, [`slug: ${result.data.slug} does not match the file name (${expectedSlug}.json)`]);
  return result.data;
}

/** Reads and checks one job file (named `<slug>.json`). */
export function loadJob(file: string): TrackJob {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    throw new JobError(file, [(err as NodeJS.ErrnoException).code === "ENOENT" ? "no such job file" : (err as Error).message]);
  }
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch (err) {
    throw new JobError(file, [`not JSON: ${(err as Error).message}`]);
  }
  return parseJob(data, file, basename(file, ".json"));
}

/** Every job of a folder: the good ones, and the errors of the others (one bad file stops no other model). */
export function loadJobs(dir: string = jobsDir()): { jobs: TrackJob[]; errors: JobError[] } {
  const jobs: TrackJob[] = [];
  const errors: JobError[] = [];
  if (!existsSync(dir)) return { jobs, errors };
  for (const name of readdirSync(dir)
    .filter((n) => n.endsWith(".json"))
    .sort()) {
    try {
      jobs.push(loadJob(join(dir, name)));
    } catch (err) {
      errors.push(err instanceof JobError ? err : new JobError(join(dir, name), [String(err)]));
    }
  }
  return { jobs, errors };
}

export const JOBS_FOLDER = "compiler-jobs";

/** Where the job files are: `$KILN_JOBS` when set, else `compiler-jobs/` at the package root. */
export function jobsDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.KILN_JOBS) return env.KILN_JOBS;
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, JOBS_FOLDER)) && existsSync(join(dir, "package.json"))) return join(dir, JOBS_FOLDER);
    const parent = dirname(dir);
    if (parent === dir) return join(process.cwd(), JOBS_FOLDER);
    dir = parent;
  }
}

/** The job file of a model in `dir`. */
export function jobPath(slug: string, dir: string = jobsDir()): string {
  return join(dir, `${slug}.json`);
}
