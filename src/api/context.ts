/** What the routes share: the models, metrics, usage records and the server's lifecycle. */
import type { ModelRegistry } from "../scheduler/index.js";
import type { KilnMetrics } from "./metrics/kiln-metrics.js";
import type { SseOptions } from "./sse.js";
import type { UsageRecorder } from "./usage.js";

/** The server's lifecycle flag: once draining, new requests get 503 while running ones finish. */
export class Lifecycle {
  private isDraining = false;
  get draining(): boolean {
    return this.isDraining;
  }
  startDraining(): void {
    this.isDraining = true;
  }
}

export interface ApiContext {
  models: ModelRegistry;
  metrics: KilnMetrics;
  lifecycle: Lifecycle;
  /** Records the usage of each generation (cloud mode); absent = not recorded. */
  usage?: UsageRecorder;
  /** Unix seconds when the server started (the `created` of models not in service). */
  startedAt: number;
  sse: SseOptions;
}
