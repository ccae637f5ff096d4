/**
 * Runs batches. Each request of a batch goes to its endpoint through the app itself, as a client's
 * request would, so it is checked, scheduled, counted and metered exactly as one sent over HTTP,
 * beside the server's other traffic; at most `concurrency` requests of all batches run at once.
 * Every answer is recorded as it comes, so a batch a stopped server left unfinished resumes where
 * it was; when the last is in, the answers become the batch's output file (2xx answers) and error
 * file (the rest), in the order of the input file.
 */
import { randomBytes } from "node:crypto";
import { setMaxListeners } from "node:events";
import type { BatchKey, BatchObject, BatchResult, BatchStore } from "../../catalogue/stored-batches.js";
import { FINAL_BATCH_STATUSES } from "../../catalogue/stored-batches.js";
import type { FileStore } from "../../catalogue/stored-files.js";
import { DEFAULT_BATCH_CONCURRENCY } from "../defaults.js";
import { readBatchLines, type BatchEndpoint, type BatchLine } from "./input-lines.js";

export { DEFAULT_BATCH_CONCURRENCY };

/** A batch's completion window: 24 hours, the one the reference API offers. */
export const COMPLETION_WINDOW_SECONDS = 24 * 3600;

/** Longest wait before asking again after a 429 or 503 that said to retry: 30 s. */
const MAX_RETRY_WAIT_MS = 30_000;

/** An endpoint's answer to one request. */
export interface LineAnswer {
  status: number;
  /** The answer's `x-request-id`. */
  requestId: string;
  /** The JSON body answered. */
  body: unknown;
  /** Seconds the server asked to wait before retrying (a 429 or 503 that a retry may cure); absent: final. */
  retryAfter?: number;
}

/** Sends one request of a batch to `endpoint` as `key`. */
export type SendLine = (endpoint: BatchEndpoint, body: Record<string, unknown>, key: BatchKey) => Promise<LineAnswer>;

export interface BatchRunnerOptions {
  /** Most requests of all batches answered at once. Default {@link DEFAULT_BATCH_CONCURRENCY}. */
  concurrency?: number;
  /** True while the server is stopping: no request starts, and what is unanswered waits for the next start. Default never. */
  halted?: () => boolean;
  /** The clock, milliseconds (tests move it). */
  now?: () => number;
  /** Called with a batch that could not run for a reason of the server's (logged); default none. */
  onError?: (batchId: string, err: unknown) => void;
}

/** What POST /v1/batches asks for, checked. */
export interface NewBatch {
  endpoint: BatchEndpoint;
  inputFileId: string;
  metadata: Record<string, string> | null;
  /** Seconds after their creation the output and error files expire; null: kept until deleted. */
  outputExpiresAfter: number | null;
}

/** A batch being run: its object (the one copy that is updated) and whether it was cancelled. */
interface Run {
  batch: BatchObject;
  key: BatchKey;
  cancelled: boolean;
  done?: Promise<void>;
}

export class BatchRunner {
  private readonly runs = new Map<string, Run>();
  private readonly slots: Slots;
  private readonly halted: () => boolean;
  private readonly now: () => number;
  private stopping = false;
  /** Aborted on stop: ends the waits before retries. */
  private readonly stopSignal = new AbortController();

  constructor(
    private readonly batches: BatchStore,
    private readonly files: FileStore,
    private readonly send: SendLine,
    private readonly options: BatchRunnerOptions = {},
  ) {
    this.slots = new Slots(options.concurrency ?? DEFAULT_BATCH_CONCURRENCY);
    this.halted = options.halted ?? (() => false);
    this.now = options.now ?? Date.now;
    // Each request waiting to retry listens for the stop.
    setMaxListeners(0, this.stopSignal.signal);
  }

  /** Stores a new batch (`validating`) and starts it. */
  create(request: NewBatch, key: BatchKey): BatchObject {
    const createdAt = this.seconds();
    const batch: BatchObject = {
      id: `batch_${randomBytes(16).toString("hex")}`,
      object: "batch",
      endpoint: request.endpoint,
      errors: null,
      input_file_id: request.inputFileId,
      completion_window: "24h",
      status: "validating",
      output_file_id: null,
      error_file_id: null,
      created_at: createdAt,
      in_progress_at: null,
      expires_at: createdAt + COMPLETION_WINDOW_SECONDS,
      finalizing_at: null,
      completed_at: null,
      failed_at: null,
      expired_at: null,
      cancelling_at: null,
      cancelled_at: null,
      model: null,
      request_counts: { total: 0, completed: 0, failed: 0 },
      metadata: request.metadata,
      usage: emptyUsage(),
      ...(request.outputExpiresAfter !== null ? { output_expires_after: { anchor: "created_at", seconds: request.outputExpiresAfter } } : {}),
    };
    this.batches.create(batch, key);
    this.start(batch, key);
    return batch;
  }

  /** The batch `id` as `keyId` may see it (the running copy when it runs), or null. */
  get(id: string, keyId: string | null): BatchObject | null {
    const stored = this.batches.get(id, keyId);
    return stored && (this.runs.get(id)?.batch ?? stored);
  }

  /** `keyId`'s batches, newest first, from after `after`, at most `limit` (the running copies of those that run), and whether more follow. */
  list(keyId: string | null, after: string | undefined, limit: number): { batches: BatchObject[]; hasMore: boolean } {
    const { batches, hasMore } = this.batches.list(keyId, after, limit);
    return { batches: batches.map((b) => this.runs.get(b.id)?.batch ?? b), hasMore };
  }

  /**
   * Cancels the batch `id`: no more of its requests start, the running ones finish, and the batch
   * ends `cancelled` with the answers it has. A batch already ended is answered as it is; null when
   * `keyId` has no such batch.
   */
  cancel(id: string, keyId: string | null): BatchObject | null {
    const batch = this.get(id, keyId);
    if (!batch || FINAL_BATCH_STATUSES.has(batch.status) || batch.status === "cancelling") return batch;
    batch.status = "cancelling";
    batch.cancelling_at = this.seconds();
    this.batches.update(batch);
    const run = this.runs.get(id);
    if (run) run.cancelled = true;
    return batch;
  }

  /** Starts every batch the database holds unfinished (a server starting again). */
  resume(): void {
    for (const { batch, key } of this.batches.unfinished()) if (!this.runs.has(batch.id)) this.start(batch, key);
  }

  /** Starts no more requests and waits for the running ones; unfinished batches stay so, for the next start. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.stopSignal.abort();
    this.slots.wakeAll();
    await Promise.all([...this.runs.values()].map((run) => run.done));
  }

  private start(batch: BatchObject, key: BatchKey): void {
    const run: Run = { batch, key, cancelled: batch.status === "cancelling" };
    this.runs.set(batch.id, run);
    run.done = this.execute(run)
      .catch((err) => this.options.onError?.(batch.id, err))
      .finally(() => this.runs.delete(batch.id));
  }

  private stopped(): boolean {
    return this.stopping || this.halted();
  }

  private async execute(run: Run): Promise<void> {
    const { batch, key } = run;
    const input = this.files.content(String(batch.input_file_id), key.id);
    if (!input)
      return this.fail(batch, [
        { code: "file_not_found", message: `The input file '${batch.input_file_id}' no longer exists.`, param: "input_file_id", line: null },
      ]);
    const read = readBatchLines(input, batch.endpoint as BatchEndpoint);
    if (!read.ok) return this.fail(batch, read.errors);
    if (batch.status === "validating") {
      batch.status = "in_progress";
      batch.in_progress_at = this.seconds();
      counts(batch).total = read.lines.length;
      batch.model = soleModel(read.lines);
      this.batches.update(batch);
    }
    const answered = new Set(this.batches.results(batch.id).map((r) => r.line));
    const running = new Set<Promise<void>>();
    for (const line of read.lines) {
      if (answered.has(line.line)) continue;
      await this.slots.acquire();
      if (this.stopped() || run.cancelled || this.expired(batch)) {
        this.slots.release();
        break;
      }
      const answer = this.answer(run, line).finally(() => {
        this.slots.release();
        running.delete(answer);
      });
      running.add(answer);
    }
    await Promise.all(running);
    if (this.stopped() && !run.cancelled && !this.expired(batch) && this.batches.results(batch.id).length < read.lines.length) return;
    this.finish(run, read.lines);
  }

  /** Sends one request, again while the server says a retry may cure its answer, and records the answer. */
  private async answer(run: Run, line: BatchLine): Promise<void> {
    const { batch, key } = run;
    for (;;) {
      let answer: LineAnswer;
      try {
        answer = await this.send(batch.endpoint as BatchEndpoint, line.body, key);
      } catch (err) {
        answer = serverFailure(err);
      }
      const givingUp = this.stopped() || run.cancelled || this.expired(batch);
      // A stopping server's 503 is not the request's answer: it is asked again when the batch resumes.
      if (answer.retryAfter !== undefined && this.stopped()) return;
      if (answer.retryAfter !== undefined && !givingUp) {
        await sleep(Math.min(Math.max(answer.retryAfter * 1000, 100), MAX_RETRY_WAIT_MS), this.stopSignal.signal);
        continue;
      }
      this.record(batch, line, answer);
      return;
    }
  }

  private record(batch: BatchObject, line: BatchLine, answer: LineAnswer): void {
    const failed = answer.status < 200 || answer.status >= 300;
    const result: BatchResult = {
      line: line.line,
      failed,
      result: {
        id: `batch_req_${randomBytes(16).toString("hex")}`,
        custom_id: line.customId,
        response: { status_code: answer.status, request_id: answer.requestId, body: answer.body },
        error: null,
      },
    };
    const c = counts(batch);
    if (failed) c.failed++;
    else {
      c.completed++;
      addUsage(batch, answer.body);
    }
    this.batches.addResult(batch.id, result);
    this.batches.update(batch);
  }

  /** Writes the output and error files (unanswered requests, of a cancelled or expired batch, into the latter) and ends the batch. */
  private finish(run: Run, lines: readonly BatchLine[]): void {
    const batch = run.batch;
    const end = run.cancelled ? "cancelled" : this.expired(batch) ? "expired" : "completed";
    batch.status = "finalizing";
    batch.finalizing_at = this.seconds();
    this.batches.update(batch);
    const results = new Map(this.batches.results(batch.id).map((r) => [r.line, r]));
    const output: Array<Record<string, unknown>> = [];
    const errors: Array<Record<string, unknown>> = [];
    for (const line of lines) {
      const result = results.get(line.line);
      if (result) (result.failed ? errors : output).push(result.result);
      else {
        errors.push(unansweredResult(line, end));
        counts(batch).failed++;
      }
    }
    batch.output_file_id = this.writeFile(run, "output", output);
    batch.error_file_id = this.writeFile(run, "error", errors);
    batch.status = end;
    batch[`${end}_at`] = this.seconds();
    this.batches.update(batch);
    this.batches.clearResults(batch.id);
  }

  private writeFile({ batch, key }: Run, kind: "output" | "error", results: Array<Record<string, unknown>>): string | null {
    if (results.length === 0) return null;
    const content = Buffer.from(results.map((r) => JSON.stringify(r)).join("\n") + "\n");
    const createdAt = this.seconds();
    const expiresAfter = (batch.output_expires_after as { seconds: number } | undefined)?.seconds;
    const id = `file-${randomBytes(12).toString("hex")}`;
    this.files.save(
      {
        id,
        keyId: key.id,
        createdAt,
        expiresAt: expiresAfter ? createdAt + expiresAfter : null,
        filename: `${batch.id}_${kind}.jsonl`,
        purpose: "batch_output",
        bytes: content.length,
      },
      content,
    );
    return id;
  }

  private fail(batch: BatchObject, errors: ReadonlyArray<{ code: string; message: string; param: string | null; line: number | null }>): void {
    batch.status = "failed";
    batch.failed_at = this.seconds();
    batch.errors = { object: "list", data: errors };
    this.batches.update(batch);
  }

  private expired(batch: BatchObject): boolean {
    return this.seconds() >= Number(batch.expires_at);
  }

  private seconds(): number {
    return Math.floor(this.now() / 1000);
  }
}

/** The model every request names, when they all name the same one (the batch's `model`); else null. */
function soleModel(lines: readonly BatchLine[]): string | null {
  const models = new Set(lines.map((l) => l.body.model));
  const [only] = models;
  return models.size === 1 && typeof only === "string" ? only : null;
}

/** The error-file line of a request a cancelled or expired batch never sent. */
function unansweredResult(line: BatchLine, end: string): Record<string, unknown> {
  const error =
    end === "cancelled"
      ? { code: "batch_cancelled", message: "This request was not executed: the batch was cancelled first." }
      : { code: "batch_expired", message: "This request could not be executed before the completion window expired." };
  return { id: `batch_req_${randomBytes(16).toString("hex")}`, custom_id: line.customId, response: null, error };
}

/** What a request the app threw on answers: a 500 in the API's shape. */
function serverFailure(err: unknown): LineAnswer {
  return {
    status: 500,
    requestId: "",
    body: {
      error: { message: `The server failed to run this request (${(err as Error)?.message ?? String(err)}).`, type: "server_error", param: null, code: null },
    },
  };
}

interface RequestCounts {
  total: number;
  completed: number;
  failed: number;
}

function counts(batch: BatchObject): RequestCounts {
  return batch.request_counts as RequestCounts;
}

interface BatchUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

function emptyUsage(): BatchUsage {
  return { input_tokens: 0, input_tokens_details: { cached_tokens: 0 }, output_tokens: 0, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 0 };
}

/** Adds an answer's usage (chat's and completions' `prompt_tokens`, the Responses API's `input_tokens`) to the batch's. */
function addUsage(batch: BatchObject, body: unknown): void {
  const usage = (body as { usage?: Record<string, unknown> } | null)?.usage;
  if (!usage) return;
  const total = batch.usage as BatchUsage;
  const input = numberOf(usage.input_tokens ?? usage.prompt_tokens);
  const output = numberOf(usage.output_tokens ?? usage.completion_tokens);
  const inputDetails = (usage.input_tokens_details ?? usage.prompt_tokens_details) as { cached_tokens?: unknown } | undefined;
  const outputDetails = (usage.output_tokens_details ?? usage.completion_tokens_details) as { reasoning_tokens?: unknown } | undefined;
  total.input_tokens += input;
  total.output_tokens += output;
  total.total_tokens += input + output;
  total.input_tokens_details.cached_tokens += numberOf(inputDetails?.cached_tokens);
  total.output_tokens_details.reasoning_tokens += numberOf(outputDetails?.reasoning_tokens);
}

function numberOf(value: unknown): number {
  return typeof value === "number" && Number.isFinite(value) ? value : 0;
}

/** Resolves after `ms`, or at once when `signal` aborts. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
  });
}

/** A counting semaphore whose waiters can all be woken at once (a stopping runner). */
class Slots {
  private free: number;
  private readonly waiters: Array<() => void> = [];

  constructor(size: number) {
    this.free = Math.max(1, size);
  }

  acquire(): Promise<void> {
    if (this.free > 0) {
      this.free--;
      return Promise.resolve();
    }
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  release(): void {
    const next = this.waiters.shift();
    if (next) next();
    else this.free++;
  }

  /** Lets every waiter through (each then sees the runner stopping and releases its slot). */
  wakeAll(): void {
    for (const wake of this.waiters.splice(0)) {
      this.free--;
      wake();
    }
  }
}
