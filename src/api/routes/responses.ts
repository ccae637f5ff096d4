/**
 * The Responses API: POST /v1/responses (validate -> the conversation's items, a stored response's
 * before them -> render the chat -> engine -> the response object or its typed events), and the
 * stored responses: GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items. It runs
 * on the same answer plan as chat completions (`generation.ts`), with the Responses format beside
 * chat's; `text.format` and tools become the same constraints as chat's `response_format` and tools.
 */
import type { FastifyInstance, FastifyRequest } from "fastify";
import { z } from "zod";
import type { StoredItem, StoredResponse } from "../../catalogue/stored-responses.js";
import { ChatTemplateError, toolConstraint, type ChatMessage, type ServedModel, type ToolUse } from "../../scheduler/index.js";
import { ownerKeyId } from "../auth/auth.js";
import type { ApiContext } from "../context.js";
import { apiError } from "../errors.js";
import { ignoredFieldsHeader } from "../protocol/common.js";
import { parseOrThrow } from "../protocol/issues.js";
import { textFormatConstraint } from "../protocol/output-constraint.js";
import {
  ignoredResponsesFields,
  parseResponsesRequest,
  type EchoedFields,
  type ResponseObject,
  type ResponsesContentPart,
  type ResponsesInputItem,
  type ResponsesRequest,
} from "../protocol/responses.js";
import { functionToolUse, type OfferedChoice } from "../protocol/tools.js";
import { messageChars } from "./chat-messages.js";
import { answerPlan, checkPromptLength, completionBudget } from "./generation-request.js";
import { answerGeneration } from "./generation.js";
import { responsesId, unixNow } from "./ids.js";
import { lookupServedModel } from "./model-lookup.js";
import { reasoningPlan, thinkingParts } from "./reasoning.js";
import { responsesFormat } from "./responses-format.js";

export function responsesRoutes(app: FastifyInstance, ctx: ApiContext): void {
  app.post("/responses", async (request, reply) => {
    const body = parseResponsesRequest(request.body);
    const ignored = ignoredFieldsHeader(ignoredResponsesFields(request.body));
    if (ignored !== undefined) reply.header("x-kiln-ignored-fields", ignored);
    const model = await lookupServedModel(ctx, request, body.model);
    if (!model.hasChatTemplate) {
      throw apiError("invalid_value", `The model '${model.slug}' has no chat template: use /v1/completions with a plain prompt.`, "model");
    }
    const keyId = ownerKeyId(request);
    const toolUse = responsesToolUse(body);
    const format = textFormatConstraint(body.text?.format);
    const forced = format !== undefined || (toolUse !== undefined && toolUse.choice !== "auto");
    const thinking = reasoningPlan(model, { effort: body.reasoning?.effort }, forced, "reasoning.effort");
    if (!model.reasoning && [body.reasoning?.summary, body.reasoning?.generate_summary].some((v) => v != null && v !== "none")) {
      throw apiError(
        "unsupported_parameter",
        `Unsupported parameter: 'reasoning.summary' is not supported with the model '${model.slug}', which does not reason.`,
        "reasoning.summary",
      );
    }
    const items = await conversationItems(ctx, body, keyId);
    const { promptIds, kept } = renderConversation(model, body, items, toolUse, thinking.variables);
    const maxTokens = completionBudget(model, promptIds.length, body.max_output_tokens, "input", undefined, "max_output_tokens");
    const logprobs = body.include?.includes("message.output_text.logprobs") ?? false;
    const id = responsesId("resp");
    // Beside a split, the constraint (a format, forced or automatic tool calls) starts after the thinking.
    const calls = toolUse ? toolConstraint(model.toolDialect.syntax, toolUse, format) : format;
    const { reasoning, ...held } = thinkingParts(model, promptIds, thinking, calls);
    const plan = answerPlan(
      {
        temperature: body.temperature,
        top_p: body.top_p,
        top_k: body.top_k,
        min_p: body.min_p,
        repetition_penalty: body.repetition_penalty,
        seed: body.seed,
        stream: body.stream,
      },
      {
        model,
        answerId: id,
        prompts: [{ promptIds, maxTokens }],
        topLogprobs: logprobs ? (body.top_logprobs ?? 0) : null,
        ...held,
        endRepeatedCalls: toolUse !== undefined,
      },
    );
    // A stream always ends with the event that carries the usage (response.completed or response.incomplete).
    plan.includeUsage = plan.stream;
    const createdAt = unixNow();
    const store = body.store ?? true;
    const answer = responsesFormat(model, {
      id,
      createdAt,
      echo: echoOf(body, model),
      tools: toolUse !== undefined,
      logprobs,
      ...(reasoning ? { reasoning } : {}),
      onFinished: store ? (response) => keep(ctx, request, { id, keyId, createdAt, response, input: kept }) : undefined,
    });
    return answerGeneration(ctx, request, reply, plan, answer);
  });

  app.get("/responses/:id", async (request) => {
    const query = parseOrThrow(retrieveQuery, request.query ?? {});
    if (query.stream === "true") {
      throw apiError(
        "unsupported_parameter",
        "Unsupported parameter: 'stream' is not supported here: kiln answers every response while it is created, so there is no stream to resume.",
        "stream",
      );
    }
    return (await storedResponse(ctx, request)).response;
  });

  app.delete("/responses/:id", async (request) => {
    const { id } = request.params as { id: string };
    if (!(await ctx.responses.delete(id, ownerKeyId(request)))) throw responseNotFound(id);
    return { id, object: "response", deleted: true };
  });

  app.get("/responses/:id/input_items", async (request) => {
    const query = parseOrThrow(inputItemsQuery, request.query ?? {});
    const stored = await storedResponse(ctx, request);
    const ordered = query.order === "asc" ? stored.input : [...stored.input].reverse();
    let start = 0;
    if (query.after !== undefined) {
      start = ordered.findIndex((item) => item.id === query.after) + 1;
      if (start === 0) throw apiError("invalid_value", `Invalid 'after': the response '${stored.id}' has no input item '${query.after}'.`, "after");
    }
    const data = ordered.slice(start, start + query.limit);
    return { object: "list", data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more: start + query.limit < ordered.length };
  });
}

/** Query strings: numbers and booleans arrive as text. */
const retrieveQuery = z.looseObject({ stream: z.enum(["true", "false"]).optional() });
const inputItemsQuery = z.looseObject({
  after: z.string().min(1).optional(),
  limit: z.coerce.number().int().min(1).max(100).default(20),
  order: z.enum(["asc", "desc"]).default("desc"),
});

/** The key whose responses a request sees: its cloud key, or null in local mode (where every response is the one local key's). */
function responseNotFound(id: string) {
  return apiError("response_not_found", `Response with id '${id}' not found.`);
}

async function storedResponse(ctx: ApiContext, request: FastifyRequest) {
  const { id } = request.params as { id: string };
  const stored = await ctx.responses.get(id, ownerKeyId(request));
  if (!stored) throw responseNotFound(id);
  return stored;
}

/**
 * Stores a finished response, before its last bytes go out (so a client that continues it at once
 * finds it, on any replica); a store that fails (a full disk, an unreachable database) costs the
 * client its stored copy, never the answer.
 */
async function keep(
  ctx: ApiContext,
  request: FastifyRequest,
  stored: { id: string; keyId: string | null; createdAt: number; response: ResponseObject; input: StoredItem[] },
): Promise<void> {
  try {
    // The response object as JSON: its items are stored items (each has an id and a type).
    await ctx.responses.save({ ...stored, response: stored.response as unknown as StoredResponse["response"] });
  } catch (err) {
    request.log.error({ err, responseId: stored.id }, "could not store the response: it cannot be retrieved or continued");
  }
}

/**
 * The items of the conversation, oldest first: the previous response's (its input, then its
 * output), then this request's input, each with its id; `item_reference`s resolved from the key's
 * stored items, and items the previous response already holds (by id) not repeated.
 */
async function conversationItems(ctx: ApiContext, body: ResponsesRequest, keyId: string | null): Promise<StoredItem[]> {
  const items: StoredItem[] = [];
  if (body.previous_response_id != null) {
    const previous = await ctx.responses.get(body.previous_response_id, keyId);
    if (!previous) throw apiError("previous_response_not_found", `Previous response with id '${body.previous_response_id}' not found.`, "previous_response_id");
    items.push(...previous.input, ...previous.response.output);
  }
  const seen = new Set(items.map((item) => item.id));
  const input = typeof body.input === "string" ? [{ type: "message" as const, role: "user" as const, content: body.input }] : (body.input ?? []);
  for (const [i, entry] of input.entries()) {
    const item = await storedItem(ctx, entry, keyId, i);
    if (seen.has(item.id)) continue;
    seen.add(item.id);
    items.push(item);
  }
  return items;
}

/** An input item as stored: with an id (its own, or a new one), and a message's content as parts. */
async function storedItem(ctx: ApiContext, item: ResponsesInputItem, keyId: string | null, index: number): Promise<StoredItem> {
  switch (item.type) {
    case "message": {
      const partType = item.role === "assistant" ? "output_text" : "input_text";
      const content = typeof item.content === "string" ? [{ type: partType, text: item.content }] : item.content;
      return { id: item.id ?? responsesId("msg"), type: "message", status: "completed", role: item.role, content };
    }
    case "function_call":
      return {
        id: item.id ?? responsesId("fc"),
        type: "function_call",
        status: "completed",
        arguments: item.arguments,
        call_id: item.call_id,
        name: item.name,
      };
    case "function_call_output":
      return { id: item.id ?? responsesId("fco"), type: "function_call_output", status: "completed", call_id: item.call_id, output: item.output };
    case "reasoning":
      return { ...item, id: item.id ?? responsesId("rs"), type: "reasoning", status: "completed" };
    case "item_reference": {
      const found = await ctx.responses.item(item.id, keyId);
      if (!found) throw apiError("invalid_value", `Invalid 'input[${index}].id': no stored item has the id '${item.id}'.`, `input[${index}].id`);
      return found;
    }
  }
}

/** The text of content parts (replayed assistant text and refusals included). */
function partsText(parts: readonly Record<string, unknown>[]): string[] {
  return parts.map((p) => String((p as ResponsesContentPart).type === "refusal" ? (p.refusal ?? "") : (p.text ?? "")));
}

/**
 * The conversation as chat messages: `instructions` as the system message, messages by role
 * (`developer` is the system role to templates), calls as an assistant turn's `tool_calls` (calls in
 * a row, and text before them, make one turn) and their outputs as `tool` messages.
 */
function chatMessages(instructions: string | null | undefined, items: readonly StoredItem[]): ChatMessage[] {
  const messages: ChatMessage[] = instructions ? [{ role: "system", content: instructions }] : [];
  for (const item of items) {
    const last = messages.at(-1);
    if (item.type === "message") {
      const texts = partsText(item.content as Record<string, unknown>[]);
      const role = item.role === "developer" ? "system" : String(item.role);
      messages.push({ role, content: texts.length === 1 ? texts[0] : texts.map((text) => ({ type: "text", text })) });
    } else if (item.type === "function_call") {
      const call = { id: String(item.call_id), type: "function", function: { name: String(item.name), arguments: String(item.arguments) } };
      if (last?.role === "assistant") last.tool_calls = [...((last.tool_calls as unknown[] | undefined) ?? []), call];
      else messages.push({ role: "assistant", content: null, tool_calls: [call] });
    } else if (item.type === "function_call_output") {
      const output = typeof item.output === "string" ? item.output : partsText(item.output as Record<string, unknown>[]).join("");
      messages.push({ role: "tool", content: output, tool_call_id: String(item.call_id) });
    }
  }
  return messages;
}

/**
 * The prompt of the conversation, and the items it kept. With `truncation: "auto"` a conversation
 * too long for the context (with room for `max_output_tokens`, or one token) loses its oldest items,
 * down to a user message, until it fits; otherwise a prompt too long is the budget's 400.
 */
function renderConversation(
  model: ServedModel,
  body: ResponsesRequest,
  items: StoredItem[],
  toolUse: ToolUse | undefined,
  variables: Record<string, unknown> | undefined,
): { promptIds: number[]; kept: StoredItem[] } {
  let kept = items;
  if (body.truncation !== "auto") checkPromptLength(model, messageChars(chatMessages(body.instructions, kept)), "input");
  for (;;) {
    const promptIds = chatPrompt(model, chatMessages(body.instructions, kept), toolUse, variables);
    if (body.truncation !== "auto" || promptIds.length + (body.max_output_tokens ?? 1) <= model.contextLength || kept.length <= 1) return { promptIds, kept };
    let drop = 1;
    while (drop < kept.length - 1 && !(kept[drop].type === "message" && kept[drop].role === "user")) drop++;
    kept = kept.slice(drop);
  }
}

/** The prompt of `messages`; a conversation the chat template cannot render is the request's to fix, a 400 on `input`. */
function chatPrompt(model: ServedModel, messages: ChatMessage[], toolUse: ToolUse | undefined, variables: Record<string, unknown> | undefined): number[] {
  try {
    return model.chatPrompt(messages, { tools: toolUse?.tools, variables });
  } catch (err) {
    if (err instanceof ChatTemplateError && err.phase === "render") throw apiError("invalid_value", err.message, "input");
    throw err;
  }
}

/**
 * The request's tool use: its function tools, and `tool_choice` (a named function, or
 * `allowed_tools`, which offers only the tools it lists).
 */
function responsesToolUse(body: ResponsesRequest): ToolUse | undefined {
  const tools = body.tools ?? [];
  let offered = tools.map((tool, index) => ({ tool, index }));
  let choice: OfferedChoice;
  const tc = body.tool_choice;
  if (tc != null && typeof tc === "object" && tc.type === "allowed_tools") {
    tc.tools.forEach(({ name }, i) => {
      if (!tools.some((t) => t.name === name)) {
        throw apiError(
          "invalid_value",
          `Invalid value for 'tool_choice.tools[${i}].name': no function named '${name}' is in 'tools'.`,
          `tool_choice.tools[${i}].name`,
        );
      }
    });
    const allowed = new Set(tc.tools.map((t) => t.name));
    offered = offered.filter(({ tool }) => allowed.has(tool.name));
    choice = tc.mode;
  } else {
    choice = tc != null && typeof tc === "object" ? { name: tc.name } : tc;
  }
  return functionToolUse(
    offered.map(({ tool }) => tool),
    choice,
    body.parallel_tool_calls,
    (i, field) => `tools[${offered[i].index}].${field}`,
  );
}

/** The request's fields as the response echoes them, with the reference API's defaults filled in. */
function echoOf(body: ResponsesRequest, model: ServedModel): EchoedFields {
  return {
    instructions: body.instructions ?? null,
    max_output_tokens: body.max_output_tokens ?? null,
    max_tool_calls: body.max_tool_calls ?? null,
    model: model.slug,
    parallel_tool_calls: body.parallel_tool_calls ?? true,
    previous_response_id: body.previous_response_id ?? null,
    prompt_cache_key: body.prompt_cache_key ?? null,
    reasoning: { effort: body.reasoning?.effort ?? null, summary: body.reasoning?.summary ?? null },
    safety_identifier: body.safety_identifier ?? null,
    service_tier: "default",
    store: body.store ?? true,
    temperature: body.temperature ?? 1,
    text: { format: body.text?.format ?? { type: "text" }, verbosity: "medium" },
    tool_choice: body.tool_choice ?? "auto",
    tools: (body.tools ?? []).map((t) => ({
      type: "function",
      name: t.name,
      description: t.description ?? null,
      parameters: t.parameters ?? null,
      strict: t.strict ?? true,
    })),
    top_logprobs: body.top_logprobs ?? 0,
    top_p: body.top_p ?? 1,
    truncation: body.truncation ?? "disabled",
    user: body.user ?? null,
    metadata: body.metadata ?? {},
  };
}
