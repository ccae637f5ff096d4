/**
 * What a batch engine reports about itself, for metrics: gauges (running, waiting), cumulative
 * histograms (sequences per decode step, prompt tokens per step, queue time) and counters, read
 * with {@link EngineStats.snapshot}; and hooks called as things happen ({@link EngineObserver}),
 * for a metrics module that prefers to record each observation itself.
 */
import { Histogram, type HistogramSnapshot } from "./histogram.js";
import type { PrefixStats } from "./kv-slots.js";

export type { HistogramSnapshot } from "./histogram.js";

/** One engine step, as reported to {@link EngineObserver.onStep}. */
export interface StepRecord {
  /** Sequences that decoded a token this step (the batch size). */
  decodeRows: number;
  /** Decode calls (1 when the running sequences sit in consecutive slots). */
  decodeCalls: number;
  /** Prompt tokens computed, and in how many calls. */
  prefillTokens: number;
  prefillCalls: number;
  /** KV copies sent to the worker before this step (moves and shared prefixes). */
  copies: number;
  /** Wall-clock seconds of the step, worker calls included. */
  seconds: number;
  /** Sequences running (prefilling or decoding) and waiting after the step. */
  running: number;
  waiting: number;
}

/** Hooks a metrics module can register (all optional; called synchronously, keep them cheap). */
export interface EngineObserver {
  /** After every step. */
  onStep?(step: StepRecord): void;
  /** When a request leaves the queue (its first choice gets a slot): seconds it waited. */
  onQueued?(seconds: number): void;
}

/** Everything at once, for a scrape. */
export interface EngineStatsSnapshot {
  /** Gauges, in sequences (choices): holding a KV slot, queued for one, and paused for a slow reader. */
  running: number;
  waiting: number;
  paused: number;
  /** KV slots in all (the most sequences that run at once). */
  slots: number;
  /** Steps taken. */
  steps: number;
  /** Sequences decoded per step (steps without decoding are not counted). */
  batchSize: HistogramSnapshot;
  /** Prompt tokens computed per step (steps without prefill are not counted). */
  prefillTokens: HistogramSnapshot;
  /** Seconds from submit to the first slot, per request. */
  queueSeconds: HistogramSnapshot;
  /** Tokens computed in all: prompt (prefill) and generated. */
  promptTokensComputed: number;
  completionTokens: number;
  /** Prompt tokens copied from a sibling's prefill instead of computed (n > 1). */
  sharedPromptTokens: number;
  /** Prefix reuse: lookups and hits, in tokens; `hitRate` = hitTokens / promptTokens (0 before any). */
  prefix: PrefixStats & { hitRate: number };
  /** KV copies sent to the worker. */
  copies: number;
  /** Prompt-lookup drafts: tokens proposed, and of those, confirmed by the model. */
  draftTokens: number;
  draftTokensAccepted: number;
  /** Seconds each constraint compile took away from the steps (StepRunner.prepareConstraint), refused ones included. */
  constraintCompileSeconds: HistogramSnapshot;
  /** Compiles the engine refused (a constraint it cannot take): their requests failed. */
  constraintCompilesRefused: number;
}

export const BATCH_SIZE_BOUNDS = [1, 2, 4, 8, 16, 32, 64, 128];
export const PREFILL_TOKENS_BOUNDS = [16, 64, 128, 256, 512, 1024, 2048];
export const QUEUE_SECONDS_BOUNDS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
export const COMPILE_SECONDS_BOUNDS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/** The read side of an engine's stats (what `Engine.stats` offers a metrics module). */
export interface EngineStatsReader {
  /** Gauges, histograms and counters as they stand. */
  snapshot(): EngineStatsSnapshot;
  /** Registers hooks; returns the function that removes them. */
  observe(observer: EngineObserver): () => void;
}

/** The engine's books; the engine writes, readers call {@link snapshot} or {@link observe}. */
export class EngineStats implements EngineStatsReader {
  private readonly batchSize = new Histogram(BATCH_SIZE_BOUNDS);
  private readonly prefillHist = new Histogram(PREFILL_TOKENS_BOUNDS);
  private readonly queueHist = new Histogram(QUEUE_SECONDS_BOUNDS);
  private readonly compileHist = new Histogram(COMPILE_SECONDS_BOUNDS);
  private compilesRefused = 0;
  private readonly observers = new Set<EngineObserver>();
  private steps = 0;
  private copies = 0;
  running = 0;
  waiting = 0;
  paused = 0;
  promptTokensComputed = 0;
  completionTokens = 0;
  sharedPromptTokens = 0;
  private draftTokens = 0;
  private draftTokensAccepted = 0;

  constructor(
    private readonly slots: number,
    private readonly prefix: () => PrefixStats,
  ) {}

  /** Registers hooks; returns the function that removes them. */
  observe(observer: EngineObserver): () => void {
    this.observers.add(observer);
    return () => this.observers.delete(observer);
  }

  step(record: StepRecord): void {
    this.steps++;
    this.copies += record.copies;
    if (record.decodeRows > 0) this.batchSize.observe(record.decodeRows);
    if (record.prefillTokens > 0) this.prefillHist.observe(record.prefillTokens);
    this.promptTokensComputed += record.prefillTokens;
    for (const o of this.observers) o.onStep?.(record);
  }

  /** A draft of `proposed` tokens was checked, and its first `accepted` confirmed. */
  drafted(proposed: number, accepted: number): void {
    this.draftTokens += proposed;
    this.draftTokensAccepted += accepted;
  }

  /** A constraint compile ended after `seconds`, compiled or `refused`. */
  compiled(seconds: number, refused: boolean): void {
    this.compileHist.observe(seconds);
    if (refused) this.compilesRefused++;
  }

  queued(seconds: number): void {
    this.queueHist.observe(seconds);
    for (const o of this.observers) o.onQueued?.(seconds);
  }

  snapshot(): EngineStatsSnapshot {
    const prefix = { ...this.prefix() };
    return {
      running: this.running,
      waiting: this.waiting,
      paused: this.paused,
      slots: this.slots,
      steps: this.steps,
      batchSize: this.batchSize.snapshot(),
      prefillTokens: this.prefillHist.snapshot(),
      queueSeconds: this.queueHist.snapshot(),
      promptTokensComputed: this.promptTokensComputed,
      completionTokens: this.completionTokens,
      sharedPromptTokens: this.sharedPromptTokens,
      prefix: { ...prefix, hitRate: prefix.promptTokens > 0 ? prefix.hitTokens / prefix.promptTokens : 0 },
      copies: this.copies,
      draftTokens: this.draftTokens,
      draftTokensAccepted: this.draftTokensAccepted,
      constraintCompileSeconds: this.compileHist.snapshot(),
      constraintCompilesRefused: this.compilesRefused,
    };
  }
}
