/**
 * POST /tokenize and /detokenize: a prompt or a chat as the served model's token ids, exactly as a
 * completion or a chat completion would be prompted (so `count` is the `prompt_tokens` such a request
 * is billed), and ids back to text; POST /apply-template (llama.cpp's): a chat as the text of that
 * prompt. Nothing is generated.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { ServedModel } from "../../scheduler/index.js";
import type { ApiContext } from "../context.js";
import { apiError } from "../errors.js";
import { chatEnding } from "../protocol/chat-completions.js";
import { ignoredFieldsHeader } from "../protocol/common.js";
import {
  type DetokenizeAnswer,
  ignoredDetokenizeFields,
  ignoredTokenizeFields,
  parseDetokenizeRequest,
  parseTokenizeRequest,
  type TokenizeAnswer,
  type TokenizeRequest,
} from "../protocol/tokenize.js";
import { toolUseOf } from "../protocol/tools.js";
import { templateMessages } from "./chat-messages.js";
import { answerId } from "./ids.js";
import { lookupServedModel, onlyTextModel } from "./model-lookup.js";

export function tokenizeRoutes(app: FastifyInstance, ctx: ApiContext): void {
  app.post("/tokenize", async (request, reply): Promise<TokenizeAnswer> => {
    const body = parseTokenizeRequest(request.body);
    const ignored = ignoredFieldsHeader(ignoredTokenizeFields(request.body));
    if (ignored !== undefined) reply.header("x-kiln-ignored-fields", ignored);
    const model = await lookupServedModel(ctx, request, body.model ?? onlyTextModel(ctx));
    return admitted(ctx, request, reply, model, (): TokenizeAnswer => {
      const tokens = promptTokens(model, body);
      return {
        count: tokens.length,
        max_model_len: model.contextLength,
        tokens: body.with_pieces ? tokens.map((id) => ({ id, piece: model.detokenize([id]) })) : tokens,
        token_strs: body.return_token_strs ? tokens.map((id) => model.tokenText(id)) : null,
      };
    });
  });

  app.post("/apply-template", async (request, reply): Promise<{ prompt: string }> => {
    const body = parseTokenizeRequest(request.body);
    if (body.messages == null) throw apiError("missing_required_parameter", "Missing required parameter: 'messages' (the chat to render).", "messages");
    const ignored = ignoredFieldsHeader(ignoredTokenizeFields(request.body));
    if (ignored !== undefined) reply.header("x-kiln-ignored-fields", ignored);
    const model = await lookupServedModel(ctx, request, body.model ?? onlyTextModel(ctx));
    // Control tokens written as their text: the prompt tokenizes back, with them parsed, to the ids a chat completion gets.
    return admitted(ctx, request, reply, model, () => ({ prompt: model.detokenize(promptTokens(model, body)) }));
  });

  app.post("/detokenize", async (request, reply): Promise<DetokenizeAnswer> => {
    const body = parseDetokenizeRequest(request.body);
    const ignored = ignoredFieldsHeader(ignoredDetokenizeFields(request.body));
    if (ignored !== undefined) reply.header("x-kiln-ignored-fields", ignored);
    const model = await lookupServedModel(ctx, request, body.model ?? onlyTextModel(ctx));
    const outside = body.tokens.findIndex((id) => id >= model.vocabSize);
    if (outside >= 0) {
      throw apiError(
        "invalid_value",
        `Token id ${body.tokens[outside]} is outside the model's vocabulary (0 to ${model.vocabSize - 1}).`,
        `tokens[${outside}]`,
      );
    }
    return admitted(ctx, request, reply, model, () => {
      const text = model.detokenize(body.tokens);
      return { prompt: text, content: text };
    });
  });
}

/**
 * `answer` once the request's key is admitted: in cloud mode a tokenization counts against the
 * key's request and concurrency limits (its work holds the server as a prompt's does), and is
 * charged nothing: its admission is released when it is answered.
 */
async function admitted<T>(ctx: ApiContext, request: FastifyRequest, reply: FastifyReply, model: ServedModel, answer: () => T): Promise<T> {
  if (!ctx.cloud) return answer();
  const requestId = answerId("tok");
  await ctx.cloud.admit(request, reply, { requestId, slug: model.slug, artifactId: model.artifactId, promptTokens: 0, maxCompletionTokens: 0, audioMs: 0 });
  try {
    return answer();
  } finally {
    await ctx.cloud.release(requestId);
  }
}

/** The request's prompt or chat as the model would be prompted with it. */
function promptTokens(model: ServedModel, body: TokenizeRequest): number[] {
  if (body.prompt != null) return model.textPrompt(body.prompt, body.add_special_tokens ?? true);
  // Only ids come back (nothing runs), and token-id prompts are taken as they are anyway: parsing special-token text forges nothing.
  if (body.content != null) return model.textPrompt(body.content, body.add_special ?? false, body.parse_special === false ? "text" : "parse");
  if (!model.hasChatTemplate) {
    throw apiError("invalid_value", `The model '${model.slug}' has no chat template: tokenize a plain 'prompt' instead.`, "messages");
  }
  const tools = toolUseOf(body)?.tools;
  return model.chatPrompt(
    templateMessages(body.messages!, () => model.toolDialect.newId()),
    {
      tools,
      variables: body.chat_template_kwargs ?? undefined,
      ending: chatEnding({ ...body, messages: body.messages! }),
    },
  );
}
