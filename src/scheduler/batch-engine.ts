/**
 * The continuous-batching engine: many sequences of one model share each model step. Every step
 * is schedule -> run -> postprocess:
 *
 * - schedule: drop cancelled sequences, pack running ones into consecutive KV slots, admit
 *   waiting choices into free slots (first come first served, reusing cached prompt prefixes),
 *   then plan the step: one decode token for every running sequence, and prompt chunks of
 *   prefilling ones within the step's token budget (`scheduler.ts`);
 * - run: KV copies, then one decode call over the running slots, then the prefill calls;
 * - postprocess: sampled tokens become text deltas (stop tokens, stop strings, max tokens and the
 *   context end finish a choice), finished sequences free their slots.
 *
 * The n choices of a request share one prefill: the first choice computes the prompt, the others
 * sample their first token from the same logits (each with its own stream of the seed) and copy
 * its cache. Requests beyond the waiting bound are refused at once (`OverloadedError`).
 */
import type { RowSample, StepResult } from "../runtime/step-protocol.js";
import { Channel } from "./channel.js";
import { ChoiceOutput } from "./choice-output.js";
import { EngineStats } from "./engine-stats.js";
import { EngineClosedError, OverloadedError } from "./errors.js";
import { KvSlots, type PrefixReuse } from "./kv-slots.js";
import { admissions, DEFAULT_PREFILL_CHUNK, DEFAULT_STEP_TOKENS, planStep, waitingAfterAdmission, type StepLimits } from "./scheduler.js";
import { Sequence } from "./sequence.js";
import type { StepBackend, StepCall } from "./step-backend.js";
import { WorkerOps } from "./worker-ops.js";
import type { Engine, FinishReason, GenerationEvent, GenerationRequest, GenerationStream } from "./types.js";

export interface BatchEngineOptions {
  /** Name used in error messages: the model's slug. */
  name: string;
  /** Most sequences (choices) holding a KV slot at once, i.e. the largest decode batch. Default: every slot of the backend. */
  maxRunning?: number;
  /** Most requests waiting for a slot; more are refused with `OverloadedError`. Default 64. */
  maxWaiting?: number;
  /**
   * Most tokens computed per step, decode rows and prompt tokens together. Default 512, or one
   * prefill chunk plus a full decode batch when that is more.
   */
  stepTokens?: number;
  /** Prompt tokens per prefill call; prompts are cut at multiples of it. Default 256. */
  prefillChunk?: number;
  /** Reuse of cached prompt prefixes (see {@link PrefixReuse}). Default "exact". */
  prefixReuse?: PrefixReuse;
  /** Clock in milliseconds. Default `performance.now`. */
  now?: () => number;
}

export const DEFAULT_MAX_RUNNING = 16;

interface Job {
  request: GenerationRequest;
  channel: Channel<GenerationEvent>;
  sequences: Sequence[];
  /** Choices not admitted yet, in order. */
  waiting: Sequence[];
  unfinished: number;
  submittedAt: number;
  admitted: boolean;
  cancelled: boolean;
  done: boolean;
  detach: () => void;
}

export class BatchEngine implements Engine {
  /** Jobs with choices still waiting for a slot, oldest first. */
  private readonly queue: Job[] = [];
  /** Sequences holding a slot, in admission order (prefill goes oldest first). */
  private live: Sequence[] = [];
  private readonly jobOf = new Map<Sequence, Job>();
  private readonly cancelled = new Set<Job>();
  private readonly kv: KvSlots;
  private readonly limits: StepLimits;
  private readonly maxWaiting: number;
  private readonly stopTokens: Set<number>;
  private readonly now: () => number;
  private readonly ops: WorkerOps;
  private looping = false;
  private closed = false;
  private activeJobs = 0;
  private idleWaiters: Array<() => void> = [];
  private nextSequenceId = 1;
  /** Gauges, histograms and hooks for metrics. */
  readonly stats: EngineStats;

  constructor(
    private readonly backend: StepBackend,
    private readonly options: BatchEngineOptions,
  ) {
    const slots = Math.min(options.maxRunning ?? backend.slots, backend.slots);
    if (!(slots >= 1)) throw new RangeError(`maxRunning must be at least 1 (the backend has ${backend.slots} slots)`);
    const prefillChunk = options.prefillChunk ?? DEFAULT_PREFILL_CHUNK;
    this.limits = { stepTokens: options.stepTokens ?? Math.max(DEFAULT_STEP_TOKENS, prefillChunk + slots), prefillChunk };
    if (!(this.limits.prefillChunk >= 1 && this.limits.stepTokens >= 1)) throw new RangeError("stepTokens and prefillChunk must be positive");
    this.kv = new KvSlots(slots, { reuse: options.prefixReuse ?? "exact", align: this.limits.prefillChunk });
    this.maxWaiting = options.maxWaiting ?? 64;
    this.stopTokens = new Set(backend.stopTokenIds);
    this.now = options.now ?? (() => performance.now());
    this.ops = new WorkerOps(backend, this.kv);
    this.stats = new EngineStats(slots, () => this.kv.prefix);
  }

  /** Requests waiting for their first slot, and requests generating. */
  get load(): { waiting: number; running: number } {
    const waiting = this.queue.filter((j) => !j.admitted).length;
    return { waiting, running: this.activeJobs - waiting };
  }

  submit(request: GenerationRequest, signal?: AbortSignal): GenerationStream {
    if (this.closed) throw new EngineClosedError(this.options.name);
    this.check(request);
    const n = request.n ?? 1;
    const wouldWait = waitingAfterAdmission([...this.queue.map((j) => ({ waitingChoices: j.waiting.length })), { waitingChoices: n }], this.kv.free);
    if (wouldWait > this.maxWaiting) throw new OverloadedError(this.options.name, this.load.waiting);
    const job: Job = {
      request,
      channel: null as never,
      sequences: [],
      waiting: [],
      unfinished: n,
      submittedAt: this.now(),
      admitted: false,
      cancelled: false,
      done: false,
      detach: () => {},
    };
    const cancel = () => this.cancel(job);
    job.channel = new Channel<GenerationEvent>(cancel);
    for (let choice = 0; choice < n; choice++) {
      const output = new ChoiceOutput(this.backend.createDecoder(), { stop: request.stop, logprobs: request.logprobs, tokenBytes: (id) => this.backend.tokenBytes(id) });
      const seq = new Sequence({ id: this.nextSequenceId++, choice, promptIds: request.promptIds, maxTokens: request.maxTokens, contextLength: this.backend.contextLength, output });
      job.sequences.push(seq);
      this.jobOf.set(seq, job);
    }
    job.waiting = [...job.sequences];
    if (signal) {
      signal.addEventListener("abort", cancel, { once: true });
      job.detach = () => signal.removeEventListener("abort", cancel);
    }
    this.queue.push(job);
    this.activeJobs++;
    this.updateGauges();
    if (signal?.aborted) cancel();
    else this.kick();
    return job.channel;
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.idle) return;
    await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
  }

  private get idle(): boolean {
    return this.queue.length === 0 && this.live.length === 0;
  }

  private check(request: GenerationRequest): void {
    if (request.promptIds.length === 0) throw new RangeError("the prompt must have at least one token");
    if (request.promptIds.length >= this.backend.contextLength) {
      throw new RangeError(`a prompt of ${request.promptIds.length} tokens does not fit the context of ${this.backend.contextLength}`);
    }
    if (!Number.isInteger(request.maxTokens) || request.maxTokens < 1) throw new RangeError(`maxTokens must be a positive integer, got ${request.maxTokens}`);
    const n = request.n ?? 1;
    if (!Number.isInteger(n) || n < 1) throw new RangeError(`n must be a positive integer, got ${n}`);
  }

  /** A request's caller went away: waiting choices end now, running ones at the next step. */
  private cancel(job: Job): void {
    if (job.done || job.cancelled) return;
    job.cancelled = true;
    job.detach();
    for (const seq of job.waiting.splice(0)) this.finish(seq, "cancelled");
    const at = this.queue.indexOf(job);
    if (at !== -1) this.queue.splice(at, 1);
    if (!job.done) this.cancelled.add(job);
    this.updateGauges();
    this.notifyIdle();
  }

  private kick(): void {
    if (this.looping) return;
    this.looping = true;
    // After the current task, so a burst of submits is scheduled together.
    queueMicrotask(() => void this.loop());
  }

  private async loop(): Promise<void> {
    try {
      while (!this.idle) await this.iteration();
    } catch (err) {
      this.failAll(err);
    } finally {
      this.looping = false;
      this.notifyIdle();
    }
  }

  /** One step: schedule -> run -> postprocess. */
  private async iteration(): Promise<void> {
    const started = this.now();
    const copiesBefore = this.ops.copies;
    const reaped = this.reap();
    this.kv.pack();
    const admitted = this.admit();
    this.updateGauges();

    let decodeRows = 0;
    let decodeCalls = 0;
    for (const run of this.kv.runs()) {
      const seqs = run.holders as Sequence[];
      // A failed call earlier in this step may have freed some of these; they wait a step.
      if (seqs.some((s, r) => !s.ready || s.slot !== run.first + r)) continue;
      const call: StepCall = {
        firstSlot: run.first,
        rows: seqs.length,
        seq: 1,
        tokens: Int32Array.from(seqs, (s) => s.nextInput),
        seqIds: seqs.map((s) => s.id),
        sample: seqs.map(() => true),
      };
      const result = await this.run(call, seqs);
      decodeRows += seqs.length;
      decodeCalls++;
      if (!result) continue;
      seqs.forEach((s, r) => {
        s.decoded();
        this.sampled(s, result.samples[r]);
      });
    }

    const prefilling = this.live.filter((s) => s.status === "prefilling");
    const plan = planStep(
      decodeRows,
      prefilling.map((s) => ({ cached: s.cached, promptLength: s.promptLength, eligible: s.shareFrom === null })),
      this.limits,
    );
    let prefillTokens = 0;
    for (const chunk of plan.prefill) {
      const seq = prefilling[chunk.index];
      if (seq.status !== "prefilling" || (this.jobOf.get(seq)?.cancelled ?? true)) continue;
      const forks = chunk.last ? seq.followers.filter((f) => f.status === "prefilling" && f.shareFrom === seq) : [];
      const call: StepCall = {
        firstSlot: seq.slot,
        rows: 1,
        seq: chunk.count,
        tokens: Int32Array.from(seq.tokens.slice(chunk.start, chunk.start + chunk.count)),
        seqIds: [seq.id],
        sample: [chunk.last],
        ...(forks.length > 0 ? { forks: forks.map((f) => ({ row: 0, seqId: f.id })) } : {}),
      };
      const result = await this.run(call, [seq, ...forks]);
      prefillTokens += chunk.count;
      if (result) this.prefilled(seq, chunk.count, forks, result);
    }

    if (decodeCalls === 0 && prefillTokens === 0 && reaped === 0 && admitted === 0 && this.cancelled.size === 0 && !this.idle) {
      throw new Error("batch engine: no sequence can make progress (scheduler bug)");
    }
    this.updateGauges();
    this.stats.step({
      decodeRows,
      decodeCalls,
      prefillTokens,
      prefillCalls: plan.prefill.length,
      copies: this.ops.copies - copiesBefore,
      seconds: (this.now() - started) / 1000,
      running: this.stats.running,
      waiting: this.stats.waiting,
    });
  }

  /** Ends the live sequences of cancelled requests; returns how many. */
  private reap(): number {
    let n = 0;
    for (const job of this.cancelled) {
      for (const seq of job.sequences) {
        if (seq.live) {
          this.finish(seq, "cancelled");
          n++;
        }
      }
    }
    this.cancelled.clear();
    return n;
  }

  /** Gives free slots to waiting choices, oldest request first; returns how many. */
  private admit(): number {
    const count = admissions(
      this.queue.map((j) => ({ waitingChoices: j.waiting.length })),
      this.kv.free,
    );
    for (let i = 0; i < count; i++) {
      const job = this.queue[0];
      const seq = job.waiting.shift()!;
      if (job.waiting.length === 0) this.queue.shift();
      if (!job.admitted) {
        job.admitted = true;
        this.stats.queued((this.now() - job.submittedAt) / 1000);
      }
      const leader = job.sequences.find((s) => s !== seq && s.status === "prefilling" && s.shareFrom === null);
      if (leader) {
        // A sibling is computing this very prompt: wait for it and copy its cache.
        const { slot } = this.kv.allocate(seq, seq.tokens, 0);
        seq.admit(slot, 0, 0);
        seq.shareFrom = leader;
        leader.followers.push(seq);
      } else {
        const a = this.kv.allocate(seq, seq.tokens, seq.promptLength - 1);
        seq.admit(a.slot, a.reused, a.exact);
      }
      this.live.push(seq);
      this.ops.open(seq.id, seq.slot, job.request.sampling, seq.choice, seq.cached);
    }
    return count;
  }

  /** Postprocess of a prefill call: the chunk is cached; at the prompt's end, the first tokens. */
  private prefilled(seq: Sequence, count: number, forks: Sequence[], result: StepResult): void {
    seq.prefilled(count);
    if (seq.cached < seq.promptLength) return;
    for (const f of forks) {
      this.kv.share(seq, f, seq.cached);
      f.shared(seq);
      this.stats.sharedPromptTokens += seq.cached;
    }
    seq.followers.length = 0;
    this.sampled(seq, result.samples[0]);
    forks.forEach((f, i) => this.sampled(f, result.forkSamples?.[i] ?? null));
  }

  /** Postprocess of one sampled token. */
  private sampled(seq: Sequence, sample: RowSample | null): void {
    const job = this.jobOf.get(seq);
    if (!job || job.cancelled || !seq.live) return;
    if (!sample) throw new Error(`batch engine: no sample for sequence ${seq.id}`);
    if (this.stopTokens.has(sample.token)) {
      this.finish(seq, "stop");
      return;
    }
    const limit = seq.accept(sample.token, this.now());
    this.stats.completionTokens++;
    const step = seq.output.push(sample);
    job.channel.push({ type: "delta", choice: seq.choice, text: step.text, completionTokens: seq.generated, ...(step.logprobs ? { logprobs: step.logprobs } : {}) });
    if (step.stopped) this.finish(seq, "stop", true);
    else if (limit) this.finish(seq, limit);
  }

  /** Ends a choice: releases held-back text, reports the finish, frees its slot. */
  private finish(seq: Sequence, reason: FinishReason, stoppedByString = false): void {
    const job = this.jobOf.get(seq)!;
    if (reason !== "cancelled" && !stoppedByString) {
      const tail = seq.output.finish();
      if (tail.stopped) reason = "stop";
      if (tail.text !== "" || (tail.logprobs?.length ?? 0) > 0) {
        job.channel.push({ type: "delta", choice: seq.choice, text: tail.text, completionTokens: seq.generated, ...(tail.logprobs ? { logprobs: tail.logprobs } : {}) });
      }
    }
    this.free(seq);
    seq.end(reason);
    job.channel.push({ type: "finish", choice: seq.choice, reason, completionTokens: seq.generated, decodeSeconds: (seq.lastTokenAt - seq.firstTokenAt) / 1000 });
    if (--job.unfinished === 0) this.done(job);
  }

  /** Gives back a sequence's slot and sampler. */
  private free(seq: Sequence, keepCache = true): void {
    if (seq.slot < 0) return;
    this.kv.release(seq, keepCache);
    this.live = this.live.filter((s) => s !== seq);
    this.ops.close(seq.id);
  }

  private done(job: Job): void {
    if (job.done) return;
    job.done = true;
    job.detach();
    job.channel.end();
    for (const seq of job.sequences) this.jobOf.delete(seq);
    this.cancelled.delete(job);
    this.activeJobs--;
  }

  /** Fails a request: its stream rejects with `error`, its sequences free their slots. */
  private fail(job: Job, error: unknown): void {
    if (job.done) return;
    for (const seq of job.sequences) {
      this.free(seq, false);
      if (seq.status !== "finished") seq.end("cancelled");
    }
    job.waiting.length = 0;
    const at = this.queue.indexOf(job);
    if (at !== -1) this.queue.splice(at, 1);
    job.done = true;
    job.detach();
    job.channel.fail(error);
    for (const seq of job.sequences) this.jobOf.delete(seq);
    this.cancelled.delete(job);
    this.activeJobs--;
  }

  private failAll(error: unknown): void {
    const jobs = new Set<Job | undefined>([...this.queue, ...this.live.map((s) => this.jobOf.get(s))]);
    for (const job of jobs) if (job) this.fail(job, error);
    this.ops.clear();
  }

  /**
   * Sends pending KV copies and sampler changes, then one model call. A failing call fails the
   * requests of its sequences (returns null); the others carry on.
   */
  private async run(call: StepCall, seqs: Sequence[]): Promise<StepResult | null> {
    await this.ops.flush();
    try {
      return await this.backend.step(call);
    } catch (err) {
      for (const seq of seqs) {
        const job = this.jobOf.get(seq);
        if (job) this.fail(job, err);
      }
      return null;
    }
  }

  private updateGauges(): void {
    this.stats.running = this.live.length;
    this.stats.waiting = this.queue.reduce((n, j) => n + j.waiting.length, 0);
  }

  private notifyIdle(): void {
    if (!this.idle || this.looping) return;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const wake of waiters) wake();
  }
}
