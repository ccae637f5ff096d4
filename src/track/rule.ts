/**
 * The promotion rule: a candidate replaces the incumbent only when it is faster by more than the
 * measurement noise on some metric, slower beyond it on none, and within the job's quality budget.
 */
import { LOWER_IS_BETTER, type PromotionPolicy, type QualityBudget } from "./job.js";

/** Speed figures of one measurement, by metric name (`decode_tokens_per_second`, `ttft_ms`, ...). */
export type SpeedMetrics = Record<string, number>;

/** Agreement with the exact-numerics reference on the held-out text. */
export interface QualityMetrics {
  /** Mean KL divergence of the reference's next-token distribution from the candidate's, in nats. */
  kl_divergence: number;
  /** The candidate's perplexity on the held-out text over the reference's. */
  perplexity_ratio: number;
  /** Share of positions where both rank the same token first. */
  top1_agreement?: number;
  /** Tokens of the held-out text scored. */
  tokens?: number;
}

/** The policy as the rule applies it; `maxRegression` is for tests and operators, not job files. */
/** How candidates are judged: the job's promotion policy less its measuring schedule (`remeasureEvery`). */
export interface PromotionRule extends Omit<PromotionPolicy, "remeasureEvery"> {
  /** Largest relative loss on a promotion metric a winner may have. Default: the larger of `minGain` and that metric's spread (once the noise, not twice). */
  maxRegression?: number;
}

export interface Judgement {
  wins: boolean;
  /** Sum of the relative gains over the promotion metrics (losses count negative): ranks winners. */
  score: number;
  /** One line: the gains and thresholds that decided it, and the quality against the budget. */
  reason: string;
}

/** Relative spread of two repeats of the same measurement, per metric: |a - b| / mean. */
export function relativeSpread(a: SpeedMetrics, b: SpeedMetrics): Record<string, number> {
  const out: Record<string, number> = {};
  for (const key of Object.keys(a)) {
    const x = a[key];
    const y = b[key];
    if (Number.isFinite(x) && Number.isFinite(y) && x + y !== 0) out[key] = Math.abs(x - y) / Math.abs((x + y) / 2);
  }
  return out;
}

/**
 * The relative spread of several measurements of one thing, per metric: (max - min) / mean over
 * those with a finite value in every sample (two samples: {@link relativeSpread}).
 */
export function sampleSpread(samples: readonly SpeedMetrics[]): Record<string, number> {
  const out: Record<string, number> = {};
  if (samples.length < 2) return out;
  for (const key of Object.keys(samples[0])) {
    const values = samples.map((s) => s[key]);
    if (!values.every((v) => Number.isFinite(v))) continue;
    const mean = values.reduce((a, b) => a + b, 0) / values.length;
    if (mean !== 0) out[key] = (Math.max(...values) - Math.min(...values)) / Math.abs(mean);
  }
  return out;
}

/** The per-metric mean of several measurements (metrics present in all of them). */
export function meanMetrics(samples: readonly SpeedMetrics[]): SpeedMetrics {
  const out: SpeedMetrics = {};
  if (samples.length === 0) return out;
  for (const key of Object.keys(samples[0])) {
    const values = samples.map((s) => s[key]);
    if (values.every((v) => Number.isFinite(v))) out[key] = values.reduce((a, b) => a + b, 0) / values.length;
  }
  return out;
}

/**
 * The per-metric median of several passes of one measurement (the mean of the middle two for an
 * even count; metrics present and finite in all of them), robust to one disturbed pass.
 */
export function medianMetrics(samples: readonly SpeedMetrics[]): SpeedMetrics {
  const out: SpeedMetrics = {};
  if (samples.length === 0) return out;
  for (const key of Object.keys(samples[0])) {
    const values = samples.map((s) => s[key]);
    if (!values.every((v) => Number.isFinite(v))) continue;
    values.sort((a, b) => a - b);
    const mid = values.length >> 1;
    out[key] = values.length % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
  }
  return out;
}

/** The larger spread per metric (noise estimates from several repeat pairs). */
export function widerSpread(a: Record<string, number>, b: Record<string, number>): Record<string, number> {
  const out = { ...a };
  for (const [key, value] of Object.entries(b)) out[key] = Math.max(out[key] ?? 0, value);
  return out;
}

/** Relative gain of `candidate` over `incumbent` on `metric`: positive is better, whichever way the metric points. */
export function gain(metric: string, incumbent: number, candidate: number): number {
  const change = (candidate - incumbent) / incumbent;
  return LOWER_IS_BETTER.has(metric) ? -change : change;
}

/** The relative gain `metric` must exceed to count as a win: the minimum, or noiseFactor times the incumbent's spread if larger. */
export function winThreshold(metric: string, rule: PromotionRule, spread: Record<string, number>): number {
  return rule.noiseFactor > 0 ? Math.max(rule.minGain, rule.noiseFactor * (spread[metric] ?? 0)) : rule.minGain;
}

const pct = (x: number) => `${x >= 0 ? "+" : "−"}${(Math.abs(x) * 100).toFixed(1)}%`;
const short = (metric: string) => metric.replace(/_tokens_per_second$/, "").replace(/_ms$/, "");

/** Whether the quality is within the budget, and if not, why. */
export function qualityProblem(
  quality: QualityMetrics | null | undefined,
  budget: Pick<QualityBudget, "maxKlDivergence" | "maxPerplexityRatio">,
): string | null {
  if (!quality || !Number.isFinite(quality.kl_divergence) || !Number.isFinite(quality.perplexity_ratio)) return "no quality measurement";
  if (quality.kl_divergence > budget.maxKlDivergence) return `KL ${quality.kl_divergence.toPrecision(3)} over the budget of ${budget.maxKlDivergence}`;
  if (quality.perplexity_ratio > budget.maxPerplexityRatio)
    return `perplexity ×${quality.perplexity_ratio.toFixed(4)} over the budget of ×${budget.maxPerplexityRatio}`;
  return null;
}

/**
 * Judges a candidate against the incumbent. `spread` is the incumbent's relative repeat spread per
 * metric (its noise). A winner gains more than its threshold on at least one promotion metric
 * (`winThreshold`), loses more than max(minGain, spread) on none, and keeps quality within `budget`.
 */
export function judge(
  incumbent: { metrics: SpeedMetrics; spread: Record<string, number> },
  candidate: { metrics: SpeedMetrics; quality: QualityMetrics | null },
  rule: PromotionRule,
  budget: Pick<QualityBudget, "maxKlDivergence" | "maxPerplexityRatio">,
): Judgement {
  const wins: string[] = [];
  const losses: string[] = [];
  const flat: string[] = [];
  let score = 0;
  for (const metric of rule.metrics) {
    const before = incumbent.metrics[metric];
    const after = candidate.metrics[metric];
    if (!Number.isFinite(before) || !Number.isFinite(after) || before === 0) continue;
    const g = gain(metric, before, after);
    const threshold = winThreshold(metric, rule, incumbent.spread);
    // Stricter on losses than on gains: a loss within the noise may be noise, one beyond it is not.
    const allowedLoss = rule.maxRegression ?? Math.max(rule.minGain, incumbent.spread[metric] ?? 0);
    score += g;
    const text = `${short(metric)} ${pct(g)}`;
    if (g > threshold) wins.push(`${text} (threshold ${pct(threshold)})`);
    else if (-g > allowedLoss) losses.push(`${text} (beyond ${pct(-allowedLoss)})`);
    else flat.push(`${text} (needs ${pct(threshold)})`);
  }
  const q = candidate.quality;
  const qualityText = q ? `KL ${q.kl_divergence.toPrecision(3)}, perplexity ×${q.perplexity_ratio.toFixed(4)}` : "";
  const problem = qualityProblem(q, budget);
  if (problem) return { wins: false, score, reason: `outside the quality budget: ${problem}` };
  if (losses.length > 0) return { wins: false, score, reason: `slower: ${losses.join(", ")}` };
  if (wins.length === 0) return { wins: false, score, reason: `no gain beyond noise: ${flat.join(", ") || "nothing comparable measured"}` };
  return {
    wins: true,
    score,
    reason: `faster: ${wins.join(", ")}${flat.length > 0 ? `; ${flat.map((f) => f.replace(/ \(needs .*\)$/, "")).join(", ")}` : ""}; ${qualityText}`,
  };
}

/** The promotion metrics whose spread is past `rule.maxNoise`, as "decode 61.6%". */
export function tooNoisy(spread: Record<string, number>, rule: Pick<PromotionRule, "metrics" | "maxNoise">): string[] {
  return rule.metrics.filter((m) => (spread[m] ?? 0) > rule.maxNoise).map((m) => `${short(m)} ${(spread[m] * 100).toFixed(1)}%`);
}

/** Relative gains of a candidate over the incumbent, one per pass of the two measured alternately, by metric. */
export type PairedGains = Record<string, number[]>;

/** The median of finite values (mean of the middle two for an even count); NaN for none. */
function median(values: readonly number[]): number {
  const xs = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b);
  if (xs.length === 0) return NaN;
  const mid = xs.length >> 1;
  return xs.length % 2 ? xs[mid] : (xs[mid - 1] + xs[mid]) / 2;
}

/**
 * The standard error of the median of `values`, from their median absolute deviation: MAD x 1.4826
 * estimates the standard deviation of normal noise, and the median's error is 1.2533 times the
 * mean's (sigma / sqrt(n)).
 */
export function medianStandardError(values: readonly number[]): number {
  const xs = values.filter((v) => Number.isFinite(v));
  if (xs.length < 2) return Infinity;
  const m = median(xs);
  const mad = median(xs.map((v) => Math.abs(v - m)));
  return (1.2533 * 1.4826 * mad) / Math.sqrt(xs.length);
}

/**
 * Judges a candidate by its gains over the incumbent measured beside it, pass for pass (the two
 * loaded at once and run alternately, so a change in the machine's speed moves both alike). Per
 * metric, the gain is the median of the passes' gains and the noise its standard error
 * ({@link medianStandardError}). A winner gains more than max(minGain, noiseFactor x noise) (minGain
 * alone when noiseFactor is 0, as {@link winThreshold}) on at
 * least one promotion metric, loses more than max(minGain, noise) on none, and keeps quality within
 * `budget`. Metrics with fewer than two passes measured count for nothing.
 */
export function judgePaired(
  gains: PairedGains,
  quality: QualityMetrics | null,
  rule: PromotionRule,
  budget: Pick<QualityBudget, "maxKlDivergence" | "maxPerplexityRatio">,
): Judgement {
  const wins: string[] = [];
  const losses: string[] = [];
  const flat: string[] = [];
  let score = 0;
  const passes = Math.max(0, ...rule.metrics.map((m) => (gains[m] ?? []).filter((v) => Number.isFinite(v)).length));
  for (const metric of rule.metrics) {
    const values = (gains[metric] ?? []).filter((v) => Number.isFinite(v));
    if (values.length < 2) continue;
    const g = median(values);
    const noise = medianStandardError(values);
    const threshold = rule.noiseFactor > 0 ? Math.max(rule.minGain, rule.noiseFactor * noise) : rule.minGain;
    const allowedLoss = rule.maxRegression ?? Math.max(rule.minGain, noise);
    score += g;
    const text = `${short(metric)} ${pct(g)}`;
    if (g > threshold) wins.push(`${text} (threshold ${pct(threshold)})`);
    else if (-g > allowedLoss) losses.push(`${text} (beyond ${pct(-allowedLoss)})`);
    else flat.push(`${text} (needs ${pct(threshold)})`);
  }
  const problem = qualityProblem(quality, budget);
  if (problem) return { wins: false, score, reason: `outside the quality budget: ${problem}` };
  const over = `beside the incumbent, median of ${passes} alternating passes`;
  if (losses.length > 0) return { wins: false, score, reason: `slower ${over}: ${losses.join(", ")}` };
  if (wins.length === 0) return { wins: false, score, reason: `no gain beyond noise ${over}: ${flat.join(", ") || "nothing comparable measured"}` };
  const q = quality!;
  return {
    wins: true,
    score,
    reason: `faster ${over}: ${wins.join(", ")}${flat.length > 0 ? `; ${flat.map((f) => f.replace(/ \(needs .*\)$/, "")).join(", ")}` : ""}; KL ${q.kl_divergence.toPrecision(3)}, perplexity ×${q.perplexity_ratio.toFixed(4)}`,
  };
}

/** Per-pass gains (see {@link gain}) of each pass's candidate figures over the incumbent's of the same pass, by metric. */
export function pairedGains(passes: ReadonlyArray<{ incumbent: SpeedMetrics; candidate: SpeedMetrics }>, metrics: readonly string[]): PairedGains {
  const out: PairedGains = {};
  for (const metric of metrics) {
    out[metric] = passes.map(({ incumbent, candidate }) => {
      const before = incumbent[metric];
      const after = candidate[metric];
      return Number.isFinite(before) && Number.isFinite(after) && before !== 0 ? gain(metric, before, after) : NaN;
    });
  }
  return out;
}
