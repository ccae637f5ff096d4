/**
 * Anthropic's Message Batches API: POST /v1/messages/batches (requests given inline, each a custom
 * id and the parameters of a POST /v1/messages) and the list's query, checked as Anthropic checks
 * them. Each request's parameters are checked when it runs, as Anthropic does: a bad one becomes that
 * request's `errored` result, not the batch's failure.
 */
import { z } from "zod";
import { MAX_MESSAGE_BATCH_REQUESTS } from "../batches/input-lines.js";

/** A custom id: 1 to 64 letters, digits, `_` or `-`, as Anthropic allows. */
const customId = z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, "a custom_id is 1 to 64 letters, digits, '_' or '-'");

const batchRequest = z.object({
  custom_id: customId,
  /** A Messages API request's body; a streamed one cannot go to a batch's results. */
  params: z.looseObject({ stream: z.literal(false, "A batch's results are not streamed: leave out 'stream'.").optional() }),
});

export const messageBatchCreateSchema = z.object({ requests: z.array(batchRequest).min(1).max(MAX_MESSAGE_BATCH_REQUESTS) }).superRefine((body, ctx) => {
  const seen = new Set<string>();
  body.requests.forEach((request, i) => {
    if (seen.has(request.custom_id)) {
      ctx.addIssue({
        code: "custom",
        path: ["requests", i, "custom_id"],
        message: `Invalid 'requests[${i}].custom_id': '${request.custom_id}' is the custom_id of an earlier request; each request needs its own.`,
      });
    }
    seen.add(request.custom_id);
  });
});

export type MessageBatchCreate = z.output<typeof messageBatchCreateSchema>;

/** GET /v1/messages/batches's query: pages newest first, after (older than) or before (newer than) a batch. */
export const messageBatchListQuery = z.looseObject({
  after_id: z.string().min(1).optional(),
  before_id: z.string().min(1).optional(),
  limit: z.coerce.number().int().min(1).max(1000).default(20),
});
