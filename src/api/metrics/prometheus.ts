/**
 * A minimal Prometheus registry: counters, gauges and histograms with labels, rendered in the
 * text exposition format (version 0.0.4). Enough for kiln's handful of series; no dependencies
 * beyond the scheduler's histogram, so the engine's histograms and these render alike.
 */
import { Histogram as SchedulerHistogram, type HistogramSnapshot } from "../../scheduler/index.js";

type Labels = Record<string, string>;

function labelKey(labels: Labels): string {
  return Object.keys(labels)
    .sort()
    .map((k) => `${k}="${escapeLabel(labels[k])}"`)
    .join(",");
}

export function escapeLabel(value: string): string {
  return value.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"');
}

export function series(name: string, key: string, value: number): string {
  return `${name}${key ? `{${key}}` : ""} ${formatValue(value)}`;
}

export function formatValue(v: number): string {
  if (v === Infinity) return "+Inf";
  if (v === -Infinity) return "-Inf";
  return Number.isNaN(v) ? "NaN" : String(v);
}

interface Metric {
  render(): string;
}

abstract class Base implements Metric {
  constructor(
    readonly name: string,
    readonly help: string,
    readonly type: "counter" | "gauge" | "histogram",
  ) {}
  protected header(): string {
    return `# HELP ${this.name} ${this.help.replace(/\\/g, "\\\\").replace(/\n/g, "\\n")}\n# TYPE ${this.name} ${this.type}\n`;
  }
  abstract render(): string;
}

export class Counter extends Base {
  private readonly values = new Map<string, number>();
  constructor(name: string, help: string) {
    super(name, help, "counter");
  }
  inc(labels: Labels = {}, by = 1): void {
    const key = labelKey(labels);
    this.values.set(key, (this.values.get(key) ?? 0) + by);
  }
  get(labels: Labels = {}): number {
    return this.values.get(labelKey(labels)) ?? 0;
  }
  render(): string {
    return this.header() + [...this.values].map(([k, v]) => series(this.name, k, v) + "\n").join("");
  }
}

/** A gauge read when scraped. */
export class Gauge extends Base {
  constructor(
    name: string,
    help: string,
    private readonly read: () => Array<{ labels: Labels; value: number }>,
  ) {
    super(name, help, "gauge");
  }
  render(): string {
    return (
      this.header() +
      this.read()
        .map(({ labels, value }) => series(this.name, labelKey(labels), value) + "\n")
        .join("")
    );
  }
}

/** A histogram per label set, each one of the scheduler's {@link SchedulerHistogram}s. */
export class Histogram extends Base {
  private readonly byLabels = new Map<string, SchedulerHistogram>();
  /** @param buckets upper bounds, ascending (the +Inf bucket is implicit). */
  constructor(
    name: string,
    help: string,
    private readonly buckets: readonly number[],
  ) {
    super(name, help, "histogram");
  }
  observe(value: number, labels: Labels = {}): void {
    const key = labelKey(labels);
    let histogram = this.byLabels.get(key);
    if (!histogram) this.byLabels.set(key, (histogram = new SchedulerHistogram(this.buckets)));
    histogram.observe(value);
  }
  render(): string {
    let out = this.header();
    for (const [key, histogram] of this.byLabels) out += renderHistogram(this.name, key, histogram.snapshot());
    return out;
  }
}

/**
 * The `_bucket`, `_sum` and `_count` series of one histogram. Every histogram on /metrics goes
 * through here, whoever keeps it.
 * @param labels the rendered label set (`model="x"`), or "" for none
 */
export function renderHistogram(name: string, labels: string, h: HistogramSnapshot): string {
  const le = (bound: string) => (labels ? `${labels},le="${bound}"` : `le="${bound}"`);
  let out = "";
  h.bounds.forEach((b, i) => (out += series(`${name}_bucket`, le(formatValue(b)), h.counts[i]) + "\n"));
  out += series(`${name}_bucket`, le("+Inf"), h.counts[h.bounds.length]) + "\n";
  out += series(`${name}_sum`, labels, h.sum) + "\n";
  out += series(`${name}_count`, labels, h.count) + "\n";
  return out;
}

export class Registry {
  private readonly metrics: Metric[] = [];
  register<M extends Metric>(metric: M): M {
    this.metrics.push(metric);
    return metric;
  }
  render(): string {
    return this.metrics.map((m) => m.render()).join("");
  }
}

export const PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";
