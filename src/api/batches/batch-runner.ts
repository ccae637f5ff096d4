/**
 * Runs batches. Each request of a batch goes to its endpoint through the app itself, as a client's
 * request would, so it is checked, scheduled, counted and metered exactly as one sent over HTTP,
 * beside the server's other traffic; at most `concurrency` requests of all batches run at once.
 * Every answer is recorded as it comes, so a batch a stopped server left unfinished resumes where
 * it was; when the last is in, the answers become the batch's output file (2xx answers) and error
 * file (the rest), in the order of the input file. A runner holds each batch it runs by a lease in
 * the store, renewed while it runs: over a store shared by a fleet's replicas, one replica runs a
 * batch, any replica answers for it, and another takes it over when its runner is gone.
 */
import { createHash, randomBytes } from "node:crypto";
import { setMaxListeners } from "node:events";
import type { BatchKey, BatchObject, BatchPage, BatchResult, BatchStore } from "../../catalogue/stored-batches.js";
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

/** Default milliseconds a runner's hold on a batch lasts without renewal: 15 s (a stopped replica's batches are taken over after it). */
export const DEFAULT_BATCH_LEASE_MS = 15_000;

export interface BatchRunnerOptions {
  /** Most requests of all batches answered at once. Default {@link DEFAULT_BATCH_CONCURRENCY}. */
  concurrency?: number;
  /**
   * Milliseconds a runner's hold on a batch lasts; it is renewed three times as often, and a batch
   * whose holder is gone (a replica stopped or dead) is taken by another runner once it ends.
   * Default {@link DEFAULT_BATCH_LEASE_MS}.
   */
  leaseMs?: number;
  /** True while the server is stopping: no request starts, and what is unanswered waits for the next runner. Default never. */
  halted?: () => boolean;
  /** The clock, milliseconds (tests move it). */
  now?: () => number;
  /** Called with a batch that could not run for a reason of the server's (logged); default none. */
  onError?: (batchId: string, err: unknown) => void;
  /** Called with each request this runner answered: its endpoint, and whether it failed (the metrics). Default none. */
  onAnswered?: (endpoint: BatchEndpoint, failed: boolean) => void;
}

/** What POST /v1/batches asks for, checked. */
export interface NewBatch {
  endpoint: BatchEndpoint;
  inputFileId: string;
  metadata: Record<string, string> | null;
  /** Seconds after their creation the output and error files expire; null: kept until deleted. */
  outputExpiresAfter: number | null;
  /** The start of the batch's id: `batch_` (the default, the Batch API's) or `msgbatch_` (Anthropic's Message Batches). */
  idPrefix?: string;
  /** Requests the input file holds, when known before it is read (shown in `request_counts.total` while the batch validates). Default 0. */
  requests?: number;
}

/** A batch this runner holds: its id, key, whether it was cancelled or its hold lost, and its end. */
interface Run {
  id: string;
  key: BatchKey;
  cancelled: boolean;
  /** Another runner took the batch (this one's lease ended unrenewed): stop, leaving it to that one. */
  lost: boolean;
  done?: Promise<void>;
}

export class BatchRunner {
  /** This runner's name in the store's leases: one per server process. */
  readonly id = `runner_${randomBytes(8).toString("hex")}`;
  private readonly runs = new Map<string, Run>();
  private readonly slots: Slots;
  private readonly halted: () => boolean;
  private readonly now: () => number;
  private readonly leaseMs: number;
  private stopping = false;
  /** Aborted on stop: ends the waits before retries and the look for batches to take. */
  private readonly stopSignal = new AbortController();
  private looking: NodeJS.Timeout | null = null;

  constructor(
    private readonly batches: BatchStore,
    private readonly files: FileStore,
    private readonly send: SendLine,
    private readonly options: BatchRunnerOptions = {},
  ) {
    this.slots = new Slots(options.concurrency ?? DEFAULT_BATCH_CONCURRENCY);
    this.halted = options.halted ?? (() => false);
    this.now = options.now ?? Date.now;
    this.leaseMs = options.leaseMs ?? DEFAULT_BATCH_LEASE_MS;
    // Each request waiting to retry listens for the stop.
    setMaxListeners(0, this.stopSignal.signal);
  }

  /** Stores a new batch (`validating`), held by this runner, and starts it. */
  async create(request: NewBatch, key: BatchKey): Promise<BatchObject> {
    const createdAt = this.seconds();
    const batch: BatchObject = {
      id: `${request.idPrefix ?? "batch_"}${randomBytes(16).toString("hex")}`,
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
      request_counts: { total: request.requests ?? 0, completed: 0, failed: 0 },
      metadata: request.metadata,
      usage: emptyUsage(),
      ...(request.outputExpiresAfter !== null ? { output_expires_after: { anchor: "created_at", seconds: request.outputExpiresAfter } } : {}),
    };
    await this.batches.create(batch, key, this.id, this.leaseMs);
    this.start(batch.id, key);
    return batch;
  }

  /** The batch `id` as `keyId` may see it, or null. */
  get(id: string, keyId: string | null): Promise<BatchObject | null> {
    return this.batches.get(id, keyId);
  }

  /** A page of `keyId`'s batches, newest first, and whether more follow. */
  list(keyId: string | null, page: BatchPage): Promise<{ batches: BatchObject[]; hasMore: boolean }> {
    return this.batches.list(keyId, page);
  }

  /** Deletes the ended batch `id` and its files (input, output and error); null when `keyId` has no such batch. */
  async delete(id: string, keyId: string | null): Promise<BatchObject | null> {
    const batch = await this.batches.get(id, keyId);
    if (!batch || !(await this.batches.delete(id, keyId))) return null;
    for (const file of [batch.input_file_id, batch.output_file_id, batch.error_file_id]) if (typeof file === "string") await this.files.delete(file, keyId);
    return batch;
  }

  /**
   * Cancels the batch `id`: no more of its requests start, the running ones finish, and the batch
   * ends `cancelled` with the answers it has (ended by whichever runner holds it). A batch already
   * ended is answered as it is; null when `keyId` has no such batch.
   */
  async cancel(id: string, keyId: string | null): Promise<BatchObject | null> {
    if (!(await this.batches.get(id, keyId))) return null;
    const batch = await this.batches.update(id, (b) => {
      if (FINAL_BATCH_STATUSES.has(b.status) || b.status === "cancelling") return;
      b.status = "cancelling";
      b.cancelling_at = this.seconds();
    });
    const run = this.runs.get(id);
    if (run) run.cancelled = true;
    return batch;
  }

  /**
   * Takes every unfinished batch no runner holds (those a stopped server left, or a gone replica's),
   * now and then every third of a lease, until {@link stop}.
   */
  async resume(): Promise<void> {
    if (this.stopping) return;
    // A store that cannot be read now (its database down) is tried again at the next look.
    const look = () => this.takeOver().catch((err: unknown) => this.options.onError?.("(looking for batches)", err));
    await look();
    this.looking ??= setInterval(() => void look(), this.leaseMs / 3).unref();
  }

  /** Starts no more requests and waits for the running ones; unfinished batches stay so, for the next runner. */
  async stop(): Promise<void> {
    this.stopping = true;
    if (this.looking) clearInterval(this.looking);
    this.stopSignal.abort();
    this.slots.wakeAll();
    await Promise.all([...this.runs.values()].map((run) => run.done));
  }

  private async takeOver(): Promise<void> {
    for (const { batch, key } of await this.batches.claimable()) {
      if (this.stopped() || this.runs.has(batch.id)) continue;
      if (await this.batches.claim(batch.id, this.id, this.leaseMs)) this.start(batch.id, key);
    }
  }

  private start(id: string, key: BatchKey): void {
    const run: Run = { id, key, cancelled: false, lost: false };
    this.runs.set(id, run);
    const renewing = setInterval(() => void this.renew(run).catch((err) => this.options.onError?.(id, err)), this.leaseMs / 3).unref();
    run.done = this.execute(run)
      .catch((err) => this.options.onError?.(id, err))
      .finally(() => {
        clearInterval(renewing);
        this.runs.delete(id);
      });
  }

  /** Keeps the hold on a running batch, and hears of a cancel another server took. */
  private async renew(run: Run): Promise<void> {
    if (!(await this.batches.claim(run.id, this.id, this.leaseMs))) {
      run.lost = true;
      return;
    }
    if ((await this.batches.get(run.id, run.key.id))?.status === "cancelling") run.cancelled = true;
  }

  private stopped(): boolean {
    return this.stopping || this.halted();
  }

  /** Whether a run should start no more requests. */
  private ending(run: Run, batch: BatchObject): boolean {
    return this.stopped() || run.cancelled || run.lost || this.expired(batch);
  }

  private async execute(run: Run): Promise<void> {
    const { id, key } = run;
    let batch = await this.batches.get(id, key.id);
    if (!batch || FINAL_BATCH_STATUSES.has(batch.status)) return;
    if (batch.status === "cancelling") run.cancelled = true;
    const input = await this.files.content(String(batch.input_file_id), key.id);
    if (!input)
      return this.fail(id, [
        { code: "file_not_found", message: `The input file '${batch.input_file_id}' no longer exists.`, param: "input_file_id", line: null },
      ]);
    const read = readBatchLines(input, batch.endpoint as BatchEndpoint);
    if (!read.ok) return this.fail(id, read.errors);
    if (batch.status === "validating") {
      batch =
        (await this.batches.update(id, (b) => {
          if (b.status !== "validating") return;
          b.status = "in_progress";
          b.in_progress_at = this.seconds();
          counts(b).total = read.lines.length;
          b.model = soleModel(read.lines);
        })) ?? batch;
    }
    const answered = new Set((await this.batches.results(id)).map((r) => r.line));
    const running = new Set<Promise<void>>();
    for (const line of read.lines) {
      if (answered.has(line.line)) continue;
      await this.slots.acquire();
      if (this.ending(run, batch)) {
        this.slots.release();
        break;
      }
      const answer = this.answer(run, batch, line)
        // The store failed (its database unreachable): this run stops, and the batch is taken up again once its lease ends.
        .catch((err: unknown) => {
          run.lost = true;
          this.options.onError?.(id, err);
        })
        .finally(() => {
          this.slots.release();
          running.delete(answer);
        });
      running.add(answer);
    }
    await Promise.all(running);
    if (run.lost) return;
    const unanswered = read.lines.length - (await this.batches.results(id)).length;
    // Stopping with requests unanswered: the batch stays as it is, for the next runner to take at once.
    if (this.stopped() && !run.cancelled && !this.expired(batch) && unanswered > 0) return this.batches.release(id, this.id);
    await this.finish(run, batch, read.lines);
  }

  /** Sends one request, again while the server says a retry may cure its answer, and records the answer. */
  private async answer(run: Run, batch: BatchObject, line: BatchLine): Promise<void> {
    for (;;) {
      let answer: LineAnswer;
      try {
        answer = await this.send(batch.endpoint as BatchEndpoint, line.body, run.key);
      } catch (err) {
        answer = serverFailure(err);
      }
      // A stopping server's 503 is not the request's answer: it is asked again when the batch resumes.
      if (answer.retryAfter !== undefined && this.stopped()) return;
      if (answer.retryAfter !== undefined && !this.ending(run, batch)) {
        await sleep(Math.min(Math.max(answer.retryAfter * 1000, 100), MAX_RETRY_WAIT_MS), this.stopSignal.signal);
        continue;
      }
      await this.record(run, batch.endpoint as BatchEndpoint, line, answer);
      return;
    }
  }

  private async record(run: Run, endpoint: BatchEndpoint, line: BatchLine, answer: LineAnswer): Promise<void> {
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
    const after = await this.batches.addResult(run.id, result, (b) => {
      if (failed) counts(b).failed++;
      else {
        counts(b).completed++;
        addUsage(b, answer.body);
      }
    });
    this.options.onAnswered?.(endpoint, failed);
    if (after?.status === "cancelling") run.cancelled = true;
  }

  /** Writes the output and error files (unanswered requests, of a cancelled or expired batch, into the latter) and ends the batch. */
  private async finish(run: Run, batch: BatchObject, lines: readonly BatchLine[]): Promise<void> {
    const end = run.cancelled ? "cancelled" : this.expired(batch) ? "expired" : "completed";
    await this.batches.update(run.id, (b) => {
      b.status = "finalizing";
      b.finalizing_at = this.seconds();
    });
    const results = new Map((await this.batches.results(run.id)).map((r) => [r.line, r]));
    const output: Array<Record<string, unknown>> = [];
    const errors: Array<Record<string, unknown>> = [];
    for (const line of lines) {
      const result = results.get(line.line);
      if (result) (result.failed ? errors : output).push(result.result);
      else errors.push(unansweredResult(line, end));
    }
    const outputFileId = await this.writeFile(run, batch, "output", output);
    const errorFileId = await this.writeFile(run, batch, "error", errors);
    await this.batches.update(run.id, (b) => {
      counts(b).failed += lines.length - results.size;
      b.unsent_requests = lines.length - results.size;
      b.output_file_id = outputFileId;
      b.error_file_id = errorFileId;
      b.status = end;
      b[`${end}_at`] = this.seconds();
    });
    await this.batches.clearResults(run.id);
  }

  private async writeFile(run: Run, batch: BatchObject, kind: "output" | "error", results: Array<Record<string, unknown>>): Promise<string | null> {
    if (results.length === 0) return null;
    const content = Buffer.from(results.map((r) => JSON.stringify(r)).join("\n") + "\n");
    const createdAt = this.seconds();
    const expiresAfter = (batch.output_expires_after as { seconds: number } | undefined)?.seconds;
    const id = resultFileId(batch.id, kind);
    // A runner that died while finalizing may have written it: this one's takes its place.
    await this.files.delete(id, run.key.id);
    await this.files.save(
      {
        id,
        keyId: run.key.id,
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

  private async fail(id: string, errors: ReadonlyArray<{ code: string; message: string; param: string | null; line: number | null }>): Promise<void> {
    await this.batches.update(id, (b) => {
      b.status = "failed";
      b.failed_at = this.seconds();
      b.errors = { object: "list", data: errors };
    });
  }

  private expired(batch: BatchObject): boolean {
    return this.seconds() >= Number(batch.expires_at);
  }

  private seconds(): number {
    return Math.floor(this.now() / 1000);
  }
}

/**
 * The id of a batch's output or error file: the same on every try, so that a batch finalized again
 * (its runner died while finalizing) has one output file and one error file, not one per try.
 */
function resultFileId(batchId: string, kind: "output" | "error"): string {
  return `file-${createHash("sha256").update(`${batchId}/${kind}`).digest("hex").slice(0, 24)}`;
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
