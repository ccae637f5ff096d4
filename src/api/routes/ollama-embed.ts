/**
 * POST /api/embed and /api/embeddings (Ollama's): each input's embedding from the same engine and
 * pooling as `/v1/embeddings`, in Ollama's shapes: `/api/embed` answers unit-length vectors and
 * cuts an input too long for the context to its first tokens unless `truncate` is false; the older
 * `/api/embeddings` answers one vector as pooled.
 */
import type { FastifyInstance } from "fastify";
import type { ApiContext } from "../context.js";
import { apiError } from "../errors.js";
import { finalVector } from "../protocol/embeddings.js";
import { parseOrThrow } from "../protocol/issues.js";
import { ignoredEmbeddingOptions, keepAliveMs, ollamaEmbeddingsRequestSchema, ollamaEmbedRequestSchema } from "../protocol/ollama.js";
import { embeddingModel, embeddingPrompts, runEmbeddings } from "./embedding-run.js";
import { applyKeepAlive, nameIgnored, timedLookup } from "./ollama-generation.js";
import { CLIENT_CLOSED_STATUS } from "./request-life.js";

const NS_PER_MS = 1e6;

export function ollamaEmbedRoutes(app: FastifyInstance, ctx: ApiContext): void {
  app.post("/embed", async (request, reply) => {
    const startedAt = performance.now();
    const body = parseOrThrow(ollamaEmbedRequestSchema, request.body);
    const keepAlive = keepAliveMs(body.keep_alive);
    const { model: served, loadMs } = await timedLookup(ctx, request, body.model);
    nameIgnored(reply, [...ignoredEmbeddingOptions(body), ...applyKeepAlive(ctx, served, keepAlive)]);
    const model = embeddingModel(served);
    const inputs = typeof body.input === "string" ? [body.input] : (body.input ?? []);
    if (body.dimensions != null && body.dimensions > model.embeddings.dimensions) {
      throw apiError(
        "invalid_value",
        `'dimensions' is ${body.dimensions}, more than the ${model.embeddings.dimensions} values of ${model.slug}'s embeddings.`,
        "dimensions",
      );
    }
    if (inputs.some((i) => i === "")) throw apiError("invalid_value", "'input' holds an empty text: each input needs at least one character.", "input");
    const prompts = embeddingPrompts(model, inputs, "input", body.truncate === false ? { keep: "none" } : { keep: "first", most: Infinity });
    const run = prompts.length > 0 ? await runEmbeddings(ctx, request, reply, model, prompts) : { vectors: [], promptTokens: 0, clientLeft: false };
    if (run.clientLeft) return reply.code(CLIENT_CLOSED_STATUS).send();
    return {
      model: model.slug,
      embeddings: run.vectors.map((v) => Array.from(finalVector(v, body.dimensions, true))),
      total_duration: Math.round((performance.now() - startedAt) * NS_PER_MS),
      load_duration: Math.round(loadMs * NS_PER_MS),
      prompt_eval_count: run.promptTokens,
    };
  });

  app.post("/embeddings", async (request, reply) => {
    const body = parseOrThrow(ollamaEmbeddingsRequestSchema, request.body);
    const keepAlive = keepAliveMs(body.keep_alive);
    const { model: served } = await timedLookup(ctx, request, body.model);
    nameIgnored(reply, [...ignoredEmbeddingOptions(body), ...applyKeepAlive(ctx, served, keepAlive)]);
    const model = embeddingModel(served);
    if (!body.prompt) return { embedding: [] };
    const run = await runEmbeddings(ctx, request, reply, model, embeddingPrompts(model, [body.prompt], "prompt", { keep: "none" }));
    if (run.clientLeft) return reply.code(CLIENT_CLOSED_STATUS).send();
    return { embedding: Array.from(finalVector(run.vectors[0], null, false)) };
  });
}
