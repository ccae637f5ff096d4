/**
 * The life of one request that reached a model, the same for generations and transcriptions: its
 * work is aborted at once when the client goes away or the drain deadline passes, and it is
 * counted (metrics, usage) once, however it ends.
 */
import type { FastifyReply, FastifyRequest } from "fastify";
import type { SettledFrom, UsageRecord } from "../cloud-port.js";
import type { ApiContext } from "../context.js";
import { apiError, type ApiError } from "../errors.js";

/** HTTP status recorded for a request whose client left before the answer (never sent to anyone). */
export const CLIENT_CLOSED_STATUS = 499;

/** Metered requests are refused, before any work, while their usage could not be kept. */
export function assertUsageKept(ctx: ApiContext): void {
  if (ctx.usage?.admits && !ctx.usage.admits()) {
    throw apiError("ledger_unavailable", "The server cannot record usage right now, so it is not taking metered requests; retry in a moment.");
  }
}

/** What one request used, less what its life knows (its id, its key, how it settled). */
export type UsedByRequest = Omit<UsageRecord, "requestId" | "keyId" | "settledFrom">;

export class RequestLife {
  private readonly controller = new AbortController();
  private ended = false;
  private workFailed = false;
  /** The client closed the connection before the answer was complete. */
  private clientClosed = false;

  /**
   * Starts watching the client and the drain deadline.
   * @param id the answer's id, also its usage record's key
   * @param stoppedShort whether the work ended before its end; default: whether it was aborted. A
   *   generation whose events all arrived is complete even if an abort came after the last one.
   */
  constructor(
    private readonly ctx: ApiContext,
    private readonly request: FastifyRequest,
    private readonly reply: FastifyReply,
    readonly id: string,
    private readonly stoppedShort?: () => boolean,
  ) {
    reply.raw.on("close", this.onClose);
    ctx.lifecycle.cutOffSignal.addEventListener("abort", this.onCutOff);
  }

  /** Aborted when the client goes away or the drain deadline passes: the work listens to it. */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  get log(): FastifyRequest["log"] {
    return this.request.log;
  }

  /** Whether the drain deadline ended the work before it was over. */
  get cutOff(): boolean {
    return this.ctx.lifecycle.cutOffSignal.aborted && this.stopped();
  }

  /** Whether the client went away before the work was over. */
  get clientLeft(): boolean {
    return !this.cutOff && (this.clientClosed || this.stopped());
  }

  /** How the request ended, as its usage record says. */
  get settledFrom(): SettledFrom {
    return this.cutOff ? "shutdown" : this.clientLeft ? "cancelled" : this.workFailed ? "failed" : "completed";
  }

  /** Aborts the work now (e.g. when only part of it could be started). */
  abort(): void {
    this.controller.abort();
  }

  /** Marks the work as failed of itself (the model or the engine threw). */
  failed(): void {
    this.workFailed = true;
  }

  /** The answer's error when the drain deadline cut the work off (as if cancelled), else null. */
  cutOffError(): ApiError | null {
    if (!this.cutOff) return null;
    return apiError("shutting_down", "The server is shutting down and ended this request before it finished; retry on another instance or in a moment.");
  }

  /**
   * Stops watching the client and the drain deadline, then calls `count` (the metrics, then
   * {@link recordUsage}) with how the request settled. Only the first call does anything.
   */
  end(count: (settledFrom: SettledFrom) => void): void {
    if (this.ended) return;
    this.ended = true;
    this.reply.raw.off("close", this.onClose);
    this.ctx.lifecycle.cutOffSignal.removeEventListener("abort", this.onCutOff);
    count(this.settledFrom);
  }

  /** Records the request's usage; metering never breaks an answer: a recorder that throws is logged, loudly. */
  recordUsage(used: UsedByRequest, settledFrom: SettledFrom): void {
    const usage: UsageRecord = { requestId: this.id, keyId: this.request.apiKey?.id ?? null, ...used, settledFrom };
    try {
      this.ctx.usage?.record(usage);
    } catch (err) {
      this.request.log.error({ err, usage }, "usage record failed: this request's usage is only in this log");
    }
  }

  private stopped(): boolean {
    return this.stoppedShort ? this.stoppedShort() : this.controller.signal.aborted;
  }

  // 'close' also fires after a complete answer; only one cut short aborts.
  private readonly onClose = () => {
    if (this.reply.raw.writableFinished) return;
    this.clientClosed = true;
    this.controller.abort(new Error("the client closed the connection"));
  };

  private readonly onCutOff = () => this.controller.abort(new Error("the server's drain deadline passed"));
}
