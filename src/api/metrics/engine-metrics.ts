/**
 * The scheduler's own statistics on GET /metrics: read from each serving model's
 * `engine.stats.snapshot()` at scrape time, one `model` label per model. Models still loading (or
 * failed), and speech models (no batch engine), report none of these series.
 */
import type { EngineStatsSnapshot, HistogramSnapshot, ModelRegistry } from "../../scheduler/index.js";
import { escapeLabel, renderHistogram, series } from "./prometheus.js";

/** One model's engine statistics, as scraped. */
export interface EngineSnapshot {
  model: string;
  stats: EngineStatsSnapshot;
}

/** Reads the snapshots when called (once per scrape). */
export type EngineSnapshotSource = () => EngineSnapshot[];

/** The snapshots of every serving model's engine. */
export function engineSnapshots(models: ModelRegistry): EngineSnapshot[] {
  return models.servingText().map((m) => ({ model: m.slug, stats: m.engine.stats.snapshot() }));
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
  {
    name: "kiln_paused_sequences",
    kind: "gauge",
    help: "Sequences (choices) paused for a slow reader: they keep their KV slot but skip decode steps until their client catches up, by model.",
    read: (s) => s.paused,
  },
  { name: "kiln_kv_slots", kind: "gauge", help: "KV slots, the most sequences that run at once (--max-running), by model.", read: (s) => s.slots },
  { name: "kiln_engine_steps_total", kind: "counter", help: "Scheduler steps taken (one batched model call round each), by model.", read: (s) => s.steps },
  { name: "kiln_batch_size", kind: "histogram", help: "Sequences decoded per step (rows per decode batch), by model.", read: (s) => s.batchSize },
  {
    name: "kiln_prefill_tokens_per_step",
    kind: "histogram",
    help: "Prompt tokens computed per step (steps with prefill only), by model.",
    read: (s) => s.prefillTokens,
  },
  {
    name: "kiln_queue_time_seconds",
    kind: "histogram",
    help: "Seconds a request waited from submission to its first KV slot, by model.",
    read: (s) => s.queueSeconds,
  },
  {
    name: "kiln_prefix_cache_hit_tokens_total",
    kind: "counter",
    help: "Prompt tokens found in the prefix cache and copied instead of computed, by model (hit rate: divide by kiln_prefix_cache_lookup_tokens_total).",
    read: (s) => s.prefix.hitTokens,
  },
  {
    name: "kiln_prefix_cache_lookup_tokens_total",
    kind: "counter",
    help: "Prompt tokens looked up in the prefix cache, by model.",
    read: (s) => s.prefix.promptTokens,
  },
  {
    name: "kiln_draft_tokens_total",
    kind: "counter",
    help: "Prompt-lookup draft tokens checked (--draft-tokens), by model.",
    read: (s) => s.draftTokens,
  },
  {
    name: "kiln_constraint_compile_seconds",
    kind: "histogram",
    help: "Seconds each new constraint (JSON schema, tools, regex, grammar) took to compile on a grammar thread before its request was admitted, by model.",
    read: (s) => s.constraintCompileSeconds,
  },
  {
    name: "kiln_constraint_compiles_refused_total",
    kind: "counter",
    help: "Constraint compiles the engine refused, each failing its request, by model.",
    read: (s) => s.constraintCompilesRefused,
  },
  {
    name: "kiln_draft_accepted_tokens_total",
    kind: "counter",
    help: "Draft tokens the model confirmed, each a decode step saved, by model (acceptance rate: divide by kiln_draft_tokens_total).",
    read: (s) => s.draftTokensAccepted,
  },
];

/** The engine series in Prometheus text format; "" when no model is serving. */
export function renderEngineMetrics(snapshots: EngineSnapshot[]): string {
  if (snapshots.length === 0) return "";
  let out = "";
  for (const f of FAMILIES) {
    out += `# HELP ${f.name} ${f.help}\n# TYPE ${f.name} ${f.kind}\n`;
    for (const { model, stats } of snapshots) {
      const labels = `model="${escapeLabel(model)}"`;
      const v = f.read(stats);
      out += typeof v === "number" ? series(f.name, labels, v) + "\n" : renderHistogram(f.name, labels, v);
    }
  }
  return out;
}
