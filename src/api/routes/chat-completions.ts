/** POST /v1/chat/completions: validate -> render the chat -> engine -> JSON or SSE. */
import type { FastifyInstance } from "fastify";
import type { ChatMessage, EmittedTokenLogprob, ServedModel } from "../../scheduler/index.js";
import type { ApiContext } from "../context.js";
import { apiError } from "../errors.js";
import {
  constraintOf,
  parseChatCompletionRequest,
  type ChatCompletion,
  type ChatCompletionChunk,
  type ChatLogprobs,
  type ChatMessageIn,
} from "../protocol/chat-completions.js";
import { completionBudget, generationJob } from "./generation-request.js";
import { answerGeneration, type AnswerFormat } from "./generation.js";
import { answerId, unixNow } from "./ids.js";
import { lookupServedModel } from "./model-lookup.js";

export function chatCompletionsRoute(app: FastifyInstance, ctx: ApiContext): void {
  app.post("/chat/completions", async (request, reply) => {
    const body = parseChatCompletionRequest(request.body);
    const model = lookupServedModel(ctx, request, body.model);
    if (!model.hasChatTemplate) {
      throw apiError("invalid_value", `The model '${model.slug}' has no chat template: use /v1/completions with a plain prompt.`, "model");
    }
    const promptIds = model.chatPrompt(body.messages.map(templateMessage));
    const budgetParam = body.max_completion_tokens != null ? "max_completion_tokens" : "max_tokens";
    const maxTokens = completionBudget(model, promptIds.length, body.max_completion_tokens ?? body.max_tokens, "messages", undefined, budgetParam);
    const topLogprobs = body.logprobs ? (body.top_logprobs ?? 0) : null;
    const constraint = constraintOf(body.response_format);
    const job = generationJob(body, { model, answerId: answerId("chatcmpl"), promptIds, maxTokens, topLogprobs, ...(constraint ? { constraint } : {}) });
    return answerGeneration(ctx, request, reply, job, chatFormat(job.answerId, model, job.includeUsage, topLogprobs !== null));
  });
}

/**
 * A validated wire message as the chat template sees it: `developer` is the system role to templates,
 * content parts are text only, tool calls are `{id, type, function: {name, arguments}}` with the
 * arguments still the JSON string (the template's own shape is the renderer's choice).
 */
function templateMessage(m: ChatMessageIn): ChatMessage {
  const out: ChatMessage = {
    role: m.role === "developer" ? "system" : m.role,
    content: Array.isArray(m.content) ? m.content.map((p) => ({ type: "text", text: p.text ?? "" })) : (m.content ?? null),
  };
  if (m.name) out.name = m.name;
  if (m.tool_calls?.length) {
    out.tool_calls = m.tool_calls.map((c) => ({ id: c.id, type: c.type, function: { name: c.function.name, arguments: c.function.arguments } }));
  }
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
