/**
 * Runs one embeddings answer on a model's engine, whichever API asked for it (the reference API's,
 * Ollama's, llama.cpp's): each input is one request of no new tokens that pools its prompt's final
 * hidden states, a window of them in the engine at a time, so that a request of thousands of inputs
 * neither floods the engine's waiting queue nor waits behind it. Its {@link RequestLife} cancels
 * what is left when the client goes away, and counts the metrics and usage once.
 */
import { setMaxListeners } from "node:events";
import type { FastifyReply, FastifyRequest } from "fastify";
import { EngineClosedError, OverloadedError, type EmbeddingSupport, type GenerationRequest, type ServedModel } from "../../scheduler/index.js";
import type { ApiContext } from "../context.js";
import { apiError } from "../errors.js";
import { enginePriority } from "./generation-request.js";
import { answerId } from "./ids.js";
import { assertUsageKept, RequestLife } from "./request-life.js";

/**
 * Most inputs of one answer in the engine at once (fewer where it has fewer slots, so that on an
 * idle engine none waits): enough to fill its steps, few enough to leave its waiting queue to other clients.
 */
export const EMBEDDING_WINDOW = 16;

/** A model that embeds, and what its embeddings are; a 400 naming `param` for one that cannot. */
export function embeddingModel(model: ServedModel, param = "model"): ServedModel & { embeddings: EmbeddingSupport } {
  if (model.embeddings) return model as ServedModel & { embeddings: EmbeddingSupport };
  throw apiError("invalid_value", `'${model.slug}' does not make embeddings.`, param);
}

/** How inputs that do not fit the context are cut: not at all (a 400), to their first or to their last tokens. */
export type EmbeddingTruncation = { keep: "none" } | { keep: "first" | "last"; most: number };

/**
 * The token ids of each input (text through the model's embedding prompt, ids as they are), cut
 * as `truncation` says; a 400 naming `param` for an id outside the vocabulary or an input that does
 * not fit (the engine needs one position past the prompt).
 */
export function embeddingPrompts(
  model: ServedModel & { embeddings: EmbeddingSupport },
  inputs: ReadonlyArray<string | readonly number[]>,
  param: string,
  truncation: EmbeddingTruncation,
  special = true,
): number[][] {
  const room = model.contextLength - 1;
  return inputs.map((input, i) => {
    const where = inputs.length > 1 ? `${param}[${i}]` : param;
    let ids: number[];
    if (typeof input === "string") {
      // Refused before tokenizing when even its fewest tokens would not fit (a huge input costs nothing).
      if (truncation.keep === "none" && model.fewestTokens(input.length) > room)
        throw tooLong(model, where, param, `holds ${input.length} characters, at least ${model.fewestTokens(input.length)} tokens`);
      ids = model.embeddings.prompt(input, special);
    } else {
      if (input.some((id) => id >= model.vocabSize))
        throw apiError("invalid_value", `Token ids in '${where}' must be below the vocabulary size ${model.vocabSize}.`, param);
      ids = [...input];
    }
    if (ids.length === 0) throw apiError("invalid_value", `'${where}' gives no tokens to embed: send at least one character or token id.`, param);
    const most = truncation.keep === "none" ? room : Math.min(room, truncation.most);
    if (ids.length <= most) return ids;
    if (truncation.keep === "none") throw tooLong(model, where, param, `resulted in ${ids.length} tokens`);
    return truncation.keep === "first" ? ids.slice(0, most) : ids.slice(ids.length - most);
  });
}

function tooLong(model: ServedModel, where: string, param: string, what: string) {
  return apiError(
    "context_length_exceeded",
    `This model's maximum context length is ${model.contextLength} tokens, of which an embedding takes at most ${model.contextLength - 1}. However, your '${where}' ${what}. Please reduce its length.`,
    param,
  );
}

/** The pooled vectors of an answer's inputs, in input order, and the tokens they took. */
export interface EmbeddingRun {
  vectors: Float32Array[];
  promptTokens: number;
  /** Whether the client went away before the answer was complete: nothing is to be sent. */
  clientLeft: boolean;
}

/** Runs every prompt's embedding on `model`; throws an {@link ApiError} or what the engine threw. */
export async function runEmbeddings(
  ctx: ApiContext,
  request: FastifyRequest,
  reply: FastifyReply,
  model: ServedModel & { embeddings: EmbeddingSupport },
  prompts: readonly number[][],
): Promise<EmbeddingRun> {
  assertUsageKept(ctx);
  const id = answerId("embd");
  const promptTokens = prompts.reduce((sum, p) => sum + p.length, 0);
  await ctx.cloud?.admit(request, reply, { requestId: id, slug: model.slug, artifactId: model.artifactId, promptTokens, maxCompletionTokens: 0, audioMs: 0 });
  const life = new RequestLife(ctx, request, reply, id);
  let charged = true;
  try {
    const vectors = await embedInWindows(model, prompts, life.signal, enginePriority(request, undefined));
    return { vectors, promptTokens, clientLeft: life.clientLeft };
  } catch (err) {
    if (life.clientLeft) return { vectors: [], promptTokens, clientLeft: true };
    if ((err instanceof OverloadedError || err instanceof EngineClosedError) && !life.signal.aborted) {
      // Refused by the engine: the inputs already computed are not charged, as a refused generation is not.
      charged = false;
      await ctx.cloud?.release(id);
    } else {
      life.failed();
    }
    throw life.cutOffError() ?? err;
  } finally {
    life.end((settledFrom) => {
      if (!charged) return;
      ctx.metrics.generation({
        model: model.slug,
        artifactId: model.artifactId,
        promptTokens,
        completionTokens: 0,
        perTokenSeconds: [],
        decodeSeconds: 0,
        decodeTokens: 0,
        cancelled: settledFrom === "cancelled",
      });
      life.recordUsage({ slug: model.slug, artifactId: model.artifactId, promptTokens, completionTokens: 0 }, settledFrom);
    });
  }
}

/**
 * Each prompt's vector, at most {@link EMBEDDING_WINDOW} (or the engine's slots) in the engine at a time. The first failure
 * cancels the others in flight and is thrown; an abort of `signal` cancels them all.
 */
export async function embedInWindows(
  model: ServedModel & { embeddings: EmbeddingSupport },
  prompts: readonly number[][],
  signal: AbortSignal,
  priority?: number,
): Promise<Float32Array[]> {
  const vectors = new Array<Float32Array>(prompts.length);
  const stop = new AbortController();
  // Each input in the engine listens on it: many listeners here are by design.
  setMaxListeners(EMBEDDING_WINDOW + 10, stop.signal);
  const onAbort = () => stop.abort(signal.reason);
  signal.addEventListener("abort", onAbort, { once: true });
  let next = 0;
  const embedNext = async (): Promise<void> => {
    while (next < prompts.length && !stop.signal.aborted) {
      const i = next++;
      vectors[i] = await embedOne(model, prompts[i], stop.signal, priority);
    }
  };
  try {
    await Promise.all(
      Array.from({ length: Math.min(EMBEDDING_WINDOW, model.engine.slots, prompts.length) }, () =>
        embedNext().catch((err: unknown) => {
          stop.abort(err);
          throw err;
        }),
      ),
    );
    if (signal.aborted) throw signal.reason;
    return vectors;
  } finally {
    signal.removeEventListener("abort", onAbort);
  }
}

/** One prompt's pooled vector; throws when it was cancelled or failed. */
async function embedOne(
  model: ServedModel & { embeddings: EmbeddingSupport },
  promptIds: number[],
  signal: AbortSignal,
  priority?: number,
): Promise<Float32Array> {
  const request: GenerationRequest = {
    promptIds,
    maxTokens: 0,
    sampling: {},
    embed: { pooling: model.embeddings.pooling },
    ...(priority !== undefined ? { priority } : {}),
  };
  let vector: Float32Array | null = null;
  for await (const event of model.engine.submit(request, signal)) {
    if (event.type === "embedding") vector = event.embedding;
  }
  if (!vector) throw signal.aborted ? signal.reason : new Error("the engine ended an embedding without its vector");
  return vector;
}
