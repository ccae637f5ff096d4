/** POST /v1/embeddings: validate -> tokenize each input -> the engine pools each prompt -> the vectors, in input order. */
import type { FastifyInstance } from "fastify";
import type { ApiContext } from "../context.js";
import { apiError } from "../errors.js";
import { ignoredFieldsHeader } from "../protocol/common.js";
import { embeddingInputs, embeddingList, finalVector, ignoredEmbeddingFields, parseEmbeddingRequest } from "../protocol/embeddings.js";
import { embeddingModel, embeddingPrompts, runEmbeddings, type EmbeddingTruncation } from "./embedding-run.js";
import { CLIENT_CLOSED_STATUS } from "./request-life.js";
import { lookupServedModel } from "./model-lookup.js";

export function embeddingsRoute(app: FastifyInstance, ctx: ApiContext): void {
  app.post("/embeddings", async (request, reply) => {
    const body = parseEmbeddingRequest(request.body);
    const ignored = ignoredFieldsHeader(ignoredEmbeddingFields(request.body));
    if (ignored !== undefined) reply.header("x-kiln-ignored-fields", ignored);
    const model = embeddingModel(await lookupServedModel(ctx, request, body.model));
    const width = model.embeddings.dimensions;
    if (body.dimensions != null && body.dimensions > width) {
      throw apiError("invalid_value", `'dimensions' is ${body.dimensions}, more than the ${width} values of ${model.slug}'s embeddings.`, "dimensions");
    }
    const keep = body.truncate_prompt_tokens;
    const truncation: EmbeddingTruncation = keep == null ? { keep: "none" } : { keep: "last", most: keep === -1 ? Infinity : keep };
    const prompts = embeddingPrompts(model, embeddingInputs(body.input), "input", truncation, body.add_special_tokens ?? true);
    const run = await runEmbeddings(ctx, request, reply, model, prompts);
    if (run.clientLeft) return reply.code(CLIENT_CLOSED_STATUS).send();
    const vectors = run.vectors.map((v) => finalVector(v, body.dimensions, body.normalize ?? true));
    return embeddingList(model.slug, vectors, body.encoding_format ?? "float", run.promptTokens);
  });
}
