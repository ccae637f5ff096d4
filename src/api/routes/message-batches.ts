/**
 * Anthropic's Message Batches API, on the Batch API's runner: POST /v1/messages/batches,
 * GET /v1/messages/batches (newest first), GET and DELETE /v1/messages/batches/{id},
 * POST /v1/messages/batches/{id}/cancel and GET /v1/messages/batches/{id}/results (JSON Lines, one
 * result a request). A Message Batch is a batch whose requests all go to POST /v1/messages: its
 * requests are kept as an input file of the key's, its answers in output and error files, and it is
 * shown as Anthropic's `message_batch`. Registered in the Messages API's scope, so errors take
 * Anthropic's shape.
 */
import type { FastifyInstance, FastifyRequest } from "fastify";
import { randomBytes } from "node:crypto";
import { FINAL_BATCH_STATUSES, type BatchObject } from "../../catalogue/stored-batches.js";
import { ownerKeyId } from "../auth/auth.js";
import { MESSAGE_BATCH_ENDPOINT } from "../batches/input-lines.js";
import type { ApiContext } from "../context.js";
import { apiError } from "../errors.js";
import { parseOrThrow } from "../protocol/issues.js";
import { messageBatchCreateSchema, messageBatchListQuery } from "../protocol/message-batches.js";
import { unixNow } from "./ids.js";

/** A Message Batch's id starts with this, where the Batch API's start with `batch_`. */
const ID_PREFIX = "msgbatch_";

/** Most bytes of a POST /v1/messages/batches body: 256 MB, as Anthropic allows. */
export const MAX_MESSAGE_BATCH_BYTES = 256 * 1024 * 1024;

export function messageBatchesRoutes(app: FastifyInstance, ctx: ApiContext): void {
  app.post("/messages/batches", { bodyLimit: MAX_MESSAGE_BATCH_BYTES }, async (request) => {
    const body = parseOrThrow(messageBatchCreateSchema, request.body);
    const keyId = ownerKeyId(request);
    const lines = body.requests.map((r) => JSON.stringify({ custom_id: r.custom_id, method: "POST", url: MESSAGE_BATCH_ENDPOINT, body: r.params }));
    const content = Buffer.from(lines.join("\n") + "\n");
    const inputFileId = `file-${randomBytes(12).toString("hex")}`;
    await ctx.files.save(
      { id: inputFileId, keyId, createdAt: unixNow(), expiresAt: null, filename: "message_batch_requests.jsonl", purpose: "batch", bytes: content.length },
      content,
    );
    const key = request.apiKey ?? { id: null, name: "local", models: null };
    const batch = await ctx.batches.create(
      { endpoint: MESSAGE_BATCH_ENDPOINT, inputFileId, metadata: null, outputExpiresAfter: null, idPrefix: ID_PREFIX, requests: lines.length },
      { ...key },
    );
    return messageBatch(batch, request);
  });

  app.get("/messages/batches", async (request) => {
    const query = parseOrThrow(messageBatchListQuery, request.query ?? {});
    if (query.after_id !== undefined && query.before_id !== undefined) {
      throw apiError("invalid_value", "Give 'after_id' or 'before_id', not both.", "before_id");
    }
    const page = { after: query.after_id, before: query.before_id, limit: query.limit, idPrefix: ID_PREFIX };
    const { batches, hasMore } = await ctx.batches.list(ownerKeyId(request), page);
    const data = batches.map((b) => messageBatch(b, request));
    return { data, has_more: hasMore, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null };
  });

  app.get("/messages/batches/:id", async (request) => messageBatch(await storedBatch(ctx, request), request));

  app.post("/messages/batches/:id/cancel", async (request) => {
    const id = batchId(request);
    const batch = await ctx.batches.cancel(id, ownerKeyId(request));
    return messageBatch(batch ?? notFound(id), request);
  });

  app.delete("/messages/batches/:id", async (request) => {
    const batch = await storedBatch(ctx, request);
    if (!FINAL_BATCH_STATUSES.has(batch.status)) {
      throw apiError("batch_in_progress", `The Message Batch '${batch.id}' is still processing: cancel it, and delete it once it has ended.`);
    }
    await ctx.batches.delete(batch.id, ownerKeyId(request));
    return { id: batch.id, type: "message_batch_deleted" };
  });

  app.get("/messages/batches/:id/results", async (request, reply) => {
    const batch = await storedBatch(ctx, request);
    if (!FINAL_BATCH_STATUSES.has(batch.status)) {
      throw apiError("batch_in_progress", `The Message Batch '${batch.id}' is still processing: its results are ready once processing_status is 'ended'.`);
    }
    const keyId = ownerKeyId(request);
    const results: string[] = [];
    for (const file of [batch.output_file_id, batch.error_file_id]) {
      const content = typeof file === "string" ? await ctx.files.content(file, keyId) : null;
      if (content) for (const line of jsonLines(content)) results.push(JSON.stringify(messageBatchResult(line)));
    }
    return reply.type("application/x-jsonl").send(results.map((r) => r + "\n").join(""));
  });
}

/** A batch as Anthropic's `message_batch` object; `results_url` on this server once it has ended. */
export function messageBatch(batch: BatchObject, request: FastifyRequest): Record<string, unknown> {
  const ended = FINAL_BATCH_STATUSES.has(batch.status);
  const { total, completed, failed } = batch.request_counts as { total: number; completed: number; failed: number };
  const unsent = batch.unsent_requests ?? 0;
  const endedAt = [batch.completed_at, batch.cancelled_at, batch.expired_at, batch.failed_at].find((t) => typeof t === "number");
  return {
    id: batch.id,
    type: "message_batch",
    processing_status: ended ? "ended" : batch.status === "cancelling" ? "canceling" : "in_progress",
    request_counts: {
      processing: ended ? 0 : total - completed - failed,
      succeeded: completed,
      // A batch whose requests could not be read at all (its input file deleted) errs in every one.
      errored: batch.status === "failed" ? total - completed : failed - unsent,
      canceled: batch.status === "cancelled" ? unsent : 0,
      expired: batch.status === "expired" ? unsent : 0,
    },
    ended_at: ended ? timestamp(endedAt) : null,
    created_at: timestamp(batch.created_at),
    expires_at: timestamp(batch.expires_at),
    archived_at: null,
    cancel_initiated_at: timestamp(batch.cancelling_at),
    results_url: ended ? `${request.protocol}://${request.host}/v1/messages/batches/${batch.id}/results` : null,
  };
}

/** One line of a batch's output or error file as a Message Batch's result: succeeded, errored, canceled or expired. */
export function messageBatchResult(line: Record<string, unknown>): Record<string, unknown> {
  const response = line.response as { status_code: number; body: unknown } | null;
  const error = line.error as { code?: string } | null;
  // No response: a request the batch never sent, before its cancel or its expiry.
  if (!response) return { custom_id: line.custom_id, result: { type: error?.code === "batch_cancelled" ? "canceled" : "expired" } };
  const succeeded = response.status_code >= 200 && response.status_code < 300;
  return { custom_id: line.custom_id, result: succeeded ? { type: "succeeded", message: response.body } : { type: "errored", error: response.body } };
}

function jsonLines(content: Buffer): Array<Record<string, unknown>> {
  return content
    .toString("utf8")
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** Unix seconds as RFC 3339, as Anthropic's objects give times; null stays null. */
function timestamp(seconds: unknown): string | null {
  return typeof seconds === "number" ? new Date(seconds * 1000).toISOString() : null;
}

async function storedBatch(ctx: ApiContext, request: FastifyRequest): Promise<BatchObject> {
  const id = batchId(request);
  return (await ctx.batches.get(id, ownerKeyId(request))) ?? notFound(id);
}

function batchId(request: FastifyRequest): string {
  const id = (request.params as { id: string }).id;
  // A batch of the Batch API is found only through `/v1/batches`.
  return id.startsWith(ID_PREFIX) ? id : notFound(id);
}

function notFound(id: string): never {
  throw apiError("batch_not_found", `No such Message Batch: ${id}`);
}
