/**
 * The serial engine: one model, one sequence at a time, first come first served. The runtime's
 * single-sequence `generate()` owns KV slot 0, so two generations on one model must never overlap;
 * this engine is what guarantees it. Requests wait in a bounded FIFO queue; past its bound they are
 * refused at once (`OverloadedError`) rather than left to time out. A cancelled request leaves the
 * queue, or stops its generation at the next token.
 */
import { Channel } from "./channel.js";
import { ChoiceOutput } from "./choice-output.js";
import { EngineClosedError, OverloadedError } from "./errors.js";
import type { Engine, FinishReason, GenerationEvent, GenerationRequest, GenerationStream, TokenBackend } from "./types.js";

export interface SerialEngineOptions {
  /** Name used in error messages: the model's slug. */
  name: string;
  /** Most requests waiting behind the running one; more are refused with `OverloadedError`. Default 64. */
  maxWaiting?: number;
  /** Clock in milliseconds, for decode timings. Default `performance.now`. */
  now?: () => number;
}

export const DEFAULT_MAX_WAITING = 64;

interface Job {
  request: GenerationRequest;
  channel: Channel<GenerationEvent>;
  controller: AbortController;
  /** Removes the listener on the caller's signal. */
  detach: () => void;
}

export class SerialEngine implements Engine {
  private readonly queue: Job[] = [];
  private running: Job | null = null;
  private closed = false;
  private idleWaiters: Array<() => void> = [];
  private readonly maxWaiting: number;
  private readonly now: () => number;

  constructor(
    private readonly backend: TokenBackend,
    private readonly options: SerialEngineOptions,
  ) {
    this.maxWaiting = options.maxWaiting ?? DEFAULT_MAX_WAITING;
    this.now = options.now ?? (() => performance.now());
  }

  get load(): { waiting: number; running: number } {
    return { waiting: this.queue.length, running: this.running ? 1 : 0 };
  }

  submit(request: GenerationRequest, signal?: AbortSignal): GenerationStream {
    if (this.closed) throw new EngineClosedError(this.options.name);
    checkRequest(request);
    if (this.running && this.queue.length >= this.maxWaiting) throw new OverloadedError(this.options.name, this.queue.length);
    const controller = new AbortController();
    const job: Job = { request, controller, channel: null as never, detach: () => {} };
    const cancel = () => this.cancel(job);
    job.channel = new Channel<GenerationEvent>(cancel);
    if (signal) {
      signal.addEventListener("abort", cancel, { once: true });
      job.detach = () => signal.removeEventListener("abort", cancel);
    }
    this.queue.push(job);
    if (signal?.aborted) cancel();
    else void this.pump();
    return job.channel;
  }

  async close(): Promise<void> {
    this.closed = true;
    if (!this.running && this.queue.length === 0) return;
    await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
  }

  private cancel(job: Job): void {
    job.detach();
    job.controller.abort();
    const at = this.queue.indexOf(job);
    if (at === -1) return; // running: generation stops at its next token
    this.queue.splice(at, 1);
    for (let choice = 0; choice < (job.request.n ?? 1); choice++) {
      job.channel.push({ type: "finish", choice, reason: "cancelled", completionTokens: 0, decodeSeconds: 0 });
    }
    job.channel.end();
    this.notifyIdle();
  }

  /** Runs queued jobs one after another; a no-op while one is running. */
  private async pump(): Promise<void> {
    if (this.running) return;
    for (let job = this.queue.shift(); job; job = this.queue.shift()) {
      this.running = job;
      try {
        await this.run(job);
        job.channel.end();
      } catch (err) {
        job.channel.fail(err);
      } finally {
        job.detach();
        this.running = null;
      }
    }
    this.notifyIdle();
  }

  private notifyIdle(): void {
    if (this.running || this.queue.length > 0) return;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const wake of waiters) wake();
  }

  private async run(job: Job): Promise<void> {
    const n = job.request.n ?? 1;
    for (let choice = 0; choice < n; choice++) await this.runChoice(job, choice);
  }

  private async runChoice(job: Job, choice: number): Promise<void> {
    const { request, channel, controller } = job;
    const signal = controller.signal;
    const seed = request.sampling.seed;
    const sampling = seed === undefined || seed === null || choice === 0 ? request.sampling : { ...request.sampling, seed: seed + choice };
    const output = new ChoiceOutput(this.backend.createDecoder(), {
      stop: request.stop,
      logprobs: request.logprobs,
      tokenBytes: (id) => this.backend.tokenBytes(id),
    });
    let tokens = 0;
    let firstAt = 0;
    let lastAt = 0;
    let reason: FinishReason = "cancelled";
    let stopped = false;
    if (!signal.aborted) {
      const generation = this.backend.generate(request.promptIds, { maxTokens: request.maxTokens, sampling, signal });
      try {
        for (;;) {
          if (signal.aborted) break;
          const next = await generation.next();
          if (next.done) {
            reason = next.value;
            break;
          }
          lastAt = this.now();
          if (++tokens === 1) firstAt = lastAt;
          const step = output.push(next.value);
          channel.push({ type: "delta", choice, text: step.text, completionTokens: tokens, ...(step.logprobs ? { logprobs: step.logprobs } : {}) });
          if (step.stopped) {
            reason = "stop";
            stopped = true;
            break;
          }
        }
      } finally {
        await generation.return("cancelled");
      }
      if (signal.aborted) reason = "cancelled";
    }
    if (reason !== "cancelled" && !stopped) {
      const tail = output.finish();
      if (tail.stopped) reason = "stop";
      if (tail.text !== "" || (tail.logprobs?.length ?? 0) > 0) {
        channel.push({ type: "delta", choice, text: tail.text, completionTokens: tokens, ...(tail.logprobs ? { logprobs: tail.logprobs } : {}) });
      }
    }
    channel.push({ type: "finish", choice, reason, completionTokens: tokens, decodeSeconds: (lastAt - firstAt) / 1000 });
  }
}

function checkRequest(request: GenerationRequest): void {
  if (request.promptIds.length === 0) throw new RangeError("the prompt must have at least one token");
  if (!Number.isInteger(request.maxTokens) || request.maxTokens < 1) throw new RangeError(`maxTokens must be a positive integer, got ${request.maxTokens}`);
  const n = request.n ?? 1;
  if (!Number.isInteger(n) || n < 1) throw new RangeError(`n must be a positive integer, got ${n}`);
}
