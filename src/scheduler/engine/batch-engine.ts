/**
 * The engine: continuous batching, where many sequences of one model share each model step. Every
 * step is schedule -> run -> postprocess:
 *
 * - schedule: drop cancelled sequences, pause those whose reader has fallen behind, pack running
 *   ones into consecutive KV slots, admit waiting choices into free slots (first come first served
 *   within a priority, see `GenerationRequest.priority`; reusing cached prompt prefixes), then plan the step: one decode token for every running
 *   sequence, and prompt chunks of prefilling ones within the step's token budget
 *   (`step-planner.ts`);
 * - run: one decode call over the running slots, then the prefill calls; each call is one message
 *   to the step runner, carrying the slot operations decided since the previous call;
 * - postprocess: sampled tokens become text deltas (stop tokens, stop strings, max tokens and the
 *   context end finish a choice), finished sequences free their slots.
 *
 * The n choices of a request share one prefill: the first choice computes the prompt, the others
 * sample their first token from the same logits (each with its own stream of the seed) and copy
 * its cache. A request that scores its prompt has its prefill chunks return each position's log
 * probabilities too, and computes its whole prompt (no cached prefix); one that embeds its prompt has
 * its chunks' final hidden states pooled (`embedding-pool.ts`; a mean computes its whole prompt too)
 * and generates nothing. A request with a constraint the runner has not compiled lately waits for
 * its compile, started between steps (`StepRunner.prepareConstraint`); while one compiles, the
 * constrained sequences whose masks come from the thread that compiles wait in their slots
 * (`StepRunner.constraintWaits`) and the others step on, and requests behind it may be admitted first. Requests beyond the waiting
 * bound are refused at once (`OverloadedError`).
 * A failure fails the requests of the sequences it touched, and no others.
 */
import { type SlidingWindowShape, slidingCacheCapacity } from "../../runtime/artifact/index.js";
import type { PositionScores } from "../../runtime/sampling/index.js";
import type { RowSample, StepResult } from "../../runtime/text-worker/protocol.js";
import { EngineClosedError, OverloadedError } from "../errors.js";
import type { FinishReason, GenerationEvent, GenerationRequest, GenerationStream, TokenLogprob, TokenText } from "../types.js";
import { Channel } from "./channel.js";
import { lookupDraft, predictedDraft } from "./draft.js";
import { ChoiceOutput, describeToken } from "./choice-output.js";
import { EngineStats } from "./engine-stats.js";
import { KvSlots, type PrefixReuse } from "./kv-slots.js";
import { Sequence, type SequenceStatus } from "./sequence.js";
import { SlotOps } from "./slot-ops.js";
import { admissions, DEFAULT_PREFILL_CHUNK, DEFAULT_STEP_TOKENS, planStep, waitingAfterAdmission, type StepLimits } from "./step-planner.js";
import type { ComputeGate } from "../compute-gate.js";
import type { StepCall, StepRunner } from "./step-runner.js";
import {
  CHECKS_HELD_STEPS,
  DEFAULT_MAX_RUNNING,
  DEFAULT_MAX_WAITING,
  DEFAULT_PRIORITY_AGING_MS,
  MAX_DRAFT_CHECKS_PER_STEP,
  PREDICTION_DRAFT_TOKENS,
} from "../defaults.js";

export interface BatchEngineOptions {
  /** Name used in error messages: the model's slug. */
  name: string;
  /** Tokens each sequence may hold, prompt plus completion (the model's context, or less to bound KV memory). */
  contextLength: number;
  /** Token ids that end a choice (never emitted). */
  stopTokenIds: readonly number[];
  /** Most sequences (choices) holding a KV slot at once, i.e. the largest decode batch. Default: every slot of the runner. */
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
  /** The model's sliding-window layers (`ModelShape.slidingWindow`), whose KV rings limit how far back a cached prefix can be cut. Default none. */
  slidingWindow?: SlidingWindowShape;
  /**
   * Events per choice a reader may leave undelivered before the choice pauses (holding its slot,
   * skipping decode steps) until the reader has taken half of them: a slow reader costs no memory.
   * Default 64.
   */
  maxBacklog?: number;
  /** Clock in milliseconds. Default `performance.now`. */
  now?: () => number;
  /** Turns on the machine shared with the process's other models (see `ComputeGate`). Default: none, calls run at once. */
  gate?: ComputeGate;
  /**
   * Most draft tokens checked per step when one sequence decodes alone (prompt lookup, see
   * `draft.ts`): its next tokens guessed from its own earlier ones and confirmed in one model call,
   * where a decode call confirms one. Default 0: never (a request's prediction still drafts).
   */
  draftTokens?: number;
  /**
   * The runner checks drafts (`StepRequest.verify`) and the cache can be cut back to any length (no
   * sliding-window layers). False: no drafts at all, predictions included. Default true.
   */
  checksDrafts?: boolean;
  /**
   * Milliseconds of waiting that count as one step of priority: a waiting request is overtaken by
   * a newcomer of a smaller priority only while it has waited less than this many milliseconds times
   * the difference. Default {@link DEFAULT_PRIORITY_AGING_MS}.
   */
  priorityAgingMs?: number;
}

export { DEFAULT_MAX_RUNNING, DEFAULT_MAX_WAITING };
const DEFAULT_MAX_BACKLOG = 64;

/** One submit: a request, its choices as sequences, and the channel their events go to. */
interface Submission {
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
  /** The request's own end tokens (`sampling.stop_token_ids`), when it has any. */
  stopIds?: ReadonlySet<number>;
  /** Its constraint's compile (StepRunner.prepareConstraint): to start, under way, or done (or none needed). Only a done one is admitted. */
  grammar: "pending" | "compiling" | "ready";
}

/** One model call of a step, as planned. */
type PlannedCall =
  | { kind: "decode"; firstSlot: number; seqs: Sequence[] }
  | { kind: "verify"; seq: Sequence; draft: number[]; predicted: boolean }
  | { kind: "prefill"; seq: Sequence; start: number; count: number; last: boolean; forks: Sequence[] };

/** One KV slot as {@link BatchEngine.slotStates} reports it. */
export interface SlotState {
  slot: number;
  /** The sequence holding it (prefilling or running), or null for a free slot. */
  sequence: {
    id: number;
    status: SequenceStatus;
    /** Tokens of its prompt; of them and its output, how many sit in the slot; tokens generated; the most it may generate. */
    promptTokens: number;
    cached: number;
    generated: number;
    maxTokens: number;
  } | null;
}

export class BatchEngine {
  /** Submissions with choices still waiting for a slot, oldest first. */
  private readonly queue: Submission[] = [];
  /** Sequences holding a slot, in admission order (prefill goes oldest first). */
  private live: Sequence[] = [];
  private readonly submissionOf = new Map<Sequence, Submission>();
  private readonly byId = new Map<number, Sequence>();
  private readonly cancelled = new Set<Submission>();
  private readonly kv: KvSlots;
  private readonly ops: SlotOps;
  private readonly limits: StepLimits;
  private readonly maxWaiting: number;
  private readonly maxBacklog: number;
  private readonly stopTokens: Set<number>;
  private readonly now: () => number;
  private looping = false;
  /** Constraints compiling on the runner's grammar thread now (see StepRunner.prepareConstraint). */
  private compiling = 0;
  private closed = false;
  private activeSubmissions = 0;
  private idleWaiters: Array<() => void> = [];
  private wakeUp: (() => void) | null = null;
  private woken = false;
  private nextSequenceId = 1;
  /** Gauges, histograms and hooks for metrics. */
  readonly stats: EngineStats;

  constructor(
    private readonly runner: StepRunner,
    private readonly text: TokenText,
    private readonly options: BatchEngineOptions,
  ) {
    const slots = Math.min(options.maxRunning ?? runner.slots, runner.slots);
    if (!(slots >= 1)) throw new RangeError(`maxRunning must be at least 1 (the runner has ${runner.slots} slots)`);
    const prefillChunk = options.prefillChunk ?? DEFAULT_PREFILL_CHUNK;
    this.limits = { stepTokens: options.stepTokens ?? Math.max(DEFAULT_STEP_TOKENS, prefillChunk + slots), prefillChunk };
    if (!(this.limits.prefillChunk >= 1 && this.limits.stepTokens >= 1)) throw new RangeError("stepTokens and prefillChunk must be positive");
    const sw = options.slidingWindow;
    this.kv = new KvSlots(slots, {
      reuse: options.prefixReuse ?? "exact",
      align: this.limits.prefillChunk,
      ...(sw ? { ring: { window: sw.window, capacity: slidingCacheCapacity(sw.window) } } : {}),
    });
    this.ops = new SlotOps(this.kv);
    this.maxWaiting = options.maxWaiting ?? DEFAULT_MAX_WAITING;
    this.maxBacklog = options.maxBacklog ?? DEFAULT_MAX_BACKLOG;
    this.stopTokens = new Set(options.stopTokenIds);
    this.now = options.now ?? (() => performance.now());
    this.stats = new EngineStats(slots, () => this.kv.prefix);
  }

  /** The model's end tokens: a sequence that samples one ends there. */
  get stopTokenIds(): number[] {
    return [...this.stopTokens];
  }

  /** Tokens each sequence may hold, prompt plus completion. */
  get contextLength(): number {
    return this.options.contextLength;
  }

  /** Sequences holding a KV slot at once: the largest decode batch. */
  get slots(): number {
    return this.kv.count;
  }

  /** Each KV slot and the sequence holding it now, if any (what llama.cpp's `/slots` shows). */
  slotStates(): SlotState[] {
    const holders = new Map(this.live.filter((s) => s.slot >= 0).map((s) => [s.slot, s]));
    return Array.from({ length: this.kv.count }, (_, slot) => {
      const seq = holders.get(slot);
      return seq
        ? {
            slot,
            sequence: {
              id: seq.id,
              status: seq.status,
              promptTokens: seq.promptLength,
              cached: seq.cached,
              generated: seq.generated,
              maxTokens: seq.maxTokens,
            },
          }
        : { slot, sequence: null };
    });
  }

  /** Requests waiting for their first slot, and requests generating. */
  get load(): { waiting: number; running: number } {
    const waiting = this.queue.filter((s) => !s.admitted).length;
    return { waiting, running: this.activeSubmissions - waiting };
  }

  /**
   * Queues a request and returns its event stream. Throws `OverloadedError` at once when the
   * waiting queue is full, and `EngineClosedError` once the engine is closed. Aborting `signal`
   * (or ending the iteration early) cancels the request: it leaves the queue, or its generation
   * stops at the next step.
   */
  submit(request: GenerationRequest, signal?: AbortSignal): GenerationStream {
    if (this.closed) throw new EngineClosedError(this.options.name);
    this.check(request);
    const n = request.n ?? 1;
    const wouldWait = waitingAfterAdmission([...this.queue.map((s) => ({ waitingChoices: s.waiting.length })), { waitingChoices: n }], this.kv.free);
    if (wouldWait > this.maxWaiting) throw new OverloadedError(this.options.name, this.load.waiting);
    const submission: Submission = {
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
      ...(request.sampling.stop_token_ids?.length ? { stopIds: new Set(request.sampling.stop_token_ids) } : {}),
      grammar: request.constraint && this.runner.prepareConstraint && !this.runner.constraintPrepared?.(request.constraint) ? "pending" : "ready",
    };
    const cancel = () => this.cancel(submission);
    submission.channel = new Channel<GenerationEvent>(cancel, () => this.readerCaughtUp(submission));
    for (let choice = 0; choice < n; choice++) {
      const output = new ChoiceOutput(this.text.createDecoder({ renderSpecial: request.renderSpecial }), {
        stop: request.stop,
        includeStop: request.includeStop,
        logprobs: request.logprobs,
        tokenBytes: (id) => this.text.tokenBytes(id),
        endRepeatedCalls: request.endRepeatedCalls,
        minTokens: request.sampling.min_tokens ?? 0,
        minIndent: request.minIndent,
      });
      const seq = new Sequence({
        id: this.nextSequenceId++,
        choice,
        promptIds: request.promptIds,
        maxTokens: request.maxTokens,
        contextLength: this.contextLength,
        output,
        scorePrompt: request.promptLogprobs !== undefined,
        ...(request.prediction?.length ? { prediction: request.prediction } : {}),
        ...(request.embed ? { embed: request.embed.pooling } : {}),
      });
      submission.sequences.push(seq);
      this.submissionOf.set(seq, submission);
      this.byId.set(seq.id, seq);
    }
    submission.waiting = [...submission.sequences];
    if (signal) {
      signal.addEventListener("abort", cancel, { once: true });
      submission.detach = () => signal.removeEventListener("abort", cancel);
    }
    this.enqueue(submission);
    this.activeSubmissions++;
    this.updateGauges();
    if (signal?.aborted) cancel();
    else this.kick();
    return submission.channel;
  }

  /**
   * Queues a submission behind every waiting one of the same or a smaller priority (arrival order
   * within a priority). A waiting submission's priority counts one less for each `priorityAgingMs`
   * it has waited, so one of a larger priority (a batch line) is overtaken only by those that arrive
   * soon after it, and never waits for ever behind a steady stream of smaller ones.
   */
  private enqueue(submission: Submission): void {
    const priority = submission.request.priority ?? 0;
    const aging = this.options.priorityAgingMs ?? DEFAULT_PRIORITY_AGING_MS;
    const aged = (s: Submission) => (s.request.priority ?? 0) - Math.floor((submission.submittedAt - s.submittedAt) / aging);
    // A head partly admitted (some of its choices running) keeps its place.
    const behind = this.queue.findIndex((s, i) => !(i === 0 && s.admitted) && aged(s) > priority);
    if (behind < 0) this.queue.push(submission);
    else this.queue.splice(behind, 0, submission);
  }

  /** Refuses new requests; resolves once queued and running ones have finished. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.idle && !this.looping) return;
    await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
  }

  private get idle(): boolean {
    return this.queue.length === 0 && this.live.length === 0;
  }

  private check(request: GenerationRequest): void {
    if (request.promptIds.length === 0) throw new RangeError("the prompt must have at least one token");
    if (request.promptIds.length >= this.contextLength) {
      throw new RangeError(`a prompt of ${request.promptIds.length} tokens does not fit the context of ${this.contextLength}`);
    }
    if (!Number.isInteger(request.maxTokens) || request.maxTokens < 0)
      throw new RangeError(`maxTokens must be a non-negative integer, got ${request.maxTokens}`);
    const n = request.n ?? 1;
    if (!Number.isInteger(n) || n < 1) throw new RangeError(`n must be a positive integer, got ${n}`);
    if (request.embed && (request.maxTokens !== 0 || n !== 1)) throw new RangeError("an embedding request asks for no new tokens and one choice");
  }

  /** A request's caller went away: waiting choices end now, running ones at the next step. */
  private cancel(submission: Submission): void {
    if (submission.done || submission.cancelled) return;
    submission.cancelled = true;
    submission.detach();
    for (const seq of submission.waiting.splice(0)) this.finish(seq, "cancelled");
    const at = this.queue.indexOf(submission);
    if (at !== -1) this.queue.splice(at, 1);
    if (!submission.done) this.cancelled.add(submission);
    this.updateGauges();
    this.wake();
    this.notifyIdle();
  }

  /** The consumer took an event: a choice paused for it may go on once half its backlog is read. */
  private readerCaughtUp(submission: Submission): void {
    if (submission.channel.backlog < this.backlogLimit(submission) / 2 && submission.sequences.some((s) => s.paused)) this.wake();
  }

  private backlogLimit(submission: Submission): number {
    return this.maxBacklog * submission.sequences.length;
  }

  private kick(): void {
    if (this.looping) {
      this.wake();
      return;
    }
    this.looping = true;
    // After the current task, so a burst of submits is scheduled together.
    queueMicrotask(() => void this.loop());
  }

  private wake(): void {
    this.woken = true;
    const wake = this.wakeUp;
    this.wakeUp = null;
    wake?.();
  }

  /** Waits for a reader to catch up, a new request or a cancellation. */
  private async sleep(): Promise<void> {
    if (!this.woken) await new Promise<void>((resolve) => (this.wakeUp = resolve));
    this.woken = false;
  }

  private async loop(): Promise<void> {
    try {
      while (!this.idle || !this.ops.empty) {
        // Idle, but closes of the last finished sequences still owe the worker a message.
        if (this.idle) await this.run({ firstSlot: 0, rows: 0, tokensPerRow: 0, tokens: new Int32Array(0), seqIds: [], sample: [] }, []);
        else if (!(await this.iteration())) await this.sleep();
      }
    } catch (err) {
      this.failAll(err);
    } finally {
      this.looping = false;
      this.notifyIdle();
    }
  }

  /** One step: schedule -> run -> postprocess. Returns false when nothing could move (every running sequence waits for its reader). */
  private async iteration(): Promise<boolean> {
    this.startCompiles();
    const started = this.now();
    const copiesBefore = this.ops.copies;
    const changed = this.schedule();
    const calls = this.plan();
    let decodeRows = 0;
    let decodeCalls = 0;
    let prefillTokens = 0;
    let prefillCalls = 0;
    for (const call of calls) {
      if (call.kind === "decode") {
        // A failure earlier in this step may have freed some of these; they wait a step.
        if (call.seqs.some((s, r) => !s.ready || s.slot !== call.firstSlot + r)) continue;
        const result = await this.run(decodeCall(call), call.seqs);
        decodeRows += call.seqs.length;
        decodeCalls++;
        if (result) this.decoded(call.seqs, result);
      } else if (call.kind === "verify") {
        if (!call.seq.ready) continue;
        const result = await this.run(verifyCall(call), [call.seq]);
        decodeRows++;
        decodeCalls++;
        if (result) this.verified(call, result);
      } else {
        const submission = this.submissionOf.get(call.seq);
        if (call.seq.status !== "prefilling" || !submission || submission.cancelled) continue;
        const forks = call.forks.filter((f) => f.status === "prefilling" && f.shareFrom === call.seq);
        const result = await this.run(prefillCall(call, forks, submission.request), [call.seq, ...forks]);
        prefillTokens += call.count;
        prefillCalls++;
        if (result) this.prefilled(call.seq, call.start, call.count, forks, result);
      }
    }
    const progressed = changed || decodeCalls + prefillCalls > 0;
    if (!progressed && !this.idle && !this.live.some((s) => s.paused) && this.compiling === 0) {
      throw new Error("batch engine: no sequence can make progress (scheduler bug)");
    }
    this.updateGauges();
    this.stats.step({
      decodeRows,
      decodeCalls,
      prefillTokens,
      prefillCalls,
      copies: this.ops.copies - copiesBefore,
      seconds: (this.now() - started) / 1000,
      running: this.stats.running,
      waiting: this.stats.waiting,
    });
    return progressed;
  }

  /**
   * Starts the compiles of waiting requests' constraints. Called between steps only: a compile
   * queues ahead of every mask on the grammar thread, so none may start while a step waits for masks.
   */
  private startCompiles(): void {
    const prepare = this.runner.prepareConstraint?.bind(this.runner);
    if (!prepare) return;
    for (const submission of this.queue) {
      if (submission.grammar !== "pending") continue;
      submission.grammar = "compiling";
      this.compiling++;
      const started = performance.now();
      prepare(submission.request.constraint!)
        .then(
          () => {
            submission.grammar = "ready";
            this.stats.compiled((performance.now() - started) / 1000, false);
          },
          (err: unknown) => {
            this.stats.compiled((performance.now() - started) / 1000, true);
            this.fail(submission, err);
          },
        )
        .finally(() => {
          this.compiling--;
          this.wake();
        });
    }
  }

  /** Holds the constrained sequences whose masks wait behind a compile (all of them while one compiles, where the runner cannot tell which). */
  private holdConstrained(): void {
    const waits = this.runner.constraintWaits?.bind(this.runner);
    for (const seq of this.live) {
      const constraint = this.submissionOf.get(seq)?.request.constraint;
      seq.grammarHeld = constraint !== undefined && this.compiling > 0 && (waits === undefined || waits(seq.id, constraint));
    }
  }

  /** Schedule: reap cancelled, pause or resume for readers, pack slots, admit. Returns whether anything changed. */
  private schedule(): boolean {
    const reaped = this.reap();
    this.applyBackpressure();
    this.holdConstrained();
    this.kv.pack();
    const admitted = this.admit();
    this.updateGauges();
    return reaped + admitted > 0;
  }

  /**
   * The step's model calls: one decode call per run of consecutive ready slots, less the sequences
   * whose drafts are checked (each in a call of its own), then prompt chunks.
   */
  private plan(): PlannedCall[] {
    const runs = this.kv.runs();
    const alone = runs.length === 1 && runs[0].holders.length === 1;
    const calls: PlannedCall[] = [];
    let checks = 0;
    for (const run of runs) {
      let part: Sequence[] = [];
      let first = run.first;
      const flush = () => {
        if (part.length > 0) calls.push({ kind: "decode", firstSlot: first, seqs: part });
        part = [];
      };
      run.holders.forEach((holder, r) => {
        const check = checks < MAX_DRAFT_CHECKS_PER_STEP ? this.draftFor(holder as Sequence, alone) : null;
        if (check === null) return void part.push(holder as Sequence);
        flush();
        calls.push(check);
        checks++;
        first = run.first + r + 1;
      });
      flush();
    }
    const decodeRows = calls.reduce((n, c) => n + (c.kind === "decode" ? c.seqs.length : c.kind === "verify" ? 1 + c.draft.length : 0), 0);
    const prefilling = this.live.filter((s) => s.status === "prefilling");
    const step = planStep(
      decodeRows,
      prefilling.map((s) => ({
        cached: s.cached,
        promptLength: s.promptLength,
        eligible: s.shareFrom === null && !s.grammarHeld,
        background: s.embedding !== null,
      })),
      this.limits,
    );
    for (const chunk of step.prefill) {
      const seq = prefilling[chunk.index];
      calls.push({ kind: "prefill", seq, start: chunk.start, count: chunk.count, last: chunk.last, forks: chunk.last ? [...seq.followers] : [] });
    }
    return calls;
  }

  /**
   * The check of a sequence's draft: from its prediction, else, for a sequence decoding alone, from
   * its own tokens; null when there is none. A sequence beside others checks only its prediction,
   * which its client asked for, in a call of its own, and holds off for a few steps after a check
   * that confirmed less than half its draft: lookup drafts, or a prediction the answer has left,
   * would cost a batch more calls than they save. A draft holds no more tokens than the sequence
   * may still generate, or its context hold.
   */
  private draftFor(seq: Sequence, alone: boolean): Extract<PlannedCall, { kind: "verify" }> | null {
    if (this.options.checksDrafts === false) return null;
    if (!alone && (!seq.prediction || seq.checksHeldBeside > 0)) {
      if (seq.checksHeldBeside > 0) seq.checksHeldBeside--;
      return null;
    }
    const room = Math.min(seq.maxTokens - seq.generated - 1, this.contextLength - seq.cached - 1);
    if (seq.prediction) {
      const draft = predictedDraft(seq.prediction, seq.generatedTokens, { maxTokens: Math.min(room, PREDICTION_DRAFT_TOKENS) });
      if (draft.length > 0) return { kind: "verify", seq, draft, predicted: true };
    }
    if (!alone) return null;
    const draft = lookupDraft(seq.tokens, { maxTokens: Math.min(room, this.options.draftTokens ?? 0) });
    return draft.length > 0 ? { kind: "verify", seq, draft, predicted: false } : null;
  }

  /** Ends the live sequences of cancelled requests; returns how many. */
  private reap(): number {
    let n = 0;
    for (const submission of this.cancelled) {
      for (const seq of submission.sequences) {
        if (seq.live) {
          this.finish(seq, "cancelled");
          n++;
        }
      }
    }
    this.cancelled.clear();
    return n;
  }

  /** A running choice whose reader has too many events undelivered skips decode steps until it catches up. */
  private applyBackpressure(): void {
    for (const seq of this.live) {
      const submission = this.submissionOf.get(seq);
      if (!submission || seq.status !== "running") continue;
      const backlog = submission.channel.backlog;
      const limit = this.backlogLimit(submission);
      if (!seq.paused && backlog >= limit) seq.paused = true;
      else if (seq.paused && backlog < limit / 2) seq.paused = false;
    }
  }

  /** Gives free slots to waiting choices, oldest request first; returns how many. */
  private admit(): number {
    // A request whose constraint is still compiling keeps its place but lets those behind it in.
    const ready = this.queue.filter((s) => s.grammar === "ready");
    const count = admissions(
      ready.map((s) => ({ waitingChoices: s.waiting.length })),
      this.kv.free,
    );
    for (let i = 0; i < count; i++) {
      const submission = ready.find((s) => s.waiting.length > 0)!;
      const seq = submission.waiting.shift()!;
      if (submission.waiting.length === 0) this.queue.splice(this.queue.indexOf(submission), 1);
      if (!submission.admitted) {
        submission.admitted = true;
        this.stats.queued((this.now() - submission.submittedAt) / 1000);
      }
      const leader = submission.sequences.find((s) => s !== seq && s.status === "prefilling" && s.shareFrom === null);
      if (leader) {
        // A sibling is computing this very prompt: wait for it and copy its cache.
        const { slot } = this.kv.allocate(seq, seq.tokens, 0);
        seq.admit(slot, 0, 0);
        seq.shareFrom = leader;
        leader.followers.push(seq);
      } else {
        // A scored prompt needs the logits of every position, and a mean embedding their hidden states, which a reused prefix never computes.
        const computesAll = seq.promptLogprobs !== null || seq.embedding?.pooling === "mean";
        const a = this.kv.allocate(seq, seq.tokens, computesAll ? 0 : seq.promptLength - 1);
        seq.admit(a.slot, a.reused, a.exact);
      }
      this.live.push(seq);
      this.ops.open(seq.id, seq.slot, submission.request, seq.choice, seq.cached);
    }
    return count;
  }

  /**
   * Run: one step message with the slot operations pending before it. A sequence the worker could
   * not serve fails its request; a forward pass that failed fails the requests of the call's
   * sequences (returns null); a message that never came back also fails those its operations named.
   */
  private async run(call: Omit<StepCall, "ops">, seqs: Sequence[]): Promise<StepResult | null> {
    const ops = this.ops.take();
    let result: StepResult;
    try {
      const step = () => this.runner.step({ ...call, ops });
      result = await (this.options.gate ? this.options.gate.run("text", step) : step());
    } catch (err) {
      this.failSequences([...seqs, ...this.named(ops.flatMap((op) => (op.op !== "close" && op.seqId !== undefined ? [op.seqId] : [])))], err);
      return null;
    }
    for (const f of result.failed) this.failSequences(this.named([f.seqId]), new Error(f.message));
    if (result.forwardError !== undefined) {
      this.failSequences(seqs, new Error(result.forwardError));
      return null;
    }
    return result;
  }

  /** Postprocess of a decode call: each row cached its input and sampled its next token. */
  private decoded(seqs: Sequence[], result: StepResult): void {
    seqs.forEach((s, r) => {
      if (!s.live || s.status !== "running") return;
      s.decoded();
      this.sampled(s, result.samples[r]);
    });
  }

  /** Postprocess of a draft's check: each sample kept cached its input (the draft token before it), as a decode step would have. */
  private verified(call: Extract<PlannedCall, { kind: "verify" }>, result: StepResult): void {
    const { seq } = call;
    const samples = [result.samples[0] ?? null, ...(result.confirmed ?? [])];
    this.stats.drafted(call.draft.length, samples.length - 1);
    if (2 * (samples.length - 1) < call.draft.length) seq.checksHeldBeside = CHECKS_HELD_STEPS;
    for (const [i, sample] of samples.entries()) {
      if (!seq.live || seq.status !== "running") return;
      if (i > 0 && call.predicted) seq.predictionAccepted++;
      seq.decoded();
      this.sampled(seq, sample);
    }
  }

  /**
   * Postprocess of a prefill call: the chunk is cached (and scored, when asked); at the prompt's
   * end, the scored prompt and the first tokens (or the end, for a request of no new tokens).
   */
  private prefilled(seq: Sequence, start: number, count: number, forks: Sequence[], result: StepResult): void {
    if (seq.status !== "prefilling") return;
    if (seq.promptLogprobs) {
      if (!result.scores) {
        this.failSequences([seq], new Error("the text worker returned no prompt scores"));
        return;
      }
      this.addScores(seq, start, result.scores);
    }
    if (seq.embedding?.wants(start + count === seq.promptLength)) {
      if (!result.pooled) {
        this.failSequences([seq], new Error("the text worker returned no pooled hidden states"));
        return;
      }
      seq.embedding.add(result.pooled, count);
    }
    seq.prefilled(count);
    if (seq.cached < seq.promptLength) return;
    const alive = forks.filter((f) => f.status === "prefilling");
    for (const f of alive) {
      this.kv.share(seq, f, seq.cached);
      f.shared(seq);
      this.stats.sharedPromptTokens += seq.cached;
    }
    seq.followers.length = 0;
    const submission = this.submissionOf.get(seq);
    if (!submission || submission.cancelled) return;
    for (const s of [seq, ...alive]) {
      if (seq.promptLogprobs) submission.channel.push({ type: "prompt", choice: s.choice, logprobs: seq.promptLogprobs });
      if (seq.embedding) submission.channel.push({ type: "embedding", choice: s.choice, embedding: seq.embedding.result() });
      if (seq.maxTokens === 0) this.finish(s, "length");
    }
    if (seq.maxTokens === 0) return;
    this.sampled(seq, result.samples[0]);
    forks.forEach((f, i) => {
      if (alive.includes(f)) this.sampled(f, result.forkSamples?.[i] ?? null);
    });
  }

  /** Appends a chunk's scores from position `start`: each is the log probability of the prompt token after it. */
  private addScores(seq: Sequence, start: number, scores: PositionScores): void {
    const bytes = (id: number) => this.text.tokenBytes(id);
    if (start === 0) seq.promptLogprobs!.push({ ...describeToken(bytes, seq.tokens[0], 0), logprob: null, rank: null, top: null });
    const k = scores.top;
    for (let p = 0; p < scores.logprobs.length; p++) {
      const top: TokenLogprob[] = [];
      for (let i = p * k; i < (p + 1) * k; i++) top.push(describeToken(bytes, scores.topIds[i], scores.topLogprobs[i]));
      seq.promptLogprobs!.push({ ...describeToken(bytes, seq.tokens[start + 1 + p], scores.logprobs[p]), rank: scores.ranks[p] || null, top });
    }
  }

  /** Postprocess of one sampled token (null: the worker failed the sequence, already handled). */
  private sampled(seq: Sequence, sample: RowSample | null): void {
    const submission = this.submissionOf.get(seq);
    if (!submission || submission.cancelled || !seq.live || !sample) return;
    // The model's own end comes first: a stop_token_ids id that is also its end-of-turn token is not the request's stop.
    const endOfTurn = this.stopTokens.has(sample.token);
    const requestStop = !endOfTurn && submission.stopIds?.has(sample.token) === true;
    if (endOfTurn || (requestStop && !submission.request.includeStop)) {
      this.finish(seq, "stop", false, requestStop ? sample.token : undefined);
      return;
    }
    const limit = seq.accept(sample.token, this.now());
    this.stats.completionTokens++;
    const step = seq.output.push(sample);
    submission.channel.push({
      type: "delta",
      choice: seq.choice,
      text: step.text,
      completionTokens: seq.generated,
      ...(step.logprobs ? { logprobs: step.logprobs } : {}),
    });
    if (step.stopped) this.finish(seq, step.dedented ? "length" : "stop", true, step.stopString);
    else if (requestStop) this.finish(seq, "stop", false, sample.token);
    else if (limit || this.pastLineTimeLimit(seq, submission.request, sample.token)) this.finish(seq, "length");
  }

  /** The request's time limit has passed since the choice's first token, and this token ends a line. */
  private pastLineTimeLimit(seq: Sequence, request: GenerationRequest, token: number): boolean {
    const limit = request.lineTimeLimitMs;
    return limit !== undefined && seq.lastTokenAt - seq.firstTokenAt > limit && this.text.tokenBytes(token).includes(0x0a);
  }

  /**
   * Ends a choice: releases held-back text, reports the finish, frees its slot. `stopReason`: the
   * request's stop string or stop token that ended it, if one did.
   */
  private finish(seq: Sequence, reason: FinishReason, stoppedByString = false, stopReason?: string | number): void {
    const submission = this.submissionOf.get(seq)!;
    if (reason !== "cancelled" && !stoppedByString) {
      const tail = seq.output.finish();
      if (tail.stopped) {
        reason = tail.dedented ? "length" : "stop";
        stopReason = tail.stopString;
      }
      if (tail.text !== "" || (tail.logprobs?.length ?? 0) > 0) {
        submission.channel.push({
          type: "delta",
          choice: seq.choice,
          text: tail.text,
          completionTokens: seq.generated,
          ...(tail.logprobs ? { logprobs: tail.logprobs } : {}),
        });
      }
    }
    this.free(seq);
    seq.end(reason);
    submission.channel.push({
      type: "finish",
      choice: seq.choice,
      reason,
      ...(stopReason !== undefined ? { stopReason } : {}),
      completionTokens: seq.generated,
      decodeSeconds: (seq.lastTokenAt - seq.firstTokenAt) / 1000,
      cachedPromptTokens: seq.reusedPrompt,
      ...(seq.prediction ? { prediction: { accepted: seq.predictionAccepted, rejected: Math.max(0, seq.prediction.length - seq.predictionAccepted) } } : {}),
    });
    if (--submission.unfinished === 0) this.done(submission);
  }

  /** Gives back a sequence's slot and sampler. */
  private free(seq: Sequence, keepCache = true): void {
    if (seq.slot < 0) return;
    this.kv.release(seq, keepCache);
    this.live = this.live.filter((s) => s !== seq);
    this.ops.close(seq.id);
  }

  private done(submission: Submission): void {
    if (submission.done) return;
    submission.done = true;
    submission.detach();
    submission.channel.end();
    this.forget(submission);
  }

  private forget(submission: Submission): void {
    for (const seq of submission.sequences) {
      this.submissionOf.delete(seq);
      this.byId.delete(seq.id);
    }
    this.cancelled.delete(submission);
    this.activeSubmissions--;
  }

  /** The sequences of these ids that are still in a request. */
  private named(seqIds: readonly number[]): Sequence[] {
    return seqIds.flatMap((id) => this.byId.get(id) ?? []);
  }

  private failSequences(seqs: readonly Sequence[], error: unknown): void {
    for (const seq of seqs) {
      const submission = this.submissionOf.get(seq);
      if (submission) this.fail(submission, error);
    }
  }

  /** Fails a request: its stream rejects with `error`, its sequences free their slots and forget their caches. */
  private fail(submission: Submission, error: unknown): void {
    if (submission.done) return;
    for (const seq of submission.sequences) {
      this.free(seq, false);
      if (seq.status !== "finished") seq.end("cancelled");
    }
    submission.waiting.length = 0;
    const at = this.queue.indexOf(submission);
    if (at !== -1) this.queue.splice(at, 1);
    submission.done = true;
    submission.detach();
    submission.channel.fail(error);
    this.forget(submission);
  }

  private failAll(error: unknown): void {
    const submissions = new Set<Submission | undefined>([...this.queue, ...this.live.map((s) => this.submissionOf.get(s))]);
    for (const submission of submissions) if (submission) this.fail(submission, error);
    this.ops.clear();
  }

  private updateGauges(): void {
    this.stats.running = this.live.length;
    this.stats.waiting = this.queue.reduce((n, s) => n + s.waiting.length, 0);
    this.stats.paused = this.live.reduce((n, s) => n + (s.paused ? 1 : 0), 0);
  }

  private notifyIdle(): void {
    if (!this.idle || this.looping) return;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const wake of waiters) wake();
  }
}

function decodeCall(call: Extract<PlannedCall, { kind: "decode" }>): Omit<StepCall, "ops"> {
  return {
    firstSlot: call.firstSlot,
    rows: call.seqs.length,
    tokensPerRow: 1,
    tokens: Int32Array.from(call.seqs, (s) => s.nextInput),
    seqIds: call.seqs.map((s) => s.id),
    sample: call.seqs.map(() => true),
  };
}

function verifyCall(call: Extract<PlannedCall, { kind: "verify" }>): Omit<StepCall, "ops"> {
  const { seq, draft } = call;
  return {
    firstSlot: seq.slot,
    rows: 1,
    tokensPerRow: 1 + draft.length,
    tokens: Int32Array.from([seq.nextInput, ...draft]),
    seqIds: [seq.id],
    sample: [true],
    verify: true,
  };
}

function prefillCall(call: Extract<PlannedCall, { kind: "prefill" }>, forks: Sequence[], request: GenerationRequest): Omit<StepCall, "ops"> {
  const { seq } = call;
  const generates = seq.maxTokens > 0;
  const end = call.start + call.count;
  return {
    firstSlot: seq.slot,
    rows: 1,
    tokensPerRow: call.count,
    tokens: Int32Array.from(seq.tokens.slice(call.start, end)),
    seqIds: [seq.id],
    sample: [call.last && generates],
    ...(forks.length > 0 && generates ? { forks: forks.map((f) => ({ row: 0, seqId: f.id })) } : {}),
    ...(request.promptLogprobs
      ? { score: { row: 0, top: request.promptLogprobs.top, next: call.last ? -1 : seq.tokens[end], ...(request.promptLogprobs.ranks ? { ranks: true } : {}) } }
      : {}),
    ...(seq.embedding?.wants(call.last) ? { embed: { row: 0, pooling: seq.embedding.pooling } } : {}),
  };
}
