/**
 * A minimal Prometheus registry: counters, gauges and histograms with labels, rendered in the
 * text exposition format (version 0.0.4). Enough for kiln's handful of series; no dependencies.
 */
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

function series(name: string, key: string, value: number): string {
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
    return this.header() + this.read().map(({ labels, value }) => series(this.name, labelKey(labels), value) + "\n").join("");
  }
}

export class Histogram extends Base {
  private readonly data = new Map<string, { counts: number[]; sum: number; count: number }>();
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
    let d = this.data.get(key);
    if (!d) this.data.set(key, (d = { counts: new Array(this.buckets.length).fill(0), sum: 0, count: 0 }));
    for (let i = 0; i < this.buckets.length; i++) if (value <= this.buckets[i]) d.counts[i]++;
    d.sum += value;
    d.count++;
  }
  /** Number of observations and their sum. */
  get(labels: Labels = {}): { count: number; sum: number } {
    const d = this.data.get(labelKey(labels));
    return { count: d?.count ?? 0, sum: d?.sum ?? 0 };
  }
  render(): string {
    let out = this.header();
    for (const [key, d] of this.data) {
      const le = (bound: string) => (key ? `${key},le="${bound}"` : `le="${bound}"`);
      this.buckets.forEach((b, i) => (out += series(`${this.name}_bucket`, le(String(b)), d.counts[i]) + "\n"));
      out += series(`${this.name}_bucket`, le("+Inf"), d.count) + "\n";
      out += series(`${this.name}_sum`, key, d.sum) + "\n";
      out += series(`${this.name}_count`, key, d.count) + "\n";
    }
    return out;
  }
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
