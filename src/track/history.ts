/** A model's track as `kiln tracks` shows it: what serves now, every measurement, and the trend by run. */
import type { KilnDatabase } from "../catalogue/db.js";
import { currentPromotion } from "../catalogue/promotions.js";
import { listCandidates, type CandidateRecord, type Verdict } from "./records.js";
import { meanMetrics } from "./rule.js";

/** The figures `kiln tracks --json` reports for a measurement (null where not measured). */
export interface HistoryMetrics {
  decode_tokens_per_second: number | null;
  prefill_tokens_per_second: number | null;
  batch16_tokens_per_second: number | null;
  ttft_ms: number | null;
  peak_rss_mb: number | null;
}

export interface HistoryCandidate {
  artifact: string;
  created_at: string;
  settings: Record<string, unknown>;
  metrics: HistoryMetrics;
  quality: { kl_divergence: number | null; perplexity_ratio: number | null };
  verdict: Verdict;
  reason: string;
  /** How the settings differ from the incumbent's of that run ("" for the incumbent). */
  change: string;
  run: string;
}

export interface TrackHistory {
  slug: string;
  /** The promotion in service, or null when the default compile serves. */
  current: {
    artifact: string;
    settings: Record<string, unknown>;
    metrics: Record<string, unknown>;
    quality: Record<string, unknown>;
    reason: string;
    created_at: string;
  } | null;
  /** Oldest first. */
  candidates: HistoryCandidate[];
}

/** One run's outcome: the decode rate of what served at its end (the promoted winner's, else the incumbent's). */
export interface TrendPoint {
  run: string;
  started_at: string;
  decode_tokens_per_second: number;
  promoted: boolean;
}

const figure = (value: unknown) => (typeof value === "number" && Number.isFinite(value) ? value : null);

function toCandidate(r: CandidateRecord): HistoryCandidate {
  return {
    artifact: r.artifactId,
    created_at: r.startedAt,
    settings: { ...r.settings },
    metrics: {
      decode_tokens_per_second: figure(r.metrics.decode_tokens_per_second),
      prefill_tokens_per_second: figure(r.metrics.prefill_tokens_per_second),
      batch16_tokens_per_second: figure(r.metrics.batch16_tokens_per_second),
      ttft_ms: figure(r.metrics.ttft_ms),
      peak_rss_mb: figure(r.metrics.peak_rss_mb),
    },
    quality: { kl_divergence: figure(r.quality?.kl_divergence), perplexity_ratio: figure(r.quality?.perplexity_ratio) },
    verdict: r.verdict,
    reason: r.reason,
    change: r.change,
    run: r.runId,
  };
}

/** The track of `slug`; `limit` keeps the newest measurements. */
export function trackHistory(db: KilnDatabase, slug: string, limit?: number): TrackHistory {
  const current = currentPromotion(db, slug);
  return {
    slug,
    current: current && {
      artifact: current.artifactId,
      settings: current.settings,
      metrics: current.metrics,
      quality: current.quality,
      reason: current.reason,
      created_at: current.createdAt,
    },
    candidates: listCandidates(db, slug, limit).map(toCandidate),
  };
}

/** Per run, oldest first: the decode rate that served at its end. Runs whose incumbent was never measured are left out. */
export function trend(db: KilnDatabase, slug: string): TrendPoint[] {
  const byRun = new Map<string, CandidateRecord[]>();
  for (const r of listCandidates(db, slug)) byRun.set(r.runId, [...(byRun.get(r.runId) ?? []), r]);
  const points: TrendPoint[] = [];
  for (const [run, rows] of byRun) {
    const promoted = rows.filter((r) => r.verdict === "promoted").at(-1);
    const incumbent = rows.filter((r) => r.verdict === "incumbent");
    const decode = promoted ? promoted.metrics.decode_tokens_per_second : meanMetrics(incumbent.map((r) => r.metrics)).decode_tokens_per_second;
    if (!Number.isFinite(decode)) continue;
    points.push({ run, started_at: rows[0].startedAt, decode_tokens_per_second: decode, promoted: promoted !== undefined });
  }
  return points;
}

const BARS = "▁▂▃▄▅▆▇█";

/** Values as a line of block characters, lowest to highest. */
export function sparkline(values: readonly number[]): string {
  if (values.length === 0) return "";
  const lo = Math.min(...values);
  const hi = Math.max(...values);
  return values.map((v) => BARS[hi === lo ? 3 : Math.round(((v - lo) / (hi - lo)) * (BARS.length - 1))]).join("");
}
