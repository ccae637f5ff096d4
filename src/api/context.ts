/** What the routes share: the models, metrics, usage records and the server's lifecycle. */
import { setMaxListeners } from "node:events";
import type { FileStore } from "../catalogue/stored-files.js";
import type { ResponseStore } from "../catalogue/stored-responses.js";
import type { BatchRunner } from "./batches/batch-runner.js";
import type { ModelRegistry } from "../scheduler/index.js";
import type { CloudGate } from "./cloud-gate.js";
import type { UsageRecorder } from "./cloud-port.js";
import type { ServerDevice } from "./device.js";
import type { KilnMetrics } from "./metrics/kiln-metrics.js";
import type { SseOptions } from "./sse.js";

/**
 * The server's lifecycle: once draining, new requests get 503 while running ones finish; once cut
 * off (the drain deadline has passed), the ones still running end at once with an error.
 */
export class Lifecycle {
  private isDraining = false;
  private running = 0;
  private idleWaiters: Array<() => void> = [];
  private readonly cutOffController = new AbortController();

  constructor() {
    // Every running generation listens to it: hundreds are normal, not a leak to warn about.
    setMaxListeners(0, this.cutOffController.signal);
  }

  get draining(): boolean {
    return this.isDraining;
  }

  /** Aborted when the drain deadline passes: every generation still running must end now, with an error. */
  get cutOffSignal(): AbortSignal {
    return this.cutOffController.signal;
  }

  /** Requests that have started and not yet been answered in full. */
  get inFlight(): number {
    return this.running;
  }

  startDraining(): void {
    this.isDraining = true;
  }

  /** Ends the running generations (draining too, if it had not begun): streams get an error event, others a 503. */
  cutOff(): void {
    this.isDraining = true;
    this.cutOffController.abort();
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
  /** Cloud mode's limits and reservations at admission (also `usage`); absent = none (local mode). */
  cloud?: CloudGate;
  /** Unix seconds when the server started (the `created` of models not in service). */
  startedAt: number;
  sse: SseOptions;
  /** Why this server is riskier than it looks (e.g. listening beyond loopback without key checks); /health lists them. */
  warnings: readonly string[];
  /** The Responses API's stored responses (`store`, `previous_response_id`, GET /v1/responses/{id}). */
  responses: ResponseStore;
  /** The device the models run on (/health, /metrics). */
  device: ServerDevice;
  /** The Files API's files (uploads, batches' output). */
  files: FileStore;
  /** The Batch API's batches, run in the background. */
  batches: BatchRunner;
}
