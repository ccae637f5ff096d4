/** POST /v1/chat/completions: validate -> render the chat -> engine -> JSON or SSE. */
import type { FastifyInstance } from "fastify";
import { toolConstraint } from "../../scheduler/index.js";
import type { ApiContext } from "../context.js";
import { apiError } from "../errors.js";
import { ignoredFieldsHeader } from "../protocol/common.js";
import { chatEnding, ignoredChatFields, parseChatCompletionRequest, predictionText } from "../protocol/chat-completions.js";
import { requestConstraint } from "../protocol/output-constraint.js";
import { toolUseOf, usesLegacyFunctions } from "../protocol/tools.js";
import { chatFormat } from "./chat-format.js";
import { messageChars, templateMessages } from "./chat-messages.js";
import { answerPlan, checkEndTokens, checkPromptLength, completionBudget, predictionIds, truncatedPrompt } from "./generation-request.js";
import { answerGeneration } from "./generation.js";
import { answerId } from "./ids.js";
import { lookupServedModel } from "./model-lookup.js";
import { reasoningPlan, thinkingParts } from "./reasoning.js";

export function chatCompletionsRoute(app: FastifyInstance, ctx: ApiContext): void {
  app.post("/chat/completions", async (request, reply) => {
    const body = parseChatCompletionRequest(request.body);
    const ignored = ignoredFieldsHeader(ignoredChatFields(request.body));
    if (ignored !== undefined) reply.header("x-kiln-ignored-fields", ignored);
    const model = await lookupServedModel(ctx, request, body.model);
    if (!model.hasChatTemplate) {
      throw apiError("invalid_value", `The model '${model.slug}' has no chat template: use /v1/completions with a plain prompt.`, "model");
    }
    const toolUse = toolUseOf(body);
    const format = requestConstraint(body);
    const forced = format !== undefined || (toolUse !== undefined && toolUse.choice !== "auto");
    const thinking = reasoningPlan(model, { effort: body.reasoning_effort, templateVariables: body.chat_template_kwargs }, forced);
    const messages = templateMessages(body.messages, () => model.toolDialect.newId());
    if (body.truncate_prompt_tokens == null) checkPromptLength(model, messageChars(messages), "messages");
    const rendered = model.chatPrompt(messages, { tools: toolUse?.tools, variables: thinking.variables, ending: chatEnding(body) });
    const budgetParam = body.max_completion_tokens != null ? "max_completion_tokens" : "max_tokens";
    const requested = body.max_completion_tokens ?? body.max_tokens;
    const promptIds = truncatedPrompt(model, rendered, body.truncate_prompt_tokens, requested);
    const maxTokens = completionBudget(model, promptIds.length, requested, "messages", undefined, budgetParam);
    checkEndTokens(body, forced, maxTokens, budgetParam);
    const topLogprobs = body.logprobs ? (body.top_logprobs ?? 0) : null;
    // Beside a split, the constraint (a format, forced or automatic tool calls, or calls or a format) starts after the thinking.
    const calls = toolUse ? toolConstraint(model.toolDialect.syntax, toolUse, format) : format;
    const { reasoning, ...held } = thinkingParts(model, promptIds, thinking, calls, { tokens: body.thinking_token_budget, param: "thinking_token_budget" });
    const plan = answerPlan(body, {
      model,
      answerId: answerId("chatcmpl"),
      prompts: [{ promptIds, maxTokens }],
      topLogprobs,
      promptLogprobs: body.prompt_logprobs ?? null,
      promptRanks: body.prompt_logprobs != null,
      ...held,
      endRepeatedCalls: toolUse !== undefined,
      ...(body.prediction ? { prediction: predictionIds(model, predictionText(body.prediction)) } : {}),
    });
    const answer = chatFormat(plan.answerId, model, {
      includeUsage: plan.includeUsage,
      logprobs: topLogprobs !== null,
      promptLogprobs: body.prompt_logprobs ?? null,
      tools: toolUse !== undefined ? (usesLegacyFunctions(body) ? "legacy" : "tools") : false,
      ...(reasoning ? { reasoning } : {}),
    });
    return answerGeneration(ctx, request, reply, plan, answer);
  });
}
