/**
 * Which models this server answers for, and where each one stands: loading (being pulled,
 * compiled, loaded), serving, or failed. The server starts listening while models load. A model in
 * service can be switched to another artifact live ({@link ModelRegistry.switchModel}).
 */
import type { ServedSpeechModel } from "../speech/types.js";
import type { ServedModel } from "./served-model.js";

/** A model in service of either kind; `kind` tells them apart. */
export type AnyServedModel = ServedModel | ServedSpeechModel;

export type ModelState =
  | { status: "loading"; slug: string; stage: string }
  | { status: "serving"; slug: string; model: AnyServedModel }
  | { status: "failed"; slug: string; error: string };

/** A switch that went through: what serves now, what it replaced, and when that one is gone. */
export interface ModelSwitch {
  model: AnyServedModel;
  previous: AnyServedModel;
  /**
   * Settles once the previous model has finished every request it had (queued ones included) and
   * is closed; rejects only if closing it failed.
   */
  retired: Promise<void>;
}

export interface ModelRegistryOptions {
  /**
   * Milliseconds a replaced model keeps taking requests before it closes. Default
   * {@link DEFAULT_RETIRE_GRACE_MS}.
   */
  retireGraceMs?: number;
}

/**
 * A route looks its model up, then submits to its engine. The text routes do both in one tick, but a
 * route that awaits something in between (an upload being decoded) would otherwise find the engine
 * it looked up already closed, and fail a request that arrived before the switch.
 */
export const DEFAULT_RETIRE_GRACE_MS = 1000;

export class ModelRegistry {
  private readonly states = new Map<string, ModelState>();
  private readonly switching = new Map<string, Promise<ModelSwitch>>();
  private readonly retiring = new Set<Promise<void>>();
  private readonly closing = new AbortController();
  private readonly retireGraceMs: number;

  constructor(options: ModelRegistryOptions = {}) {
    this.retireGraceMs = options.retireGraceMs ?? DEFAULT_RETIRE_GRACE_MS;
  }

  /** Announces a model that will be served once loaded. */
  expect(slug: string, stage = "queued"): void {
    this.states.set(slug, { status: "loading", slug, stage });
  }

  /** Records progress of a loading model (a short phrase, e.g. "compiling"). */
  stage(slug: string, stage: string): void {
    const state = this.states.get(slug);
    if (state?.status === "loading") this.states.set(slug, { ...state, stage });
  }

  serve(model: AnyServedModel): void {
    this.states.set(model.slug, { status: "serving", slug: model.slug, model });
  }

  fail(slug: string, error: string): void {
    this.states.set(slug, { status: "failed", slug, error });
  }

  get(slug: string): ModelState | undefined {
    return this.states.get(slug);
  }

  all(): ModelState[] {
    return [...this.states.values()];
  }

  /** The text models in service (what the engine metrics and queue gauges read). */
  servingText(): ServedModel[] {
    return this.all().flatMap((s) => (s.status === "serving" && s.model.kind === "text" ? [s.model] : []));
  }

  /** True when no model is still loading and at least one serves. */
  get ready(): boolean {
    const all = this.all();
    return all.length > 0 && all.every((s) => s.status !== "loading") && all.some((s) => s.status === "serving");
  }

  /** Whether `slug` is being switched now. */
  isSwitching(slug: string): boolean {
    return this.switching.has(slug);
  }

  /**
   * Replaces the model serving `slug` with the one `load` gives, failing no request: the new one
   * loads beside the old one (two copies are in memory meanwhile); once it is loaded, new requests
   * go to it, and the old one finishes what it has queued and running, then closes. If `load`
   * fails, or the registry closes while it loads (`signal` is aborted then), the old one keeps
   * serving and the error is thrown. One switch per model at a time.
   */
  async switchModel(slug: string, load: (signal: AbortSignal) => Promise<AnyServedModel>): Promise<ModelSwitch> {
    if (this.switching.has(slug)) throw new Error(`${slug} is already being switched`);
    if (this.closing.signal.aborted) throw new Error(`the server is stopping: ${slug} is not switched`);
    if (this.states.get(slug)?.status !== "serving") throw new Error(`${slug} is not serving, so there is nothing to switch`);
    const run = (async (): Promise<ModelSwitch> => {
      const next = await load(this.closing.signal);
      const current = this.states.get(slug);
      const previous = current?.status === "serving" ? current.model : null;
      const refusal = this.closing.signal.aborted
        ? `the server is stopping: ${slug} is not switched`
        : previous && (next.slug !== slug || next.kind !== previous.kind)
          ? `the model loaded to replace ${slug} is the ${next.kind} model ${next.slug}`
          : null;
      if (refusal !== null || previous === null) {
        await next.close().catch(() => {});
        throw new Error(refusal ?? `${slug} stopped serving while its replacement loaded`);
      }
      this.states.set(slug, { status: "serving", slug, model: next });
      return { model: next, previous, retired: this.retire(previous) };
    })();
    this.switching.set(slug, run);
    try {
      return await run;
    } finally {
      this.switching.delete(slug);
    }
  }

  /** Closes every serving model (waiting for its running requests), and those still finishing after a switch. */
  async close(): Promise<void> {
    this.closing.abort();
    await Promise.allSettled([...this.switching.values()]);
    await Promise.all([...this.all().map((s) => (s.status === "serving" ? s.model.close() : undefined)), ...this.retiring]);
  }

  /** Closes a replaced model once its grace is over (at once when the registry closes) and its requests are done. */
  private retire(model: AnyServedModel): Promise<void> {
    const retired = this.grace().then(() => model.close());
    const tracked = retired.catch(() => {});
    this.retiring.add(tracked);
    void tracked.then(() => this.retiring.delete(tracked));
    return retired;
  }

  private grace(): Promise<void> {
    return new Promise((resolve) => {
      const signal = this.closing.signal;
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener("abort", done);
        resolve();
      };
      const timer = setTimeout(done, signal.aborted ? 0 : this.retireGraceMs);
      signal.addEventListener("abort", done, { once: true });
    });
  }
}
