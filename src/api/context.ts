/** What the routes share: the models, metrics, usage records and the server's lifecycle. */
import type { ModelRegistry } from "../scheduler/index.js";
import type { KilnMetrics } from "./metrics/kiln-metrics.js";
import type { SseOptions } from "./sse.js";
import type { UsageRecorder } from "./usage.js";

/** The server's lifecycle flag: once draining, new requests get 503 while running ones finish. */
export class Lifecycle {
  private isDraining = false;
  private running = 0;
  private idleWaiters: Array<() => void> = [];

  get draining(): boolean {
    return this.isDraining;
  }

  /** Requests that have started and not yet been answered in full. */
  get inFlight(): number {
    return this.running;
  }

  startDraining(): void {
    this.isDraining = true;
  }

  requestStarted(): void {
    this.running++;
  }

  requestFinished(): void {
    this.running = Math.max(0, this.running - 1);
    if (this.running === 0) for (const wake of this.idleWaiters.splice(0)) wake();
  }

  /** Resolves when no request is in flight. */
  idle(): Promise<void> {
    return this.running === 0 ? Promise.resolve() : new Promise((resolve) => this.idleWaiters.push(resolve));
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
