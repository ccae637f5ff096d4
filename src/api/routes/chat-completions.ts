/** POST /v1/chat/completions: validate -> render the chat -> engine -> JSON or SSE. */
import type { FastifyInstance } from "fastify";
import type { ChatMessage, EmittedTokenLogprob, ServedModel } from "../../scheduler/index.js";
import type { ApiContext } from "../context.js";
import { apiError } from "../errors.js";
import {
  parseChatCompletionRequest,
  type ChatCompletion,
  type ChatCompletionChunk,
  type ChatLogprobs,
  type ChatMessageIn,
} from "../protocol/chat-completions.js";
import { stopList } from "../protocol/common.js";
import { completionBudget, samplingFor } from "./generation-request.js";
import { answerGeneration, type AnswerFormat } from "./generation.js";
import { answerId, unixNow } from "./ids.js";
import { servedModel } from "./served-model.js";

export function chatCompletionsRoute(app: FastifyInstance, ctx: ApiContext): void {
  app.post("/chat/completions", async (request, reply) => {
    const body = parseChatCompletionRequest(request.body);
    const model = servedModel(ctx, request, body.model);
    if (!model.hasChatTemplate) {
      throw apiError("invalid_value", `The model '${model.slug}' has no chat template: use /v1/completions with a plain prompt.`, "model");
    }
    const promptIds = model.chatPrompt(body.messages.map(templateMessage));
    const maxTokens = completionBudget(model, promptIds.length, body.max_completion_tokens ?? body.max_tokens, "messages");
    const sampling = samplingFor(model, {
      temperature: body.temperature,
      top_p: body.top_p,
      top_k: body.top_k,
      min_p: body.min_p,
      presence_penalty: body.presence_penalty,
      frequency_penalty: body.frequency_penalty,
      logit_bias: body.logit_bias,
      seed: body.seed,
      logprobs: body.logprobs,
      top_logprobs: body.top_logprobs,
    });
    const id = answerId("chatcmpl");
    const includeUsage = body.stream === true && body.stream_options?.include_usage === true;
    return answerGeneration(
      ctx,
      request,
      reply,
      {
        model,
        answerId: id,
        stream: body.stream === true,
        includeUsage,
        request: {
          promptIds,
          maxTokens,
          sampling,
          stop: stopList(body.stop),
          n: body.n ?? 1,
          ...(body.logprobs ? { logprobs: { top: body.top_logprobs ?? 0 } } : {}),
        },
      },
      chatFormat(id, model, includeUsage, body.logprobs === true),
    );
  });
}

/** A validated wire message as the chat template sees it: `developer` is the system role to templates, content parts are text only. */
function templateMessage(m: ChatMessageIn): ChatMessage {
  const out: ChatMessage = {
    role: m.role === "developer" ? "system" : m.role,
    content: Array.isArray(m.content) ? m.content.map((p) => ({ type: "text", text: p.text ?? "" })) : (m.content ?? null),
  };
  if (m.name) out.name = m.name;
  if (m.tool_calls?.length) out.tool_calls = m.tool_calls;
  if (m.tool_call_id) out.tool_call_id = m.tool_call_id;
  return out;
}

function chatLogprobs(entries: EmittedTokenLogprob[]): ChatLogprobs {
  return {
    content: entries.map((e) => ({
      token: e.token,
      logprob: e.logprob,
      bytes: e.bytes,
      top_logprobs: e.top.map((t) => ({ token: t.token, logprob: t.logprob, bytes: t.bytes })),
    })),
    refusal: null,
  };
}

function chatFormat(id: string, model: ServedModel, includeUsage: boolean, logprobs: boolean): AnswerFormat {
  const created = unixNow();
  const chunk = (choices: ChatCompletionChunk["choices"]): ChatCompletionChunk => ({
    id,
    object: "chat.completion.chunk",
    created,
    model: model.slug,
    system_fingerprint: model.artifactId,
    choices,
    ...(includeUsage ? { usage: null } : {}),
  });
  return {
    start: (index) => chunk([{ index, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }]),
    delta: (index, text, logprobs) => chunk([{ index, delta: { content: text }, logprobs: logprobs ? chatLogprobs(logprobs) : null, finish_reason: null }]),
    finish: (index, reason) => chunk([{ index, delta: {}, logprobs: null, finish_reason: reason }]),
    usage: (usage) => ({ ...chunk([]), usage }),
    complete: (choices, usage): ChatCompletion => ({
      id,
      object: "chat.completion",
      created,
      model: model.slug,
      system_fingerprint: model.artifactId,
      choices: choices.map((c) => ({
        index: c.index,
        message: { role: "assistant", content: c.text, refusal: null },
        logprobs: logprobs ? chatLogprobs(c.logprobs) : null,
        finish_reason: c.finishReason === "length" ? "length" : "stop",
      })),
      usage,
    }),
  };
}
