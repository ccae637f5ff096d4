/**
 * The real measurer: compiles a candidate's artifact (or reuses it), serves it in this process the
 * way `kiln serve` would (worker thread, batch engine) with the candidate's settings and runs the
 * job's fixed speed workload through the engine; then probes its quality against the model's
 * exact-numerics reference (`numerics: "llama.cpp"`) on the held-out text, running the model
 * session directly on this thread, one position per call (the graph returns the last position's
 * logits only).
 */
import { setMaxListeners } from "node:events";
import { existsSync } from "node:fs";
import { cpus, totalmem } from "node:os";
import { join } from "node:path";
import { createRequire } from "node:module";
import { artifactsDir, kilnHome } from "../catalogue/paths.js";
import { readManifest, readTokenizerSpec } from "../runtime/artifact/index.js";
import { LoadedModel } from "../runtime/loaded-model.js";
import { Tokenizer } from "../runtime/text/index.js";
import { TextSession } from "../runtime/text-worker/session.js";
import { serveLoadedModel, type GenerationRequest, type ServedModel } from "../scheduler/index.js";
import { provisionArtifact } from "../provision/index.js";
import { batchMetric, type Workload } from "./job.js";
import { PROBE_TEXT, PROBE_TEXT_SHA256 } from "./probe-text.js";
import { medianMetrics, type QualityMetrics, type SpeedMetrics } from "./rule.js";
import type { Measurement, MeasureRequest, Measurer, PairedMeasurement } from "./run.js";
import { probeOnDevice, topTokensKl } from "./device-quality.js";
import {
  compileOptionsOf,
  compileOptionsOfManifest,
  compileSettingsOfOptions,
  deviceActivationsOf,
  deviceAttentionOf,
  DEFAULT_SETTINGS,
  type GraphOptimizationLevel,
  type TrackSettings,
  UNSUPPORTED_GPU_SETTINGS,
} from "./settings.js";

export interface ModelMeasurerOptions {
  slug: string;
  /** kiln's store. Default `kilnHome()`. */
  home?: string;
  workload: Workload;
  /** Held-out tokens the quality probe scores (at most the probe text's length). */
  probeTokens: number;
  log?: (line: string) => void;
}

/** Next-token log-probabilities of the reference at every probe position, and its perplexity. */
interface Reference {
  artifactId: string;
  tokens: number[];
  vocab: number;
  /** [positions x vocab] log-softmax rows. */
  logprobs: Float32Array;
  meanNll: number;
}

const now = () => performance.now();
const yieldToTimers = () => new Promise((resolve) => setImmediate(resolve));

/** log-softmax of `logits` into `out`. */
function logSoftmax(logits: Float32Array, out: Float32Array): void {
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) if (logits[i] > max) max = logits[i];
  let sum = 0;
  for (let i = 0; i < logits.length; i++) sum += Math.exp(logits[i] - max);
  const lse = max + Math.log(sum);
  for (let i = 0; i < logits.length; i++) out[i] = logits[i] - lse;
}

function argmax(a: Float32Array): number {
  let best = 0;
  for (let i = 1; i < a.length; i++) if (a[i] > a[best]) best = i;
  return best;
}

/** Positions per probe call: whole-chunk prefill with every position's logits (64 x vocab floats at a time). */
const PROBE_CHUNK = 64;

/**
 * Runs the held-out tokens through an artifact in chunks, asking for every position's logits, and
 * hands each position's next-token log-probabilities to `row`. onnxruntime runs on this thread, so
 * it gives timers a turn between chunks: a time slice can then abort it.
 */
async function probe(
  dir: string,
  tokens: number[],
  threads: number,
  level: GraphOptimizationLevel,
  signal: AbortSignal,
  row: (position: number, logprobs: Float32Array) => void,
): Promise<void> {
  const session = await TextSession.load(dir, { threads, slots: 1, graphOptimizationLevel: level });
  try {
    const vocab = session.vocab;
    const logprobs = new Float32Array(vocab);
    const scored = tokens.length - 1; // the last token is only ever a target
    for (let from = 0; from < scored; from += PROBE_CHUNK) {
      const seq = Math.min(PROBE_CHUNK, scored - from);
      const logits = await session.forward(0, 1, seq, tokens.slice(from, from + seq), true);
      for (let s = 0; s < seq; s++) {
        logSoftmax(logits.subarray(s * vocab, (s + 1) * vocab), logprobs);
        row(from + s, logprobs);
      }
      await yieldToTimers();
      signal.throwIfAborted();
    }
  } finally {
    await session.release();
  }
}

/** Reads every event of a stream; returns the times (performance.now) of its token events. */
async function tokenTimes(stream: AsyncIterable<{ type: string }>): Promise<number[]> {
  const times: number[] = [];
  for await (const event of stream) if (event.type === "delta") times.push(now());
  return times;
}

/**
 * The speed workload on a served model: a warm-up; one `promptTokens` prompt into an empty cache
 * (prefill tokens/s); one sequence decoding `decodeTokens` after `contextTokens` of prompt (decode
 * tokens/s between its first and last token, and TTFT); then for each batch size N > 1, N such
 * sequences at once (tokens/s counted from the moment the last of them has its first token, so
 * their prompts' prefill is left out). Greedy, with the end-of-generation tokens banned so every
 * sequence generates the same count. Prefix reuse is off, so no prompt is served from the cache.
 * The whole pass runs `workload.repeats` times and each metric is the median of its passes.
 */
async function speedWorkload(
  served: ServedModel,
  stopTokenIds: readonly number[],
  source: readonly number[],
  workload: Workload,
  signal: AbortSignal,
): Promise<SpeedMetrics> {
  const runs: SpeedMetrics[] = [];
  for (let i = 0; i < workload.repeats; i++) runs.push(await speedWorkloadOnce(served, stopTokenIds, source, workload, signal));
  return medianMetrics(runs);
}

/** One pass of {@link speedWorkload}. */
async function speedWorkloadOnce(
  served: ServedModel,
  stopTokenIds: readonly number[],
  source: readonly number[],
  workload: Workload,
  signal: AbortSignal,
): Promise<SpeedMetrics> {
  const sampling = { temperature: 0, logit_bias: Object.fromEntries(stopTokenIds.map((id) => [String(id), -100])) };
  // Distinct prompts (different offsets into the text), so that no two share a cached prefix.
  const prompt = (length: number, offset: number) => Array.from({ length }, (_, i) => source[(offset * 37 + i) % source.length]);
  const run = (request: GenerationRequest) => tokenTimes(served.engine.submit(request, signal));
  // Every concurrent request listens on the one signal.
  setMaxListeners(Math.max(...workload.batchSizes) + 8, signal);
  const metrics: SpeedMetrics = {};

  await run({ promptIds: prompt(16, 0), maxTokens: 4, sampling });
  signal.throwIfAborted();

  let t0 = now();
  const [firstToken] = await run({ promptIds: prompt(workload.promptTokens, 1), maxTokens: 1, sampling });
  metrics.prefill_tokens_per_second = workload.promptTokens / ((firstToken - t0) / 1000);
  signal.throwIfAborted();

  t0 = now();
  const single = await run({ promptIds: prompt(workload.contextTokens, 2), maxTokens: workload.decodeTokens, sampling });
  metrics.ttft_ms = single[0] - t0;
  metrics.decode_tokens_per_second = (single.length - 1) / ((single.at(-1)! - single[0]) / 1000);
  signal.throwIfAborted();

  for (const size of workload.batchSizes.filter((b) => b > 1)) {
    const all = await Promise.all(
      Array.from({ length: size }, (_, i) => run({ promptIds: prompt(workload.contextTokens, 3 + i), maxTokens: workload.decodeTokens, sampling })),
    );
    const from = Math.max(...all.map((times) => times[0]));
    const to = Math.max(...all.map((times) => times.at(-1)!));
    const inWindow = all.reduce((n, times) => n + times.filter((t) => t > from).length, 0);
    metrics[batchMetric(size)] = to > from ? inWindow / ((to - from) / 1000) : NaN;
    signal.throwIfAborted();
  }
  return metrics;
}

/** A model served for measuring, and how to free it. */
interface Served {
  served: ServedModel;
  close(): Promise<void>;
}

/** Serves the artifact in `dir` the way `kiln serve` would, with the candidate's settings and prefix reuse off. */
async function serve(dir: string, settings: TrackSettings, threads: number): Promise<Served> {
  const loaded = await LoadedModel.load(dir, {
    device: settings.device,
    threads,
    slots: settings.maxRunning,
    graphOptimizationLevel: settings.graphOptimizationLevel,
  });
  try {
    const served = serveLoadedModel(loaded, {
      maxRunning: settings.maxRunning,
      prefillChunk: settings.prefillChunk,
      stepTokens: settings.stepTokens,
      prefixReuse: "off",
      maxWaiting: 4096,
    });
    // Closing the served model closes the loaded one.
    return { served, close: () => served.close() };
  } catch (err) {
    await loaded.close();
    throw err;
  }
}

/** Samples this process's RSS until stopped; returns the peak in bytes. */
function rssSampler(): { stop(): number } {
  let peak = process.memoryUsage.rss();
  const timer = setInterval(() => (peak = Math.max(peak, process.memoryUsage.rss())), 20);
  return {
    stop() {
      clearInterval(timer);
      return Math.max(peak, process.memoryUsage.rss());
    },
  };
}

function onnxruntimeVersion(): string {
  try {
    return (createRequire(import.meta.url)("onnxruntime-node/package.json") as { version: string }).version;
  } catch {
    return "unknown";
  }
}

/** The quality of a GPU artifact against the reference: perplexity and top-1 exact, KL over its top tokens (`device-quality.ts`). */
async function deviceQualityOf(dir: string, ref: Reference, threads: number, signal: AbortSignal): Promise<QualityMetrics> {
  let kl = 0;
  let nll = 0;
  let agree = 0;
  await probeOnDevice(dir, ref.tokens, threads, signal, (p, scores) => {
    const row = ref.logprobs.subarray(p * ref.vocab, (p + 1) * ref.vocab);
    kl += topTokensKl(row, scores);
    nll -= scores.target;
    if (scores.topIds[0] === argmax(row)) agree++;
  });
  const positions = ref.tokens.length - 1;
  return {
    kl_divergence: kl / positions,
    perplexity_ratio: Math.exp(nll / positions - ref.meanNll),
    top1_agreement: agree / positions,
    tokens: positions,
  };
}

/** A {@link Measurer} that loads the real model (see the module comment). */
export function createModelMeasurer(options: ModelMeasurerOptions): Measurer {
  const home = options.home ?? kilnHome();
  const { slug, workload } = options;
  const log = options.log ?? (() => {});
  let reference: Reference | null = null;
  /** Quality depends on the graph only: one probe per artifact and optimization level. */
  const qualityCache = new Map<string, QualityMetrics>();

  const artifactDir = (artifactId: string) => join(artifactsDir(slug, home), artifactId);

  /** The speed workload's prompts are drawn from the probe text, tokenized by the artifact's own tokenizer. */
  const probeSource = (dir: string) => Tokenizer.fromSpec(readTokenizerSpec(dir)).encode(PROBE_TEXT, { addSpecial: false });

  async function artifactFor(settings: TrackSettings, artifactId: string | undefined): Promise<string> {
    if (artifactId && existsSync(join(artifactDir(artifactId), "manifest.json"))) return artifactDir(artifactId);
    // Only these settings' defaults can be measured (UNSUPPORTED_GPU_SETTINGS says why).
    const unsupported = [...UNSUPPORTED_GPU_SETTINGS].filter(([name]) => settings[name] !== DEFAULT_SETTINGS[name]);
    if (unsupported.length > 0)
      throw new Error(
        `the ${settings.device} target takes only ${unsupported.map(([n]) => `${n} ${DEFAULT_SETTINGS[n]}`).join(", ")}: ${unsupported.map(([, why]) => why).join("; ")}`,
      );
    const compiled = await provisionArtifact(slug, {
      home,
      compile: compileOptionsOf(settings),
      device: settings.device,
      deviceActivations: deviceActivationsOf(settings),
      deviceAttention: deviceAttentionOf(settings),
    });
    return compiled.dir;
  }

  async function referenceFor(threads: number, signal: AbortSignal): Promise<Reference> {
    if (reference) return reference;
    const compiled = await provisionArtifact(slug, { home, compile: { numerics: "llama.cpp" } });
    const tokenizer = Tokenizer.fromSpec(readTokenizerSpec(compiled.dir));
    const tokens = tokenizer.encode(PROBE_TEXT, { addSpecial: true }).slice(0, options.probeTokens + 1);
    const vocab = compiled.manifest.shape.vocab;
    const logprobs = new Float32Array((tokens.length - 1) * vocab);
    let nll = 0;
    const t0 = now();
    await probe(compiled.dir, tokens, threads, "all", signal, (p, row) => {
      logprobs.set(row, p * vocab);
      nll -= row[tokens[p + 1]];
    });
    log(
      `${slug}: reference ${compiled.manifest.id} (numerics llama.cpp) probed on ${tokens.length - 1} held-out tokens in ${((now() - t0) / 1000).toFixed(1)} s`,
    );
    reference = { artifactId: compiled.manifest.id, tokens, vocab, logprobs, meanNll: nll / (tokens.length - 1) };
    return reference;
  }

  async function qualityOf(dir: string, artifactId: string, settings: TrackSettings, threads: number, signal: AbortSignal): Promise<QualityMetrics> {
    const key = `${artifactId}|${settings.graphOptimizationLevel}`;
    const cached = qualityCache.get(key);
    if (cached) return cached;
    const ref = await referenceFor(threads, signal);
    if (settings.device === "webgpu") {
      const quality = await deviceQualityOf(dir, ref, threads, signal);
      qualityCache.set(key, quality);
      return quality;
    }
    let kl = 0;
    let nll = 0;
    let agree = 0;
    await probe(dir, ref.tokens, threads, settings.graphOptimizationLevel, signal, (p, row) => {
      const base = p * ref.vocab;
      let sum = 0;
      let refBest = 0;
      for (let i = 0; i < ref.vocab; i++) {
        const lp = ref.logprobs[base + i];
        sum += Math.exp(lp) * (lp - row[i]);
        if (lp > ref.logprobs[base + refBest]) refBest = i;
      }
      kl += sum;
      nll -= row[ref.tokens[p + 1]];
      if (argmax(row) === refBest) agree++;
    });
    const positions = ref.tokens.length - 1;
    const quality: QualityMetrics = {
      kl_divergence: Math.max(0, kl / positions),
      perplexity_ratio: Math.exp(nll / positions - ref.meanNll),
      top1_agreement: agree / positions,
      tokens: positions,
    };
    qualityCache.set(key, quality);
    return quality;
  }

  return {
    machine() {
      const cpu = cpus();
      return {
        cpu: cpu[0]?.model.trim() ?? "unknown",
        cores: cpu.length,
        memory_gb: Math.round((totalmem() / 2 ** 30) * 10) / 10,
        platform: `${process.platform}-${process.arch}`,
        node: process.version,
        onnxruntime: onnxruntimeVersion(),
        probe_text: PROBE_TEXT_SHA256,
      };
    },

    compileSettingsOf(artifactId) {
      try {
        const options = compileOptionsOfManifest(readManifest(artifactDir(artifactId)));
        return options && compileSettingsOfOptions(options);
      } catch {
        return null;
      }
    },

    async measure(request: MeasureRequest): Promise<Measurement> {
      const { settings, threads, signal } = request;
      const dir = await artifactFor(settings, request.artifactId);
      signal.throwIfAborted();
      // The reference first, so that its buffers are part of every measurement's RSS alike.
      await referenceFor(threads, signal);
      const manifest = readManifest(dir);
      const source = probeSource(dir);

      const before = process.memoryUsage.rss();
      const rss = rssSampler();
      const t0 = now();
      let model: Served | null = null;
      const metrics: SpeedMetrics = {};
      try {
        model = await serve(dir, settings, threads);
        const loadMs = now() - t0;
        Object.assign(metrics, await speedWorkload(model.served, manifest.stopTokenIds, source, workload, signal));
        metrics.load_ms = loadMs;
        const peak = rss.stop();
        metrics.peak_rss_mb = peak / 2 ** 20;
        metrics.model_rss_mb = (peak - before) / 2 ** 20;
      } finally {
        rss.stop();
        await model?.close();
      }
      signal.throwIfAborted();
      const quality = await qualityOf(dir, manifest.id, settings, threads, signal);
      return { artifactId: manifest.id, metrics, quality, device: manifest.device ?? "cpu" };
    },

    async measurePair(incumbentRequest: MeasureRequest, candidateRequest: Omit<MeasureRequest, "signal">): Promise<PairedMeasurement> {
      const { signal } = incumbentRequest;
      const requests = [incumbentRequest, candidateRequest];
      const dirs = [
        await artifactFor(incumbentRequest.settings, incumbentRequest.artifactId),
        await artifactFor(candidateRequest.settings, candidateRequest.artifactId),
      ];
      signal.throwIfAborted();
      await referenceFor(incumbentRequest.threads, signal);
      const manifests = dirs.map((dir) => readManifest(dir));
      const sources = dirs.map((dir) => probeSource(dir));
      const models: Served[] = [];
      const passes: PairedMeasurement["passes"] = [];
      try {
        for (let i = 0; i < 2; i++) models.push(await serve(dirs[i], requests[i].settings, requests[i].threads));
        // Twice the passes of one measurement, in the order ABBA ABBA ..., so that a steady drift
        // in the machine's speed favours neither.
        for (let pass = 0; pass < 2 * workload.repeats; pass++) {
          const order = pass % 2 === 0 ? [0, 1] : [1, 0];
          const figures: SpeedMetrics[] = [];
          for (const side of order) figures[side] = await speedWorkloadOnce(models[side].served, manifests[side].stopTokenIds, sources[side], workload, signal);
          passes.push({ incumbent: figures[0], candidate: figures[1] });
        }
      } finally {
        for (const model of models) await model.close();
      }
      signal.throwIfAborted();
      const [incumbent, candidate] = await Promise.all(
        [0, 1].map(
          async (side): Promise<Measurement> => ({
            artifactId: manifests[side].id,
            metrics: medianMetrics(passes.map((p) => (side === 0 ? p.incumbent : p.candidate))),
            quality: await qualityOf(dirs[side], manifests[side].id, requests[side].settings, requests[side].threads, signal),
          }),
        ),
      );
      return { incumbent, candidate, passes };
    },
  };
}
