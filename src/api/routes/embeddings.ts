/** POST /v1/embeddings: validate -> tokenize each input (or render the chat) -> the engine pools each prompt -> the vectors, in input order. */
import type { FastifyInstance } from "fastify";
import type { ApiContext } from "../context.js";
import { apiError } from "../errors.js";
import { ignoredFieldsHeader } from "../protocol/common.js";
import type { ServedModel } from "../../scheduler/index.js";
import { chatEnding } from "../protocol/chat-completions.js";
import { embeddingInputs, embeddingList, finalVector, ignoredEmbeddingFields, parseEmbeddingRequest, type EmbeddingRequest } from "../protocol/embeddings.js";
import { templateMessages } from "./chat-messages.js";
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
    const prompts = body.messages
      ? embeddingPrompts(model, [chatPrompt(model, body)], "messages", truncation)
      : embeddingPrompts(model, embeddingInputs(body.input!), "input", truncation, body.add_special_tokens ?? true);
    const run = await runEmbeddings(ctx, request, reply, model, prompts);
    if (run.clientLeft) return reply.code(CLIENT_CLOSED_STATUS).send();
    const vectors = run.vectors.map((v) => finalVector(v, body.dimensions, body.normalize ?? true));
    return embeddingList(model.slug, vectors, body.encoding_format ?? "float", run.promptTokens);
  });
}

/** A chat input's token ids: its messages through the model's template, as vLLM embeds a chat (no assistant turn opened unless asked). */
function chatPrompt(model: ServedModel, body: EmbeddingRequest): number[] {
  if (!model.hasChatTemplate) throw apiError("invalid_value", `The model '${model.slug}' has no chat template: send 'input' instead.`, "messages");
  const messages = body.messages!;
  return model.chatPrompt(
    templateMessages(messages, () => model.toolDialect.newId()),
    {
      variables: body.chat_template_kwargs ?? undefined,
      ending: chatEnding({ messages, add_generation_prompt: body.add_generation_prompt ?? false, continue_final_message: body.continue_final_message }),
    },
  );
}
