/**
 * The speech engine: who runs next on a speech model. Transcriptions are admitted into slots (at most
 * one per slot, the rest wait in a bounded FIFO queue, as text requests do); each admitted
 * transcription asks for one model call at a time, and the engine sends them to the worker one
 * message per call, batching every waiting one-token decoder step into a single call. Calls are
 * served oldest first, so a new window's encoder run is never starved by running decoders.
 */
import type {
  AlignRequest,
  AlignResult,
  DecodeRequest,
  DecodeResult,
  DecodeRow,
  DecodeRowResult,
  EncodeRequest,
  EncodeResult,
} from "../../runtime/speech-worker/protocol.js";
import type { ComputeGate } from "../compute-gate.js";
import { EngineClosedError, OverloadedError } from "../errors.js";

/** The worker calls the engine makes (the speech worker; a fake in unit tests). */
export interface SpeechRunner {
  readonly slots: number;
  encode(request: Omit<EncodeRequest, "op">): Promise<EncodeResult>;
  decode(request: Omit<DecodeRequest, "op">): Promise<DecodeResult>;
  align(request: Omit<AlignRequest, "op">): Promise<AlignResult>;
}

export interface SpeechEngineOptions {
  /** Model name, for errors. */
  name: string;
  /** Transcriptions waiting for a slot before new ones get `OverloadedError`. Default 64. */
  maxWaiting?: number;
  /** Transcriptions running at once (at most the runner's slots / `rowsPerTranscription`). Default: as many as fit. */
  maxRunning?: number;
  /**
   * The runner's slots (decoder rows) each running transcription holds, consecutive: the most
   * hypotheses it decodes at once (beams, or sampled candidates). Default 1.
   */
  rowsPerTranscription?: number;
  /** Turns on the machine shared with the process's other models (see `ComputeGate`). Default: none. */
  gate?: ComputeGate;
}

type Call =
  | { kind: "encode"; request: Omit<EncodeRequest, "op">; resolve: (r: EncodeResult) => void; reject: (e: unknown) => void }
  | { kind: "align"; request: Omit<AlignRequest, "op">; resolve: (r: AlignResult) => void; reject: (e: unknown) => void }
  | { kind: "decode"; row: DecodeRow; resolve: (r: DecodeRowResult) => void; reject: (e: unknown) => void };

interface Waiter {
  resolve: (slot: number) => void;
  reject: (err: unknown) => void;
  signal?: AbortSignal;
  onAbort?: () => void;
}

/** Counters the metrics and tests read. */
export interface SpeechEngineStats {
  running: number;
  waiting: number;
  encodeCalls: number;
  decodeCalls: number;
  /** Decoder rows run, over all calls (rows / calls = mean batch). */
  decodeRows: number;
  alignCalls: number;
}

export class SpeechEngine {
  private readonly freeSlots: number[];
  private readonly waiters: Waiter[] = [];
  private readonly calls: Call[] = [];
  private busy = false;
  private closed = false;
  private idle: Array<() => void> = [];
  readonly stats: SpeechEngineStats = { running: 0, waiting: 0, encodeCalls: 0, decodeCalls: 0, decodeRows: 0, alignCalls: 0 };
  private readonly maxWaiting: number;
  /** Consecutive runner slots each transcription holds. */
  readonly rowsPerTranscription: number;

  constructor(
    private readonly runner: SpeechRunner,
    private readonly options: SpeechEngineOptions,
  ) {
    this.rowsPerTranscription = Math.max(1, Math.min(options.rowsPerTranscription ?? 1, runner.slots));
    const fit = Math.floor(runner.slots / this.rowsPerTranscription);
    const running = Math.max(1, Math.min(options.maxRunning ?? fit, fit));
    this.freeSlots = Array.from({ length: running }, (_, i) => running - 1 - i);
    this.maxWaiting = options.maxWaiting ?? 64;
  }

  /**
   * Runs `work` with slots of its own once they are free: `slot .. slot + rowsPerTranscription - 1`.
   * Rejects at once with `OverloadedError` when the waiting queue is full, and with the signal's
   * reason when aborted while waiting.
   */
  async withSlot<T>(work: (slot: number) => Promise<T>, signal?: AbortSignal): Promise<T> {
    const slot = await this.acquire(signal);
    this.stats.running++;
    try {
      return await work(slot * this.rowsPerTranscription);
    } finally {
      this.stats.running--;
      this.release(slot);
    }
  }

  encode(request: Omit<EncodeRequest, "op">): Promise<EncodeResult> {
    return this.enqueue<EncodeResult>((resolve, reject) => ({ kind: "encode", request, resolve, reject }));
  }

  /** One decoder row; rows of one token from several transcriptions run together. */
  decode(row: DecodeRow): Promise<DecodeRowResult> {
    return this.enqueue<DecodeRowResult>((resolve, reject) => ({ kind: "decode", row, resolve, reject }));
  }

  align(request: Omit<AlignRequest, "op">): Promise<AlignResult> {
    return this.enqueue<AlignResult>((resolve, reject) => ({ kind: "align", request, resolve, reject }));
  }

  /** Refuses new transcriptions and resolves once the running ones have finished. */
  async close(): Promise<void> {
    this.closed = true;
    for (const w of this.waiters.splice(0)) w.reject(new EngineClosedError(this.options.name));
    this.stats.waiting = 0;
    if (this.stats.running === 0) return;
    await new Promise<void>((resolve) => this.idle.push(resolve));
  }

  private acquire(signal?: AbortSignal): Promise<number> {
    if (this.closed) return Promise.reject(new EngineClosedError(this.options.name));
    signal?.throwIfAborted();
    // The lowest free slot, so that running transcriptions stay close together in one decoder call.
    this.freeSlots.sort((a, b) => b - a);
    const free = this.freeSlots.pop();
    if (free !== undefined) return Promise.resolve(free);
    if (this.waiters.length >= this.maxWaiting) return Promise.reject(new OverloadedError(this.options.name, this.waiters.length));
    return new Promise<number>((resolve, reject) => {
      const waiter: Waiter = { resolve, reject, signal };
      if (signal) {
        waiter.onAbort = () => {
          const at = this.waiters.indexOf(waiter);
          if (at >= 0) this.waiters.splice(at, 1);
          this.stats.waiting = this.waiters.length;
          reject(signal.reason);
        };
        signal.addEventListener("abort", waiter.onAbort, { once: true });
      }
      this.waiters.push(waiter);
      this.stats.waiting = this.waiters.length;
    });
  }

  private release(slot: number): void {
    const next = this.waiters.shift();
    this.stats.waiting = this.waiters.length;
    if (next) {
      if (next.onAbort) next.signal?.removeEventListener("abort", next.onAbort);
      next.resolve(slot);
      return;
    }
    this.freeSlots.push(slot);
    if (this.stats.running === 0) for (const done of this.idle.splice(0)) done();
  }

  private enqueue<T>(make: (resolve: (r: T) => void, reject: (e: unknown) => void) => Call): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.calls.push(make(resolve, reject));
      // A microtask later, so the other transcriptions' steps that are due now join the same call.
      queueMicrotask(() => void this.pump());
    });
  }

  private async pump(): Promise<void> {
    if (this.busy || this.calls.length === 0) return;
    this.busy = true;
    try {
      while (this.calls.length > 0) await this.runOldest();
    } finally {
      this.busy = false;
    }
  }

  /** Runs the oldest call; a one-token decoder step takes every other waiting one-token step with it. */
  private async runOldest(): Promise<void> {
    const call = this.calls.shift()!;
    if (call.kind === "encode") {
      this.stats.encodeCalls++;
      await this.turn(() => this.runner.encode(call.request)).then(call.resolve, call.reject);
    } else if (call.kind === "align") {
      this.stats.alignCalls++;
      await this.turn(() => this.runner.align(call.request)).then(call.resolve, call.reject);
    } else {
      const batch = [call];
      if (call.row.tokens.length === 1) {
        for (let i = 0; i < this.calls.length; ) {
          const other = this.calls[i];
          if (other.kind === "decode" && other.row.tokens.length === 1) batch.push(this.calls.splice(i, 1)[0] as typeof call);
          else i++;
        }
      }
      await this.runDecode(batch);
    }
  }

  private turn<T>(call: () => Promise<T>): Promise<T> {
    return this.options.gate ? this.options.gate.run("speech", call) : call();
  }

  private async runDecode(batch: Array<Extract<Call, { kind: "decode" }>>): Promise<void> {
    const slots = batch.map((c) => c.row.slot);
    const firstSlot = Math.min(...slots);
    const rows: Array<DecodeRow | null> = new Array(Math.max(...slots) - firstSlot + 1).fill(null);
    for (const c of batch) rows[c.row.slot - firstSlot] = c.row;
    this.stats.decodeCalls++;
    this.stats.decodeRows += batch.length;
    try {
      const result = await this.turn(() => this.runner.decode({ firstSlot, rows, tokensPerRow: batch[0].row.tokens.length }));
      for (const c of batch) {
        const row = result.rows[c.row.slot - firstSlot];
        if (row) c.resolve(row);
        else c.reject(new Error(`the speech worker returned no result for slot ${c.row.slot}`));
      }
    } catch (err) {
      for (const c of batch) c.reject(err);
    }
  }
}
