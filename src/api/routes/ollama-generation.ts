/**
 * POST /api/chat and /api/generate (Ollama's): validate -> render the prompt -> the same engine,
 * budget, constraints, tools and thinking as `/v1/chat/completions` -> Ollama's lines of JSON or
 * one object.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { toolConstraint, type ChatMessage, type ServedModel, type ToolUse } from "../../scheduler/index.js";
import type { ConstraintSpec } from "../../runtime/constrain/index.js";
import type { ApiContext } from "../context.js";
import { apiError } from "../errors.js";
import { ignoredFieldsHeader, type REASONING_EFFORTS } from "../protocol/common.js";
import { parseOrThrow } from "../protocol/issues.js";
import {
  ignoredOllamaOptions,
  keepAliveMs,
  ollamaChatRequestSchema,
  ollamaGenerateRequestSchema,
  ollamaSampling,
  ollamaTopLogprobs,
  type OllamaMessage,
} from "../protocol/ollama.js";
import { ollamaFormatConstraint } from "../protocol/output-constraint.js";
import { functionToolUse } from "../protocol/tools.js";
import { messageChars } from "./chat-messages.js";
import { answerPlan, checkPromptLength, completionBudget } from "./generation-request.js";
import { answerGeneration } from "./generation.js";
import { answerId } from "./ids.js";
import { knownModelSlug, lookupServedModel } from "./model-lookup.js";
import { ollamaFormat } from "./ollama-format.js";
import { reasoningPlan, thinkingParts, type ReasoningPlan } from "./reasoning.js";

export function ollamaChatRoute(app: FastifyInstance, ctx: ApiContext): void {
  app.post("/chat", async (request, reply) => {
    const startedAt = performance.now();
    const body = parseOrThrow(ollamaChatRequestSchema, request.body);
    const keepAlive = keepAliveMs(body.keep_alive);
    if (!body.messages?.length && keepAlive === 0) return unloaded(ctx, request, body.model, "chat");
    const { model, loadMs } = await timedLookup(ctx, request, body.model);
    nameIgnored(reply, [...ignoredOllamaOptions(body), ...applyKeepAlive(ctx, model, keepAlive)]);
    if (!body.messages?.length) return loaded(model, "chat");
    if (!model.hasChatTemplate) throw apiError("invalid_value", `The model '${model.slug}' has no chat template: use /api/generate with "raw": true.`, "model");
    const toolUse = functionToolUse(
      (body.tools ?? []).map((t) => t.function),
      undefined,
      true,
      (i, field) => `tools[${i}].function.${field}`,
    );
    const format = ollamaFormatConstraint(body.format);
    const thinking = reasoningPlan(model, { effort: thinkEffort(model, body.think) }, format !== undefined, "think");
    const messages = templateMessages(body.messages, () => model.toolDialect.newId());
    const render = (kept: readonly ChatMessage[]) => model.chatPrompt(kept, { tools: toolUse?.tools, variables: thinking.variables });
    if (body.truncate === false) checkPromptLength(model, messageChars(messages), "messages");
    const promptIds = body.truncate === false ? render(messages) : fittedChat(model, messages, render);
    return answer(ctx, request, reply, { model, startedAt, loadMs, route: "chat", promptIds, promptParam: "messages", thinking, toolUse, format, body });
  });
}

export function ollamaGenerateRoute(app: FastifyInstance, ctx: ApiContext): void {
  app.post("/generate", async (request, reply) => {
    const startedAt = performance.now();
    const body = parseOrThrow(ollamaGenerateRequestSchema, request.body);
    const keepAlive = keepAliveMs(body.keep_alive);
    const prompt = body.prompt ?? "";
    const nothingToWrite = prompt === "" && body.suffix == null;
    if (nothingToWrite && keepAlive === 0) return unloaded(ctx, request, body.model, "generate");
    const { model, loadMs } = await timedLookup(ctx, request, body.model);
    // A prompt too long for the context is refused whatever `truncate` says (Ollama's would cut it).
    nameIgnored(reply, [...ignoredOllamaOptions(body), ...(body.truncate != null ? ["truncate"] : []), ...applyKeepAlive(ctx, model, keepAlive)]);
    if (nothingToWrite) return loaded(model, "generate");
    const format = ollamaFormatConstraint(body.format);
    checkPromptLength(model, prompt.length + (body.suffix ?? "").length + (body.system ?? "").length, "prompt");
    let promptIds: number[];
    let thinking: ReasoningPlan = { split: false };
    if (body.suffix != null) {
      if (body.raw) throw apiError("unsupported_value", "'raw' cannot go with 'suffix': a fill-in-the-middle prompt has the model's own markers.", "suffix");
      if (!model.fillsInMiddle) {
        throw apiError("unsupported_value", `The model '${model.slug}' does not support insert: its vocabulary has no fill-in-the-middle tokens.`, "suffix");
      }
      promptIds = model.infillPrompt(model.textPrompt(prompt, false), body.suffix)!;
    } else if (body.raw || !model.hasChatTemplate) {
      promptIds = model.textPrompt(prompt);
    } else {
      thinking = reasoningPlan(model, { effort: thinkEffort(model, body.think) }, format !== undefined, "think");
      const messages: ChatMessage[] = [...(body.system ? [{ role: "system", content: body.system }] : []), { role: "user", content: prompt }];
      promptIds = model.chatPrompt(messages, { variables: thinking.variables });
    }
    return answer(ctx, request, reply, { model, startedAt, loadMs, route: "generate", promptIds, promptParam: "prompt", thinking, format, body });
  });
}

/**
 * The prompt of the latest messages that fit the context, as Ollama cuts a chat too long for it:
 * system messages always stay, and the history starts at the latest user message from which the
 * rest fits (kiln cuts only before a user message, so the kept turns still alternate as templates
 * expect). The prompt leaves room for one generated token; when not even the last user turn fits,
 * a 400 `context_length_exceeded` on `messages`. Found by bisection over the user turns (a shorter
 * history never renders longer), so a long chat is rendered a few times, not once per message.
 */
function fittedChat(model: ServedModel, messages: readonly ChatMessage[], render: (kept: readonly ChatMessage[]) => number[]): number[] {
  const whole = render(messages);
  if (whole.length < model.contextLength) return whole;
  const starts = messages.flatMap((m, i) => (m.role === "user" && i > 0 ? [i] : []));
  const rendered = new Map<number, number[]>();
  const fitsFrom = (k: number) => {
    const start = starts[k];
    const ids = render([...messages.slice(0, start).filter((m) => m.role === "system"), ...messages.slice(start)]);
    rendered.set(k, ids);
    return ids.length < model.contextLength;
  };
  const latest = starts.length - 1;
  if (latest < 0 || !fitsFrom(latest)) {
    throw apiError(
      "context_length_exceeded",
      `This model's maximum context length is ${model.contextLength} tokens. However, the chat's last turn with its system messages resulted in ${(rendered.get(latest) ?? whole).length} tokens. Please reduce its length.`,
      "messages",
    );
  }
  // starts[hi] fits; the earliest start that fits keeps the most history.
  let [lo, hi] = [0, latest];
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (fitsFrom(mid)) hi = mid;
    else lo = mid + 1;
  }
  return rendered.get(hi)!;
}

interface Answer {
  model: ServedModel;
  startedAt: number;
  loadMs: number;
  route: "chat" | "generate";
  promptIds: number[];
  promptParam: string;
  thinking: ReasoningPlan;
  toolUse?: ToolUse;
  format: ConstraintSpec | undefined;
  body: Parameters<typeof ollamaSampling>[0] & Parameters<typeof ollamaTopLogprobs>[0];
}

/** Generates the answer of either route: the budget, sampling and constraint, then Ollama's shape. */
function answer(ctx: ApiContext, request: FastifyRequest, reply: FastifyReply, a: Answer): Promise<unknown> {
  const { model, promptIds, toolUse, format } = a;
  const { fields, maxTokens } = ollamaSampling(a.body);
  const budget = completionBudget(model, promptIds.length, maxTokens, a.promptParam, undefined, "options.num_predict");
  const topLogprobs = ollamaTopLogprobs(a.body);
  const calls = toolUse ? toolConstraint(model.toolDialect.syntax, toolUse, format) : format;
  const { reasoning, ...held } = thinkingParts(model, promptIds, a.thinking, calls);
  const plan = answerPlan(fields, {
    model,
    answerId: answerId("ollama"),
    prompts: [{ promptIds, maxTokens: budget }],
    topLogprobs,
    ...held,
    endRepeatedCalls: toolUse !== undefined,
  });
  const shape = ollamaFormat(model, {
    route: a.route,
    startedAt: a.startedAt,
    loadMs: a.loadMs,
    ...(reasoning ? { reasoning } : {}),
    tools: toolUse !== undefined,
    topLogprobs,
  });
  return answerGeneration(ctx, request, reply, plan, shape);
}

/** The model a request names, and the milliseconds it waited for it to load. */
export async function timedLookup(ctx: ApiContext, request: FastifyRequest, id: string): Promise<{ model: ServedModel; loadMs: number }> {
  const t = performance.now();
  const model = await lookupServedModel(ctx, request, id);
  return { model, loadMs: performance.now() - t };
}

/** Ollama's answer to a request with nothing to generate from: the model is loaded (which finding it did). */
function loaded(model: ServedModel, route: "chat" | "generate"): unknown {
  return nothingWritten(model.slug, route, "load");
}

/**
 * Ollama's answer to `keep_alive: 0` with nothing to generate from (`ollama stop`): a model loaded
 * on demand is unloaded once no request uses it, one not loaded stays so (nothing is loaded for
 * it); one the server was started with is a 400, since kiln keeps those while it serves.
 */
function unloaded(ctx: ApiContext, request: FastifyRequest, id: string, route: "chat" | "generate"): unknown {
  const slug = knownModelSlug(ctx, request, id);
  if (ctx.models.keepAlive(slug, 0) === "pinned") {
    throw apiError("unsupported_value", `kiln keeps '${slug}' loaded while it serves: the server was started with it (--model).`, "keep_alive");
  }
  return nothingWritten(slug, route, "unload");
}

function nothingWritten(slug: string, route: "chat" | "generate", reason: "load" | "unload"): unknown {
  const text = route === "chat" ? { message: { role: "assistant", content: "" } } : { response: "" };
  return { model: slug, created_at: new Date().toISOString(), ...text, done: true, done_reason: reason };
}

/** A request's `keep_alive` for its model; named back as ignored (the returned list) for a model the server keeps anyway. */
export function applyKeepAlive(ctx: ApiContext, model: ServedModel, ms: number | undefined): string[] {
  if (ms === undefined) return [];
  return ctx.models.keepAlive(model.slug, ms) === "pinned" ? ["keep_alive"] : [];
}

/** Ollama's `think` as a reasoning effort: off is "none" (only a reasoning model can switch off), any level on. */
function thinkEffort(model: ServedModel, think: boolean | string | null | undefined): (typeof REASONING_EFFORTS)[number] | undefined {
  if (think === null || think === undefined) return undefined;
  if (think === false) return model.reasoning ? "none" : undefined;
  return think === "low" || think === "medium" ? think : "high";
}

/** Names `ignored` fields back in `x-kiln-ignored-fields`. */
export function nameIgnored(reply: FastifyReply, ignored: string[]): void {
  const header = ignoredFieldsHeader(ignored);
  if (header !== undefined) reply.header("x-kiln-ignored-fields", header);
}

/**
 * Ollama's messages as the chat template sees them: an assistant's `tool_calls` (arguments an
 * object) become calls with ids of the model's form and their arguments as JSON text, and a `tool`
 * message the result of the call it names (by `tool_call_id`, else the latest call of `tool_name`,
 * else the latest call). Images were refused by the schema.
 */
function templateMessages(messages: readonly OllamaMessage[], newId: () => string): ChatMessage[] {
  const calls: Array<{ id: string; name: string }> = [];
  return messages.map((m): ChatMessage => {
    if (m.role === "assistant" && m.tool_calls?.length) {
      const toolCalls = m.tool_calls.map((c) => {
        const id = c.id ?? newId();
        calls.push({ id, name: c.function.name });
        return { id, type: "function", function: { name: c.function.name, arguments: JSON.stringify(c.function.arguments ?? {}) } };
      });
      return { role: "assistant", content: m.content ?? "", tool_calls: toolCalls };
    }
    if (m.role === "tool") {
      const named = m.tool_name ? [...calls].reverse().find((c) => c.name === m.tool_name) : undefined;
      const id = m.tool_call_id ?? named?.id ?? calls.at(-1)?.id ?? newId();
      return { role: "tool", content: m.content ?? "", tool_call_id: id, ...(m.tool_name ? { name: m.tool_name } : {}) };
    }
    return { role: m.role, content: m.content ?? "" };
  });
}
