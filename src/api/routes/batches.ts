/**
 * The Batch API: POST /v1/batches (a batch of requests read from an uploaded file, run in the
 * background by the {@link BatchRunner}), GET /v1/batches (a key's batches, newest first),
 * GET /v1/batches/{id} and POST /v1/batches/{id}/cancel. A batch belongs to the key that made it,
 * runs as that key (its models, limits and metering), and is found only with it.
 */
import type { FastifyInstance, FastifyRequest } from "fastify";
import type { BatchObject } from "../../catalogue/stored-batches.js";
import { ownerKeyId } from "../auth/auth.js";
import type { ApiContext } from "../context.js";
import { apiError } from "../errors.js";
import { batchCreateSchema, batchListQuery } from "../protocol/batches.js";
import { parseOrThrow } from "../protocol/issues.js";
import { fileNotFound } from "./files.js";

export function batchesRoutes(app: FastifyInstance, ctx: ApiContext): void {
  app.post("/batches", async (request) => {
    const body = parseOrThrow(batchCreateSchema, request.body);
    const input = await ctx.files.get(body.input_file_id, ownerKeyId(request));
    if (!input) throw fileNotFound(body.input_file_id);
    if (input.purpose !== "batch") {
      throw apiError(
        "invalid_value",
        `The file '${input.id}' was uploaded with purpose '${input.purpose}': a batch's input needs purpose 'batch'.`,
        "input_file_id",
      );
    }
    const key = request.apiKey ?? { id: null, name: "local", models: null };
    return ctx.batches.create(
      { endpoint: body.endpoint, inputFileId: input.id, metadata: body.metadata ?? null, outputExpiresAfter: body.output_expires_after?.seconds ?? null },
      { ...key },
    );
  });

  app.get("/batches", async (request) => {
    const query = parseOrThrow(batchListQuery, request.query ?? {});
    const { batches, hasMore } = await ctx.batches.list(ownerKeyId(request), { after: query.after, limit: query.limit, idPrefix: "batch_" });
    const data = batches.map(publicBatch);
    return { object: "list", data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more: hasMore };
  });

  app.get("/batches/:id", async (request) => {
    const id = batchId(request);
    return publicBatch((await ctx.batches.get(id, ownerKeyId(request))) ?? throwNotFound(id));
  });

  app.post("/batches/:id/cancel", async (request) => {
    const id = batchId(request);
    return publicBatch((await ctx.batches.cancel(id, ownerKeyId(request))) ?? throwNotFound(id));
  });
}

function batchId(request: FastifyRequest): string {
  const id = (request.params as { id: string }).id;
  // A Message Batch is Anthropic's API's alone (`/v1/messages/batches`).
  return id.startsWith("batch_") ? id : throwNotFound(id);
}

/** The batch object as the reference API shows it, without kiln's own fields. */
function publicBatch(batch: BatchObject): BatchObject {
  const { unsent_requests: _unsent, ...shown } = batch;
  return shown;
}

function throwNotFound(id: string): never {
  throw apiError("batch_not_found", `No such Batch object: ${id}`);
}
