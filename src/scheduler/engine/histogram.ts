/** The one histogram kiln keeps: fixed upper bounds, observed values counted per bucket. */

/** A cumulative histogram: `counts[i]` observations were <= `bounds[i]`; the last count is +Inf. */
export interface HistogramSnapshot {
  bounds: readonly number[];
  /** Cumulative counts, one per bound plus one for +Inf (Prometheus `le` buckets). */
  counts: number[];
  sum: number;
  count: number;
}

export class Histogram {
  private readonly counts: number[];
  private sum = 0;
  private count = 0;

  /** @param bounds bucket upper bounds, ascending (the +Inf bucket is implicit). */
  constructor(readonly bounds: readonly number[]) {
    this.counts = new Array<number>(bounds.length + 1).fill(0);
  }

  observe(value: number): void {
    let i = 0;
    while (i < this.bounds.length && value > this.bounds[i]) i++;
    this.counts[i]++;
    this.sum += value;
    this.count++;
  }

  snapshot(): HistogramSnapshot {
    let running = 0;
    return { bounds: this.bounds, counts: this.counts.map((c) => (running += c)), sum: this.sum, count: this.count };
  }
}
