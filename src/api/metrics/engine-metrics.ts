/**
 * The scheduler's own statistics on GET /metrics: read from each serving model's
 * `engine.stats.snapshot()` at scrape time, one `model` label per model. Engines without stats
 * (the serial engine) report none of these series.
 */
import type { EngineStatsSnapshot, HistogramSnapshot } from "../../scheduler/engine-stats.js";
import type { ModelRegistry } from "../../scheduler/model-registry.js";
import { escapeLabel, formatValue } from "./prometheus.js";

/** One model's engine statistics, as scraped. */
export interface EngineSnapshot {
  model: string;
  stats: EngineStatsSnapshot;
}

/** Reads the snapshots when called (once per scrape). */
export type EngineSnapshotSource = () => EngineSnapshot[];

/** The snapshots of every serving model whose engine keeps stats. */
export function engineSnapshots(models: ModelRegistry): EngineSnapshot[] {
  return models.all().flatMap((s) => {
    const stats = s.status === "serving" ? s.model.engine.stats : undefined;
    return stats ? [{ model: s.slug, stats: stats.snapshot() }] : [];
  });
}

type Kind = "gauge" | "counter" | "histogram";

interface Family {
  name: string;
  help: string;
  kind: Kind;
  /** A scalar (gauge, counter) or a histogram, from one snapshot. */
  read: (s: EngineStatsSnapshot) => number | HistogramSnapshot;
}

const FAMILIES: Family[] = [
  { name: "kiln_running_sequences", kind: "gauge", help: "Sequences (choices) holding a KV slot, prefilling or decoding, by model.", read: (s) => s.running },
  { name: "kiln_waiting_sequences", kind: "gauge", help: "Sequences (choices) queued for a KV slot, by model.", read: (s) => s.waiting },
  { name: "kiln_kv_slots", kind: "gauge", help: "KV slots, the most sequences that run at once (--max-running), by model.", read: (s) => s.slots },
  { name: "kiln_engine_steps_total", kind: "counter", help: "Scheduler steps taken (one batched model call round each), by model.", read: (s) => s.steps },
  { name: "kiln_batch_size", kind: "histogram", help: "Sequences decoded per step (rows per decode batch), by model.", read: (s) => s.batchSize },
  { name: "kiln_prefill_tokens_per_step", kind: "histogram", help: "Prompt tokens computed per step (steps with prefill only), by model.", read: (s) => s.prefillTokens },
  { name: "kiln_queue_time_seconds", kind: "histogram", help: "Seconds a request waited from submission to its first KV slot, by model.", read: (s) => s.queueSeconds },
  {
    name: "kiln_prefix_cache_hit_tokens_total",
    kind: "counter",
    help: "Prompt tokens found in the prefix cache and copied instead of computed, by model (hit rate: divide by kiln_prefix_cache_lookup_tokens_total).",
    read: (s) => s.prefix.hitTokens,
  },
  { name: "kiln_prefix_cache_lookup_tokens_total", kind: "counter", help: "Prompt tokens looked up in the prefix cache, by model.", read: (s) => s.prefix.promptTokens },
];

const line = (name: string, labels: string, value: number) => `${name}{${labels}} ${formatValue(value)}\n`;

function renderHistogram(name: string, labels: string, h: HistogramSnapshot): string {
  let out = "";
  h.bounds.forEach((b, i) => (out += line(`${name}_bucket`, `${labels},le="${formatValue(b)}"`, h.counts[i])));
  out += line(`${name}_bucket`, `${labels},le="+Inf"`, h.counts[h.bounds.length] ?? h.count);
  out += line(`${name}_sum`, labels, h.sum);
  out += line(`${name}_count`, labels, h.count);
  return out;
}

/** The engine series in Prometheus text format; "" when no engine keeps stats. */
export function renderEngineMetrics(snapshots: EngineSnapshot[]): string {
  if (snapshots.length === 0) return "";
  let out = "";
  for (const f of FAMILIES) {
    out += `# HELP ${f.name} ${f.help}\n# TYPE ${f.name} ${f.kind}\n`;
    for (const { model, stats } of snapshots) {
      const labels = `model="${escapeLabel(model)}"`;
      const v = f.read(stats);
      out += typeof v === "number" ? line(f.name, labels, v) : renderHistogram(f.name, labels, v);
    }
  }
  return out;
}
