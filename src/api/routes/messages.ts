/**
 * POST /v1/messages and /v1/messages/count_tokens (Anthropic's Messages API): validate -> render the
 * conversation through the model's chat template -> the same engine, tools and thinking as
 * `/v1/chat/completions` -> one `message` or its named events. Errors come in Anthropic's shape.
 */
import type { FastifyError, FastifyInstance, FastifyReply } from "fastify";
import { toolConstraint, type ChatEnding, type ChatMessage, type ServedModel, type ToolUse } from "../../scheduler/index.js";
import type { ApiContext } from "../context.js";
import { checkJsonSchema, ConstraintError, type ConstraintSpec } from "../../runtime/constrain/index.js";
import { apiError, toApiError } from "../errors.js";
import { ignoredFieldsHeader, type SharedFields } from "../protocol/common.js";
import { parseOrThrow } from "../protocol/issues.js";
import {
  countTokensRequestSchema,
  messagesErrorBody,
  messagesErrorStatus,
  messagesRequestSchema,
  type ContentBlock,
  type CountTokensRequest,
  type MessageParam,
  type MessagesRequest,
} from "../protocol/messages.js";
import { functionToolUse, type OfferedChoice } from "../protocol/tools.js";
import { messageChars } from "./chat-messages.js";
import { answerPlan, checkPromptLength, completionBudget } from "./generation-request.js";
import { answerGeneration } from "./generation.js";
import { anthropicId } from "./ids.js";
import { messageBatchesRoutes } from "./message-batches.js";
import { messagesFormat } from "./messages-format.js";
import { lookupServedModel } from "./model-lookup.js";
import { reasoningPlan, thinkingParts, type ReasoningPlan } from "./reasoning.js";

/** The Messages API's routes, in a scope of their own so that their errors take Anthropic's shape. */
export async function messagesRoutes(app: FastifyInstance, ctx: ApiContext): Promise<void> {
  await app.register(async (api) => {
    api.setErrorHandler((err: FastifyError, request, reply) => {
      const error = toApiError(err, request.id);
      if (error.status >= 500 && error.code === "internal_error") request.log.error({ err }, "request failed");
      else request.log.info({ code: error.code, status: error.status, param: error.param }, error.message);
      if (error.retryAfter !== undefined) reply.header("retry-after", String(error.retryAfter));
      return reply.code(messagesErrorStatus(error)).send(messagesErrorBody(error));
    });

    api.post("/messages", async (request, reply) => {
      const body = parseOrThrow(messagesRequestSchema, request.body);
      const model = await lookupServedModel(ctx, request, body.model);
      const prompt = renderedPrompt(model, body, reply);
      const maxTokens = completionBudget(model, prompt.ids.length, body.max_tokens, "messages");
      const fields: SharedFields = {
        temperature: body.temperature,
        top_p: body.top_p,
        top_k: body.top_k === 0 ? -1 : body.top_k,
        stop: body.stop_sequences,
        stream: body.stream === true,
        // The stream's last events carry the output tokens, as a usage chunk would.
        stream_options: body.stream ? { include_usage: true } : undefined,
      };
      const jsonFormat = outputFormat(body);
      const calls = prompt.toolUse ? toolConstraint(model.toolDialect.syntax, prompt.toolUse, jsonFormat) : jsonFormat;
      const asked = budgetTokens(body);
      // A model that does not reason answers without thinking (the ignored-fields header says so), so its budget holds nothing.
      const { reasoning, ...held } = thinkingParts(
        model,
        prompt.ids,
        prompt.thinking,
        calls,
        model.reasoning ? { tokens: asked, param: "thinking.budget_tokens" } : undefined,
      );
      const id = anthropicId("msg");
      const plan = answerPlan(fields, {
        model,
        answerId: id,
        prompts: [{ promptIds: prompt.ids, maxTokens }],
        topLogprobs: null,
        ...held,
        endRepeatedCalls: prompt.toolUse !== undefined,
      });
      const format = messagesFormat(model, { id, inputTokens: prompt.ids.length, ...(reasoning ? { reasoning } : {}), tools: prompt.toolUse !== undefined });
      return answerGeneration(ctx, request, reply, plan, format);
    });

    messageBatchesRoutes(api, ctx);

    api.post("/messages/count_tokens", async (request, reply) => {
      const body = parseOrThrow(countTokensRequestSchema, request.body);
      const model = await lookupServedModel(ctx, request, body.model);
      return { input_tokens: renderedPrompt(model, body, reply).ids.length };
    });
  });
}

/** The fields of the request kiln reads; the header names the others (Anthropic's betas, cache hints...). */
const READ = new Set([
  "model",
  "messages",
  "system",
  "tools",
  "tool_choice",
  "thinking",
  "max_tokens",
  "stop_sequences",
  "temperature",
  "top_p",
  "top_k",
  "stream",
  "metadata",
  "service_tier",
  "output_config",
  "output_format",
]);

/** `thinking.budget_tokens`, checked as Anthropic checks it: fewer than `max_tokens`, so that the answer has room after the thinking. */
function budgetTokens(body: MessagesRequest): number | undefined {
  if (body.thinking?.type !== "enabled") return undefined;
  const budget = body.thinking.budget_tokens;
  if (budget >= body.max_tokens) {
    throw apiError("invalid_value", `'max_tokens' (${body.max_tokens}) must be greater than 'thinking.budget_tokens' (${budget}).`, "thinking.budget_tokens");
  }
  return budget;
}

/**
 * `output_config.format`'s (or the beta's `output_format`'s) schema as a constraint, checked (a 400
 * naming it for a schema kiln cannot enforce, or for both spellings at once).
 */
function outputFormat(body: MessagesRequest): ConstraintSpec | undefined {
  if (body.output_config?.format != null && body.output_format != null) {
    throw apiError("invalid_value", "'output_format' and 'output_config.format' cannot both be given: send 'output_config.format' alone.", "output_format");
  }
  const field = body.output_format != null ? "output_format" : "output_config.format";
  const schema = body.output_config?.format?.schema ?? body.output_format?.schema;
  if (schema === undefined) return undefined;
  try {
    checkJsonSchema(schema);
  } catch (err) {
    if (!(err instanceof ConstraintError)) throw err;
    const where = err.path === "" ? "the schema" : `the schema at '${err.path}'`;
    throw apiError("invalid_value", `Invalid '${field}.schema': ${where}: ${err.message}`, `${field}.schema`);
  }
  return { type: "json_schema", schema: JSON.stringify(schema) };
}

/** The conversation's prompt, the tool use it offers and what it asks of the thinking; names ignored fields on the reply. */
function renderedPrompt(model: ServedModel, body: CountTokensRequest, reply: FastifyReply): { ids: number[]; toolUse?: ToolUse; thinking: ReasoningPlan } {
  const ignored = Object.keys(body).filter((k) => !READ.has(k));
  // A model that does not reason cannot think however it is asked: the request is answered, and told.
  if (body.thinking?.type === "enabled" && !model.reasoning) ignored.push("thinking");
  if ((body as Partial<MessagesRequest>).output_config?.effort != null && !model.reasoning) ignored.push("output_config.effort");
  const header = ignoredFieldsHeader(ignored);
  if (header !== undefined) reply.header("x-kiln-ignored-fields", header);
  const toolUse = functionToolUse(
    (body.tools ?? []).map((t) => ({ name: t.name, description: t.description, parameters: t.input_schema })),
    choiceOf(body.tool_choice),
    !(body.tool_choice && "disable_parallel_tool_use" in body.tool_choice && body.tool_choice.disable_parallel_tool_use),
    (i, field) => `tools[${i}].${field === "parameters" ? "input_schema" : field}`,
  );
  const effort = body.thinking?.type === "disabled" && model.reasoning ? "none" : undefined;
  const asked = body as Partial<MessagesRequest>;
  const formatted = asked.output_config?.format != null || asked.output_format != null;
  const thinking = reasoningPlan(model, { effort }, formatted || (toolUse !== undefined && toolUse.choice !== "auto"), "thinking");
  const messages = templateMessages(body.system, body.messages, () => model.toolDialect.newId());
  checkPromptLength(model, messageChars(messages), "messages");
  const ids = model.chatPrompt(messages, { tools: toolUse?.tools, variables: thinking.variables, ending: endingOf(body.messages) });
  return { ids, ...(toolUse ? { toolUse } : {}), thinking };
}

/** Anthropic's `tool_choice` as kiln's: `any` is "required". */
function choiceOf(choice: CountTokensRequest["tool_choice"]): OfferedChoice {
  if (!choice) return undefined;
  if (choice.type === "any") return "required";
  if (choice.type === "tool") return { name: choice.name };
  return choice.type;
}

/** A conversation ending with the assistant's text is a prefill: the answer continues it. */
function endingOf(messages: readonly MessageParam[]): ChatEnding {
  const last = messages[messages.length - 1];
  if (last.role !== "assistant") return "assistant-turn";
  const blocks = typeof last.content === "string" ? [] : last.content;
  return blocks.some((b) => b.type === "tool_use") ? "assistant-turn" : "inside-last-message";
}

/**
 * The conversation as the chat template sees it: the system text first; a user turn's tool results
 * as `tool` messages (before its text, so that each follows the call it answers), an assistant's
 * tool uses as its calls. Call ids are given the model's own form (Mistral's templates demand nine
 * letters and digits), the same for a call and its result.
 */
function templateMessages(system: CountTokensRequest["system"], messages: readonly MessageParam[], newId: () => string): ChatMessage[] {
  const ids = new Map<string, string>();
  const idOf = (id: string) => {
    let mapped = ids.get(id);
    if (mapped === undefined) ids.set(id, (mapped = newId()));
    return mapped;
  };
  const out: ChatMessage[] = [];
  const systemText = typeof system === "string" ? system : (system ?? []).map((b) => b.text).join("\n");
  if (system != null) out.push({ role: "system", content: systemText });
  for (const m of messages) {
    const blocks: ContentBlock[] = typeof m.content === "string" ? [{ type: "text", text: m.content }] : m.content;
    const text = blocks.flatMap((b) => (b.type === "text" ? [b.text] : []));
    if (m.role === "user") {
      for (const b of blocks) {
        if (b.type !== "tool_result") continue;
        const content = typeof b.content === "string" ? b.content : (b.content ?? []).map((c) => c.text).join("\n");
        out.push({ role: "tool", tool_call_id: idOf(b.tool_use_id), content: b.is_error ? `Error: ${content}` : content });
      }
      if (text.length > 0) out.push({ role: "user", content: text.join("\n") });
    } else {
      const calls = blocks.flatMap((b) =>
        b.type === "tool_use" ? [{ id: idOf(b.id), type: "function", function: { name: b.name, arguments: JSON.stringify(b.input) } }] : [],
      );
      out.push({ role: "assistant", content: text.join(""), ...(calls.length > 0 ? { tool_calls: calls } : {}) });
    }
  }
  return out;
}
