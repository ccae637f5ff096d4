/**
 * Which models this server answers for, and where each one stands: loading (being pulled,
 * compiled, loaded), serving, or failed. The server starts listening while models load. A model in
 * service can be switched to another artifact live ({@link ModelRegistry.switchModel}).
 *
 * With a {@link ModelLoader}, every pulled model of the catalogue answers: one not loaded yet is
 * loaded on its first request ({@link ModelRegistry.demand}), unloaded again after a keep-alive
 * without requests, and the least recently used ones make room under a memory budget. The models
 * the server was started with (announced by {@link ModelRegistry.expect}) stay loaded.
 */
import type { PullProgress } from "../../catalogue/pull/index.js";
import { ModelTooLargeError } from "../errors.js";
import type { ServedSpeechModel } from "../speech/types.js";
import type { ServedModel } from "./served-model.js";
import { DEFAULT_KEEP_ALIVE_MS } from "../defaults.js";

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

/**
 * What the registry needs to load models on demand; the composition root fills it with
 * provisioning (pull -> compile -> load).
 */
export interface ModelLoader {
  /** Whether `slug`'s weights are here, so that loading it needs no download. */
  isPulled(slug: string): boolean;
  /** Whether a model that is not pulled may be pulled on its first request. */
  readonly pullOnDemand: boolean;
  /**
   * Bytes of memory serving `slug` takes (weights and KV budget): `model`'s own once it is loaded,
   * else an estimate from its artifact, or from the catalogue's sizes before it is compiled.
   */
  memoryBytes(slug: string, model?: AnyServedModel): number;
  /** Pulls (where allowed), compiles and loads `slug`; aborting `signal` stops it. */
  load(slug: string, signal: AbortSignal, onStage: (stage: string) => void): Promise<AnyServedModel>;
  /** Fetches `slug`'s weights into the store (nothing compiled or loaded), telling `onProgress` as they come; aborting `signal` stops it. */
  pull(slug: string, signal: AbortSignal, onProgress: (progress: PullProgress) => void): Promise<void>;
  /** Deletes what is kept of `slug` (its weights and compiled artifacts); false when nothing is. */
  remove(slug: string): boolean;
}

/** Where a model of the catalogue stands on this server, as `/v1/models` reports it. */
export type ModelAvailability = "served" | "loadable" | "not_pulled";

/** What a request for a model finds: its state, or that it is not pulled here (and may not be pulled on demand). */
export type DemandedModel = ModelState | { status: "not_pulled"; slug: string } | undefined;

export interface ModelRegistryOptions {
  /**
   * Milliseconds a replaced model keeps taking requests before it closes. Default
   * {@link DEFAULT_RETIRE_GRACE_MS}.
   */
  retireGraceMs?: number;
  /** Loads models on their first request; absent: only the models served from the start answer. */
  loader?: ModelLoader;
  /** Milliseconds a model loaded on demand stays loaded without requests. Default {@link DEFAULT_KEEP_ALIVE_MS}; Infinity keeps it. */
  keepAliveMs?: number;
  /** Bytes the loaded models may take together ({@link ModelLoader.memoryBytes}); the least recently used make room. Default: no bound. */
  memoryBudgetBytes?: number;
  /** Milliseconds a request waits for its model to load before it is told to come back. Default {@link DEFAULT_LOAD_WAIT_MS}. */
  loadWaitMs?: number;
}

export { DEFAULT_KEEP_ALIVE_MS };
/** Default wait of a request for its model to load: 60 s, well inside the official clients' 10-minute timeout. */
export const DEFAULT_LOAD_WAIT_MS = 60_000;
/** A model that failed to load on demand is tried again by a request this long after the failure, not before. */
export const FAILED_RETRY_MS = 30_000;

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
  private readonly loader: ModelLoader | undefined;
  private readonly keepAliveMs: number;
  private readonly budgetBytes: number;
  private readonly loadWaitMs: number;
  /** Models loaded (or loading) on demand: unloaded after the keep-alive, evicted under the budget. */
  private readonly onDemand = new Set<string>();
  /**
   * Per loaded model: when a request last used it, the memory it takes, and the keep-alive its
   * latest request asked for ({@link keepAlive}; absent: the server's).
   */
  private readonly usage = new Map<string, { lastUsed: number; bytes: number; keepAliveMs?: number }>();
  /** When each on-demand load failed. */
  private readonly failedAt = new Map<string, number>();
  /** The loads in flight, by slug; they run one at a time (each makes room for itself first). */
  private readonly loads = new Map<string, Promise<void>>();
  private loadChain: Promise<void> = Promise.resolve();
  /** Requests waiting for each model to load: a model with any is not unloaded until they have it. */
  private readonly claims = new Map<string, number>();
  private claimWaiters: Array<() => void> = [];
  /** Requests holding each model between finding it and handing it their work (see {@link hold}). */
  private readonly holds = new Map<AnyServedModel, number>();
  private readonly holdWaiters = new Map<AnyServedModel, Array<() => void>>();
  /** Every text model served since the registry was made, loaded at startup or on demand, unloaded since or not. */
  private readonly textServed = new Set<string>();
  /** Models unloaded and not yet closed (they finish their requests first). */
  private readonly unloading = new Set<Promise<void>>();
  private readonly sweeper: NodeJS.Timeout | undefined;

  constructor(options: ModelRegistryOptions = {}) {
    this.retireGraceMs = options.retireGraceMs ?? DEFAULT_RETIRE_GRACE_MS;
    this.loader = options.loader;
    this.keepAliveMs = options.keepAliveMs ?? DEFAULT_KEEP_ALIVE_MS;
    this.budgetBytes = options.memoryBudgetBytes ?? Infinity;
    this.loadWaitMs = options.loadWaitMs ?? DEFAULT_LOAD_WAIT_MS;
    if (this.loader && Number.isFinite(this.keepAliveMs)) {
      this.sweeper = setInterval(() => this.unloadIdle(), Math.min(30_000, Math.max(50, this.keepAliveMs / 4)));
      this.sweeper.unref();
    }
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
    if (model.kind === "text") this.textServed.add(model.slug);
    this.usage.set(model.slug, { lastUsed: Date.now(), bytes: this.loader?.memoryBytes(model.slug, model) ?? 0 });
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

  /** Whether `slug` is a text model served at any time since the registry was made (what the nightly track optimizes). */
  servedTextSinceStart(slug: string): boolean {
    return this.textServed.has(slug);
  }

  /**
   * True when no model the server was started with is still loading and at least one serves; a
   * server that loads every model on demand is ready from the start. Loads on demand do not count.
   */
  get ready(): boolean {
    const all = this.all().filter((s) => !this.onDemand.has(s.slug));
    if (all.length === 0) return this.loader !== undefined;
    return all.every((s) => s.status !== "loading") && all.some((s) => s.status === "serving");
  }

  /**
   * Where `slug` stands: served, loadable (its weights are here), or not pulled; undefined for a
   * model not served here when there is no loader to ask.
   */
  availability(slug: string): ModelAvailability | undefined {
    if (this.states.get(slug)?.status === "serving") return "served";
    if (!this.loader) return undefined;
    return this.loader.isPulled(slug) ? "loadable" : "not_pulled";
  }

  /** Whether this server pulls models ({@link pull}): one without a loader answers only the models it was started with. */
  get pulls(): boolean {
    return this.loader !== undefined;
  }

  /** Fetches `slug`'s weights (Ollama's `/api/pull`), so that its first request loads it; only where {@link pulls}. */
  async pull(slug: string, signal: AbortSignal, onProgress: (progress: PullProgress) => void): Promise<void> {
    if (!this.loader) throw new Error("this server answers only the models it was started with: it pulls none");
    await this.loader.pull(slug, signal, onProgress);
  }

  /**
   * Deletes what is kept of `slug` (Ollama's `/api/delete`); a loaded one keeps serving until it is
   * unloaded, and is not loaded again. False when nothing is kept (or there is no loader).
   */
  remove(slug: string): boolean {
    return this.loader?.remove(slug) ?? false;
  }

  /**
   * The model a request names, loaded first when it is not (with a loader): waits up to the load
   * wait for it, then returns its state as it is (still loading: the caller answers "come back").
   * A model the loader may not load (not pulled, pulls not allowed) is `not_pulled`; one that can
   * never fit the memory budget throws {@link ModelTooLargeError}. Each call counts as a use of the
   * model for the keep-alive and for eviction.
   */
  async demand(slug: string): Promise<DemandedModel> {
    const deadline = Date.now() + this.loadWaitMs;
    for (;;) {
      let state = this.states.get(slug);
      if (state?.status === "serving") {
        this.touch(slug);
        return state;
      }
      if (!this.loader || this.closing.signal.aborted) return state;
      if (state?.status === "failed" && (!this.onDemand.has(slug) || Date.now() - (this.failedAt.get(slug) ?? 0) < FAILED_RETRY_MS)) return state;
      if (state?.status !== "loading") {
        if (!this.loader.isPulled(slug) && !this.loader.pullOnDemand) return { status: "not_pulled", slug };
        this.assertFits(slug);
        this.startLoad(slug);
      }
      const load = this.loads.get(slug);
      // Claimed while waiting: the model, once loaded, is not unloaded for another before this request has it.
      this.claims.set(slug, (this.claims.get(slug) ?? 0) + 1);
      try {
        if (load) await settlesWithin(load, Math.max(0, deadline - Date.now()));
        state = this.states.get(slug);
        if (state?.status === "serving") {
          this.touch(slug);
          return state;
        }
      } finally {
        this.release(slug);
      }
      // Loaded, then unloaded again to make room for another model before this request got to it: load it again.
      if (state === undefined && Date.now() < deadline) continue;
      return state;
    }
  }

  /**
   * Marks `model` as used by a request until the returned function is called (once its answer is
   * over): a model unloaded meanwhile is closed only after that, so a request that found it and
   * awaits something before handing it work (an upload decoding, cloud admission) still gets it.
   */
  hold(model: AnyServedModel): () => void {
    this.holds.set(model, (this.holds.get(model) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.holds.get(model) ?? 1) - 1;
      if (left > 0) return void this.holds.set(model, left);
      this.holds.delete(model);
      for (const wake of this.holdWaiters.get(model) ?? []) wake();
      this.holdWaiters.delete(model);
      this.sweepAfter(this.usage.get(model.slug)?.keepAliveMs);
    };
  }

  /**
   * How long `slug`, if loaded on demand, stays loaded after its last request (Ollama's per-request
   * `keep_alive`): 0 unloads it once no request uses it, Infinity keeps it; it holds until a later
   * request says otherwise or the model is unloaded. A model served from the start is kept however
   * long a request asks ("pinned"); one not in service stays so ("absent").
   */
  keepAlive(slug: string, ms: number): "set" | "pinned" | "absent" {
    const state = this.states.get(slug);
    if (state?.status !== "serving") return "absent";
    if (!this.onDemand.has(slug)) return "pinned";
    const usage = this.usage.get(slug);
    if (usage) {
      usage.keepAliveMs = ms;
      usage.lastUsed = Date.now();
    }
    if (!this.busy(state.model)) this.sweepAfter(ms);
    return "set";
  }

  /**
   * When `slug` will be unloaded if no request comes first (Unix milliseconds): its last request's
   * end plus its keep-alive, for a model loaded on demand; null for one served from the start or
   * kept without end, or one not in service.
   */
  expiresAt(slug: string): number | null {
    const usage = this.usage.get(slug);
    if (this.states.get(slug)?.status !== "serving" || !this.onDemand.has(slug) || !usage) return null;
    const at = usage.lastUsed + (usage.keepAliveMs ?? this.keepAliveMs);
    return Number.isFinite(at) ? at : null;
  }

  /** Looks for idle models to unload once a request's keep-alive of `ms` has passed (the periodic sweep may come much later). */
  private sweepAfter(ms: number | undefined): void {
    if (ms === undefined || !Number.isFinite(ms) || ms >= this.keepAliveMs) return;
    setTimeout(() => this.unloadIdle(), Math.max(0, ms) + 1).unref();
  }

  /** Resolves once no request holds `model` (at once when the registry closes). */
  private unheld(model: AnyServedModel): Promise<void> {
    if (!this.holds.has(model) || this.closing.signal.aborted) return Promise.resolve();
    return new Promise((resolve) => this.holdWaiters.set(model, [...(this.holdWaiters.get(model) ?? []), resolve]));
  }

  /** Whether requests are running or queued on `model`, or hold it. */
  private busy(model: AnyServedModel): boolean {
    return this.holds.has(model) || inUse(model);
  }

  private release(slug: string): void {
    const left = (this.claims.get(slug) ?? 1) - 1;
    if (left > 0) this.claims.set(slug, left);
    else this.claims.delete(slug);
    for (const wake of this.claimWaiters.splice(0)) wake();
  }

  private touch(slug: string): void {
    const usage = this.usage.get(slug);
    if (usage) usage.lastUsed = Date.now();
  }

  /** Throws when `slug` needs more than the budget leaves beside the models that are never unloaded. */
  private assertFits(slug: string): void {
    if (!Number.isFinite(this.budgetBytes)) return;
    const needed = this.loader!.memoryBytes(slug);
    let kept = 0;
    for (const s of this.states.values()) {
      if (this.onDemand.has(s.slug) || s.slug === slug) continue;
      kept += s.status === "serving" ? (this.usage.get(s.slug)?.bytes ?? 0) : s.status === "loading" ? this.loader!.memoryBytes(s.slug) : 0;
    }
    const available = Math.max(0, this.budgetBytes - kept);
    if (needed > available) throw new ModelTooLargeError(slug, needed, available, this.budgetBytes);
  }

  private startLoad(slug: string): void {
    this.onDemand.add(slug);
    this.failedAt.delete(slug);
    this.states.set(slug, { status: "loading", slug, stage: "queued" });
    const run = this.loadChain.then(() => this.load(slug));
    this.loadChain = run;
    this.loads.set(slug, run);
    void run.finally(() => this.loads.delete(slug));
  }

  /** Makes room for `slug`, then loads it; never rejects (a failure is the model's state). */
  private async load(slug: string): Promise<void> {
    const loader = this.loader!;
    try {
      this.closing.signal.throwIfAborted();
      await this.makeRoom(slug, loader.memoryBytes(slug));
      this.closing.signal.throwIfAborted();
      const model = await loader.load(slug, this.closing.signal, (stage) => this.stage(slug, stage));
      if (this.closing.signal.aborted) {
        await model.close().catch(() => {});
        throw new Error(`the server is stopping: ${slug} is not served`);
      }
      this.serve(model);
    } catch (err) {
      this.failedAt.set(slug, Date.now());
      this.fail(slug, err instanceof Error ? err.message : String(err));
    }
  }

  /**
   * Unloads the least recently used models loaded on demand (idle ones first) until `needed` bytes
   * fit the budget beside the rest, and waits for them to close: each finishes its running and
   * queued requests first, so no request fails for it.
   */
  private async makeRoom(slug: string, needed: number): Promise<void> {
    if (!Number.isFinite(this.budgetBytes)) return;
    for (;;) {
      // A model being unloaded holds its memory until it has closed.
      await Promise.all(this.unloading);
      let used = 0;
      for (const s of this.states.values()) if (s.status === "serving") used += this.usage.get(s.slug)?.bytes ?? 0;
      if (used + needed <= this.budgetBytes) return;
      const victim = this.evictionCandidate(slug);
      if (victim) {
        void this.unload(victim);
        continue;
      }
      // Only models that requests are about to use are left: once those have them, they can go.
      if (!this.evictionCandidate(slug, true)) return;
      await new Promise<void>((resolve) => this.claimWaiters.push(resolve));
      this.closing.signal.throwIfAborted();
    }
  }

  /** The model loaded on demand to unload first: idle before busy, then the least recently used. */
  private evictionCandidate(except: string, claimedToo = false): ServingModelState | undefined {
    let best: { state: ServingModelState; busy: boolean; lastUsed: number } | undefined;
    for (const s of this.states.values()) {
      if (s.status !== "serving" || s.slug === except || !this.onDemand.has(s.slug) || this.switching.has(s.slug)) continue;
      if (!claimedToo && this.claims.has(s.slug)) continue;
      const candidate = { state: s, busy: this.busy(s.model), lastUsed: this.usage.get(s.slug)?.lastUsed ?? 0 };
      if (!best || (best.busy && !candidate.busy) || (best.busy === candidate.busy && candidate.lastUsed < best.lastUsed)) best = candidate;
    }
    return best?.state;
  }

  /** Takes a model loaded on demand out of service; resolves once it has finished its requests and closed. */
  private unload(state: ServingModelState): Promise<void> {
    this.states.delete(state.slug);
    this.usage.delete(state.slug);
    this.onDemand.delete(state.slug);
    const closed = this.unheld(state.model)
      .then(() => this.retire(state.model))
      .catch(() => {});
    this.unloading.add(closed);
    void closed.then(() => this.unloading.delete(closed));
    return closed;
  }

  /** Unloads the models loaded on demand that have had no request for the keep-alive. */
  private unloadIdle(): void {
    const now = Date.now();
    for (const s of [...this.states.values()]) {
      if (s.status !== "serving" || !this.onDemand.has(s.slug) || this.switching.has(s.slug) || this.claims.has(s.slug)) continue;
      // A model busy now was used now: its keep-alive counts from its last request's end.
      const usage = this.usage.get(s.slug);
      if (this.busy(s.model)) this.touch(s.slug);
      else if (now - (usage?.lastUsed ?? 0) >= (usage?.keepAliveMs ?? this.keepAliveMs)) void this.unload(s);
    }
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
    if (this.sweeper) clearInterval(this.sweeper);
    for (const wake of this.claimWaiters.splice(0)) wake();
    for (const waiters of this.holdWaiters.values()) for (const wake of waiters) wake();
    this.holdWaiters.clear();
    await Promise.allSettled([...this.switching.values(), ...this.loads.values()]);
    await Promise.all([...this.all().map((s) => (s.status === "serving" ? s.model.close() : undefined)), ...this.unloading, ...this.retiring]);
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

type ServingModelState = Extract<ModelState, { status: "serving" }>;

/** Whether a model has requests running or queued. */
function inUse(model: AnyServedModel): boolean {
  if (model.kind === "text") {
    const load = model.engine.load;
    return load.running + load.waiting > 0;
  }
  // A speech model's engine is not part of its interface (test fakes have none): read it where it is.
  const stats = (model as { engine?: { stats?: { running: number; waiting: number } } }).engine?.stats;
  return stats !== undefined && stats.running + stats.waiting > 0;
}

/** Whether `promise` settles within `ms` milliseconds (it is never rejected here). */
async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  try {
    return await Promise.race([promise.then(() => true as const), deadline]);
  } finally {
    clearTimeout(timer);
  }
}
