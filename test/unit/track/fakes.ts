/** A measurer without a model, and jobs for the track's unit tests. */
import {
  parseJob,
  type Measurement,
  type MeasureRequest,
  type Measurer,
  type PairedMeasurement,
  type TrackJob,
  type TrackSettings,
} from "../../../src/track/index.js";

export const SLUG = "smollm2-135m-instruct";
export const OTHER_SLUG = "smollm2-360m-instruct";

/** A job with small numbers; `overrides` replace top-level fields. */
export function testJob(overrides: Record<string, unknown> = {}): TrackJob {
  return parseJob(
    {
      slug: SLUG,
      schedule: "17 2 * * *",
      budgetMinutes: 30,
      candidateMinutes: 5,
      maxCandidates: 10,
      threadBudget: 2,
      quality: { maxKlDivergence: 0.03, maxPerplexityRatio: 1.02 },
      workload: { promptTokens: 64, contextTokens: 16, decodeTokens: 8, batchSizes: [1, 16] },
      promotion: {
        metrics: ["decode_tokens_per_second", "prefill_tokens_per_second", "batch16_tokens_per_second"],
        minGain: 0.03,
        noiseFactor: 2,
        maxNoise: 0.25,
      },
      searchSpace: { accuracyLevel: [4, 0], prefillChunk: [128, 256, 512] },
      ...overrides,
    },
    "test job",
  );
}

export type Outcome = Partial<Measurement> | Error | "hang" | "slow";

/**
 * Measures by table: `outcome(settings, call)` says what a measurement of these settings gives
 * (figures over the defaults, an error to throw, "hang" never to settle unless aborted). Records
 * every request. The default figures: decode 100, prefill 800, batch16 400, TTFT 50 ms, KL 0.01.
 */
export function fakeMeasurer(
  outcome: (settings: TrackSettings, call: number) => Outcome = () => ({}),
): Measurer & { requests: MeasureRequest[]; released: number } {
  const requests: MeasureRequest[] = [];
  const self = {
    requests,
    released: 0,
    machine: () => ({ cpu: "fake", cores: 2 }),
    compileSettingsOf: (artifactId: string) => (artifactId.endsWith("acc0") ? { accuracyLevel: 0 } : { accuracyLevel: 4 }),
    async measure(request: MeasureRequest): Promise<Measurement> {
      requests.push(request);
      const result = outcome(request.settings, requests.length);
      if (result instanceof Error) throw result;
      if (result === "hang") {
        await new Promise((_, reject) => {
          const release = () => {
            self.released++;
            reject(request.signal.reason);
          };
          if (request.signal.aborted) release();
          else request.signal.addEventListener("abort", release, { once: true });
        });
      }
      const artifactId = request.artifactId ?? `${SLUG}-${request.settings.accuracyLevel === 0 ? "acc0" : "acc4"}`;
      const fig = result === "hang" || result === "slow" ? {} : result;
      return {
        artifactId: fig.artifactId ?? artifactId,
        metrics: {
          decode_tokens_per_second: 100,
          prefill_tokens_per_second: 800,
          batch16_tokens_per_second: 400,
          ttft_ms: 50,
          peak_rss_mb: 500,
          ...fig.metrics,
        },
        quality: { kl_divergence: 0.01, perplexity_ratio: 1.001, ...fig.quality },
        device: fig.device ?? request.settings.device,
      };
    },
  };
  return self;
}

/**
 * {@link fakeMeasurer} that can also measure side by side: `pair(settings)` gives the candidate's
 * and the incumbent's decode figures per pass (other metrics at the defaults). Records every pair's
 * candidate settings.
 */
export function pairedFakeMeasurer(
  outcome: (settings: TrackSettings, call: number) => Outcome,
  pair: (settings: TrackSettings) => { incumbent: number[]; candidate: number[]; batch16?: number[] },
): ReturnType<typeof fakeMeasurer> & Required<Pick<Measurer, "measurePair">> & { pairs: TrackSettings[] } {
  const base = fakeMeasurer(outcome);
  const pairs: TrackSettings[] = [];
  const figures = (decode: number, batch16 = 400) => ({
    decode_tokens_per_second: decode,
    prefill_tokens_per_second: 800,
    batch16_tokens_per_second: batch16,
    ttft_ms: 50,
  });
  return Object.assign(base, {
    pairs,
    async measurePair(incumbent: MeasureRequest, candidate: Omit<MeasureRequest, "signal">): Promise<PairedMeasurement> {
      pairs.push(candidate.settings);
      const p = pair(candidate.settings);
      const passes = p.incumbent.map((decode, i) => ({ incumbent: figures(decode), candidate: figures(p.candidate[i], p.batch16?.[i]) }));
      const quality = { kl_divergence: 0.01, perplexity_ratio: 1.001 };
      const medianOf = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
      return {
        incumbent: { artifactId: incumbent.artifactId ?? `${SLUG}-acc4`, metrics: figures(medianOf(p.incumbent)), quality },
        candidate: { artifactId: `${SLUG}-acc4`, metrics: figures(medianOf(p.candidate)), quality },
        passes,
      };
    },
  });
}
