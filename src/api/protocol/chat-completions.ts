/**
 * POST /v1/chat/completions: the request as the wire sends it (zod), what kiln does not honour
 * yet, and the answer and chunk shapes.
 */
import { z } from "zod";
import type { ChatEnding } from "../../scheduler/index.js";
import { apiError } from "../errors.js";
import {
  checkPromptLogprobs,
  checkStreamOptions,
  isOneOf,
  GENERATION_EXTENSIONS,
  refusedExtensions,
  REASONING_EFFORTS,
  knownFields,
  rejectUnsupported,
  unknownFields,
  samplingFields,
  type UnsupportedField,
} from "./common.js";
import { parseOrThrow } from "./issues.js";
import { checkRequestConstraint, constraintFields } from "./output-constraint.js";
import { checkLegacyFunctions, legacyFunctionFields, toolFields } from "./tools.js";

const contentPart = z.looseObject({ type: z.string(), text: z.string().nullish() }).superRefine((part, ctx) => {
  if (part.type !== "text") {
    ctx.addIssue({
      code: "custom",
      path: ["type"],
      message: `Content parts of type '${part.type}' are not supported: kiln serves text models, send parts of type 'text'.`,
      params: { code: "unsupported_value" },
    });
  } else if (typeof part.text !== "string") {
    ctx.addIssue({ code: "custom", path: ["text"], message: "A text content part needs a 'text' string.", params: { code: "missing_required_parameter" } });
  }
});

const content = z.union([z.string(), z.array(contentPart)]);

/** Why `arguments` is not a string holding a JSON object ("" counts as no arguments); undefined when it is. */
function argumentsProblem(text: string): string | undefined {
  if (text.trim() === "") return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    return `is not valid JSON (${(error as Error).message})`;
  }
  return value !== null && typeof value === "object" && !Array.isArray(value) ? undefined : "holds JSON that is not an object";
}

/** A call the assistant made earlier in the conversation, replayed by the client (arguments: the JSON string the API gave). */
const toolCall = z.looseObject({
  id: z.string(),
  type: z.literal("function"),
  function: z.looseObject({ name: z.string().min(1), arguments: z.string() }).superRefine((fn, ctx) => {
    const problem = argumentsProblem(fn.arguments);
    if (problem !== undefined) {
      ctx.addIssue({
        code: "custom",
        path: ["arguments"],
        message: `A tool call's 'function.arguments' must be a string holding a JSON object; this one ${problem}.`,
        params: { code: "invalid_value" },
      });
    }
  }),
});

/** The deprecated `function_call` of an assistant message: the one call it made, in the legacy shape. */
const legacyFunctionCall = z.looseObject({ name: z.string().min(1), arguments: z.string() });

/** `function` is the deprecated role of a function's result (legacy function calling), named by `name`. */
export const ROLES = ["system", "developer", "user", "assistant", "tool", "function"] as const;

export const chatMessage = z
  .object({
    role: z.enum(ROLES),
    content: content.nullish(),
    name: z.string().nullish(),
    tool_calls: z.array(toolCall).nullish(),
    tool_call_id: z.string().nullish(),
    function_call: legacyFunctionCall.nullish(),
    refusal: z.string().nullish(),
  })
  .superRefine((m, ctx) => {
    const missing = (path: string, message: string) => ctx.addIssue({ code: "custom", path: [path], message, params: { code: "missing_required_parameter" } });
    if (m.role === "assistant") {
      if ((m.content === null || m.content === undefined) && !m.tool_calls?.length && !m.function_call) {
        missing("content", "An assistant message needs 'content' or 'tool_calls'.");
      }
    } else if (m.content === null || m.content === undefined) {
      missing("content", `A ${m.role} message needs 'content'.`);
    }
    if (m.role === "tool" && !m.tool_call_id) missing("tool_call_id", "A tool message needs 'tool_call_id'.");
    const misplaced = (path: string, message: string) => ctx.addIssue({ code: "custom", path: [path], message, params: { code: "invalid_value" } });
    if (m.role !== "assistant" && m.tool_calls?.length) misplaced("tool_calls", `Only assistant messages carry 'tool_calls', not a ${m.role} message.`);
    if (m.role !== "tool" && m.tool_call_id != null) misplaced("tool_call_id", `Only tool messages carry 'tool_call_id', not a ${m.role} message.`);
    if (m.role === "function" && !m.name) missing("name", "A function message needs the 'name' of the function whose result it holds.");
    if (m.role !== "assistant" && m.function_call) misplaced("function_call", `Only assistant messages carry 'function_call', not a ${m.role} message.`);
    if (m.function_call && m.tool_calls?.length)
      misplaced("function_call", "An assistant message carries 'tool_calls' or the older 'function_call', not both.");
    const problem = m.function_call ? argumentsProblem(m.function_call.arguments) : undefined;
    if (problem !== undefined)
      ctx.addIssue({
        code: "custom",
        path: ["function_call", "arguments"],
        message: `'function_call.arguments' must be a string holding a JSON object; this one ${problem}.`,
        params: { code: "invalid_value" },
      });
  });

/**
 * `response_format`: plain text, any JSON object, or JSON valid against a schema (the reference
 * API's shapes). Strict: a field they do not define (`{"type":"json_object","schema":…}`) would
 * be silently dropped, so it is a 400 naming it, as the reference API answers.
 */
const responseFormat = z.discriminatedUnion("type", [
  z.strictObject({ type: z.literal("text") }),
  z.strictObject({ type: z.literal("json_object") }),
  z.strictObject({
    type: z.literal("json_schema"),
    json_schema: z.strictObject({
      name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, "must be 1-64 letters, digits, underscores or dashes"),
      description: z.string().nullish(),
      schema: z.record(z.string(), z.unknown()).nullish(),
      strict: z.boolean().nullish(),
    }),
  }),
]);

export type ResponseFormat = z.output<typeof responseFormat>;

export const chatCompletionRequestSchema = z.object({
  model: z.string().min(1),
  messages: z.array(chatMessage).min(1),
  max_tokens: z.number().int().min(1).nullish(),
  max_completion_tokens: z.number().int().min(1).nullish(),
  logprobs: z.boolean().nullish(),
  top_logprobs: z.number().int().min(0).max(20).nullish(),
  ...toolFields,
  ...legacyFunctionFields,
  response_format: responseFormat.nullish(),
  metadata: z.record(z.string(), z.string()).nullish(),
  // Caching and abuse-tracking hints of the reference API: nothing for kiln to do with them, and nothing lost.
  prompt_cache_key: z.string().nullish(),
  safety_identifier: z.string().nullish(),
  /**
   * How much a reasoning model thinks before it answers. kiln's reasoning models think or do not:
   * "none" and "minimal" switch thinking off where the model's template can (Qwen3's
   * `enable_thinking`), the others leave it on. A 400 on a model that does not reason.
   */
  reasoning_effort: z.enum(REASONING_EFFORTS).nullish(),
  /**
   * vLLM's extension: most tokens a reasoning model thinks; past them its thinking is closed for it
   * and the answer follows. 0 closes it at once. A 400 on a model that does not reason. Default none.
   */
  thinking_token_budget: z.number().int().min(0).nullish(),
  /** vLLM's and llama.cpp's extension: more variables for the model's chat template, such as `{"enable_thinking": false}`. */
  chat_template_kwargs: z.record(z.string(), z.unknown()).nullish(),
  /** vLLM's extension: end the prompt with the assistant turn's opening (default true), or right after the last message. */
  add_generation_prompt: z.boolean().nullish(),
  /**
   * vLLM's extension (llama.cpp's assistant prefill): the last message, an assistant's, is left
   * open and the answer continues its text. Default false.
   */
  continue_final_message: z.boolean().nullish(),
  /**
   * Predicted outputs: text the answer is expected to repeat, such as the file being edited. A
   * choice decoding alone checks it as drafts, several tokens per model call; no token's
   * probability changes. `usage` counts its tokens confirmed and the rest.
   */
  prediction: z.strictObject({ type: z.literal("content"), content }).nullish(),
  ...samplingFields,
  ...constraintFields,
});

export type ChatCompletionRequest = z.output<typeof chatCompletionRequestSchema>;
export type ChatMessageIn = ChatCompletionRequest["messages"][number];

const UNSUPPORTED: readonly UnsupportedField[] = [
  { field: "audio", why: "is not supported: kiln's chat models produce text only." },
  { field: "modalities", accepts: (v) => Array.isArray(v) && v.every((m) => m === "text"), why: 'can only be ["text"].' },
  { field: "store", accepts: isOneOf(false), why: "is not supported: kiln does not store completions." },
  { field: "web_search_options", why: "is not supported: kiln does not search the web." },
  { field: "service_tier", accepts: isOneOf("auto", "default"), why: "can only be 'auto' or 'default'." },
  { field: "verbosity", accepts: isOneOf("medium"), why: "is not supported." },
];

/** Other servers' extensions chat completions honour, among those it refuses. */
const HONOURED = [...GENERATION_EXTENSIONS, "chat_template_kwargs", "add_generation_prompt", "continue_final_message"];
const REFUSED = [...UNSUPPORTED, ...refusedExtensions(HONOURED)];
const KNOWN = knownFields(chatCompletionRequestSchema, REFUSED);

/** Top-level fields of the body kiln neither knows nor refuses: accepted and ignored (see `unknownFields`). */
export function ignoredChatFields(body: unknown): string[] {
  return unknownFields(body, KNOWN);
}

/** Validates a chat completion body; throws a 400 ApiError naming the field at fault. */
export function parseChatCompletionRequest(body: unknown): ChatCompletionRequest {
  const request = parseOrThrow(chatCompletionRequestSchema, body);
  rejectUnsupported(body as Record<string, unknown>, REFUSED);
  checkStreamOptions(request);
  checkPromptLogprobs(request);
  checkRequestConstraint(request);
  if (request.top_logprobs && request.logprobs !== true) {
    throw apiError("invalid_value", "'top_logprobs' requires 'logprobs' to be true.", "top_logprobs");
  }
  chatEnding(request);
  checkLegacyFunctions(request);
  return request;
}

/**
 * Where a chat's prompt ends, from `add_generation_prompt` and `continue_final_message`; a 400 for a
 * continuation of anything but an assistant's text, or one asked beside a new turn's opening.
 */
export function chatEnding(request: Pick<ChatCompletionRequest, "messages" | "add_generation_prompt" | "continue_final_message">): ChatEnding {
  if (request.continue_final_message) {
    const last = request.messages[request.messages.length - 1];
    if (last.role !== "assistant" || last.tool_calls?.length) {
      throw apiError(
        "invalid_value",
        "'continue_final_message' continues the last message, which must be an assistant's text (no tool calls).",
        "continue_final_message",
      );
    }
    if (request.add_generation_prompt === true) {
      throw apiError(
        "invalid_value",
        "'continue_final_message' continues the last message, so no new turn can be opened after it: leave out 'add_generation_prompt' or set it to false.",
        "add_generation_prompt",
      );
    }
    return "inside-last-message";
  }
  return request.add_generation_prompt === false ? "after-messages" : "assistant-turn";
}

// ── Answers ────────────────────────────────────────────────────────────────────────────────────

export interface WireTokenLogprob {
  token: string;
  logprob: number;
  bytes: number[];
}

export interface ChatLogprobs {
  content: Array<WireTokenLogprob & { top_logprobs: WireTokenLogprob[] }>;
  refusal: null;
}

/** A call the model made: `arguments` is the JSON text as the model wrote it. */
export interface WireToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

/** A streamed fragment of a call: the first carries id, type and name; later ones only argument text. */
export interface WireToolCallDelta {
  index: number;
  id?: string;
  type?: "function";
  function: { name?: string; arguments: string };
}

/** A call in the deprecated legacy shape (`functions` offered): the message's one `function_call`. */
export interface WireFunctionCall {
  name: string;
  arguments: string;
}

/** `finish_reason` "function_call": the answer is a legacy function call. */
export type ChatFinishReason = "stop" | "length" | "tool_calls" | "function_call";

export interface ChatCompletionChoice {
  index: number;
  /** `content` is null when the answer is only tool calls; `tool_calls` is absent when there are none. */
  /** `reasoning_content`, on a reasoning model only: its thinking, apart from the answer (null when it did not think). */
  message: {
    role: "assistant";
    content: string | null;
    reasoning_content?: string | null;
    refusal: null;
    tool_calls?: WireToolCall[];
    function_call?: WireFunctionCall;
  };
  logprobs: ChatLogprobs | null;
  finish_reason: ChatFinishReason;
  /** vLLM's: the request's stop string or stop token id that ended the choice; absent when none did. */
  stop_reason?: string | number;
}

/** The reference API's `usage` (its `CompletionUsage`), on chat and legacy completions alike. */
export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  /** `cached_tokens`: prompt tokens served from the prefix cache, not computed for this request; kiln takes no audio. */
  prompt_tokens_details: { cached_tokens: number; audio_tokens: number };
  /**
   * `reasoning_tokens`: those of a reasoning model's thinking, its tags included; kiln's models do not
   * speak (`audio_tokens` 0). `accepted_prediction_tokens`: tokens of the request's `prediction` its
   * answer confirmed; `rejected_prediction_tokens`: the rest of the prediction (not counted in
   * `completion_tokens`, unlike the reference API's, since checking them cost little).
   */
  completion_tokens_details: { reasoning_tokens: number; audio_tokens: number; accepted_prediction_tokens: number; rejected_prediction_tokens: number };
}

/**
 * The usage of `promptTokens` prompt tokens (`cachedTokens` of them from the prefix cache) and
 * `completionTokens` generated, `prediction` the predicted output's tokens confirmed and not.
 */
export function usageOf(promptTokens: number, completionTokens: number, cachedTokens: number, prediction = { accepted: 0, rejected: 0 }): Usage {
  return {
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    total_tokens: promptTokens + completionTokens,
    prompt_tokens_details: { cached_tokens: cachedTokens, audio_tokens: 0 },
    completion_tokens_details: {
      reasoning_tokens: 0,
      audio_tokens: 0,
      accepted_prediction_tokens: prediction.accepted,
      rejected_prediction_tokens: prediction.rejected,
    },
  };
}

/** The text of a `prediction`'s content: the string, or its text parts joined. */
export function predictionText(prediction: NonNullable<ChatCompletionRequest["prediction"]>): string {
  const { content } = prediction;
  return typeof content === "string" ? content : content.map((part) => part.text ?? "").join("");
}

export interface ChatCompletion {
  id: string;
  object: "chat.completion";
  created: number;
  model: string;
  system_fingerprint: string;
  choices: ChatCompletionChoice[];
  usage: Usage;
}

export interface ChatCompletionChunk {
  id: string;
  object: "chat.completion.chunk";
  created: number;
  model: string;
  system_fingerprint: string;
  choices: Array<{
    index: number;
    delta: {
      role?: "assistant";
      content?: string;
      reasoning_content?: string;
      tool_calls?: WireToolCallDelta[];
      /** A legacy call streamed: the first fragment carries the name, later ones only argument text. */
      function_call?: { name?: string; arguments: string };
    };
    logprobs: ChatLogprobs | null;
    finish_reason: ChatFinishReason | null;
    stop_reason?: string | number;
  }>;
  usage?: Usage | null;
}
