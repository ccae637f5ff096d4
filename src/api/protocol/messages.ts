/**
 * POST /v1/messages (Anthropic's Messages API, which vLLM's and llama.cpp's servers also answer):
 * the request as Anthropic's clients send it, and errors in its shape. Content is text: images,
 * documents and Anthropic's server tools are 400s naming where they are.
 */
import { z } from "zod";
import type { ApiError } from "../errors.js";
import { MAX_TOOLS } from "./tools.js";

/** Most stop sequences per request. */
export const MAX_STOP_SEQUENCES = 16;

/** A block kiln cannot read (images, documents, search results...): refused by the schema, naming its type. */
const unreadable = (type: string) => `content blocks of type '${type}' are not supported: kiln's models read text`;

const textBlock = z.looseObject({ type: z.literal("text"), text: z.string() });
const toolUseBlock = z.looseObject({ type: z.literal("tool_use"), id: z.string().min(1), name: z.string().min(1), input: z.record(z.string(), z.unknown()) });
const toolResultBlock = z.looseObject({
  type: z.literal("tool_result"),
  tool_use_id: z.string().min(1),
  content: z.union([z.string(), z.array(textBlock)]).nullish(),
  is_error: z.boolean().nullish(),
});
const thinkingBlock = z.looseObject({ type: z.literal("thinking"), thinking: z.string() });
const redactedThinkingBlock = z.looseObject({ type: z.literal("redacted_thinking") });

const contentBlock = z
  .looseObject({ type: z.string() })
  .superRefine((block, ctx) => {
    const known = ["text", "tool_use", "tool_result", "thinking", "redacted_thinking"];
    if (!known.includes(block.type)) ctx.addIssue({ code: "custom", path: ["type"], message: unreadable(block.type), params: { code: "unsupported_value" } });
  })
  .pipe(z.union([textBlock, toolUseBlock, toolResultBlock, thinkingBlock, redactedThinkingBlock]));

export type ContentBlock = z.output<typeof contentBlock>;

const message = z.object({
  role: z.enum(["user", "assistant"]),
  content: z.union([z.string(), z.array(contentBlock)]),
});

export type MessageParam = z.output<typeof message>;

/** A tool the client defines (Anthropic's server tools, such as web search, are refused). */
const tool = z
  .looseObject({
    type: z.string().nullish(),
    name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, "must be 1-64 letters, digits, underscores or dashes"),
    description: z.string().nullish(),
    input_schema: z.record(z.string(), z.unknown()).nullish(),
  })
  .superRefine((t, ctx) => {
    if (t.type != null && t.type !== "custom") {
      ctx.addIssue({
        code: "custom",
        path: ["type"],
        message: `Anthropic's server tool '${t.type}' is not available on kiln: define the tool yourself`,
        params: { code: "unsupported_value" },
      });
    } else if (t.input_schema == null) {
      ctx.addIssue({ code: "custom", path: ["input_schema"], message: "A tool needs an 'input_schema'.", params: { code: "missing_required_parameter" } });
    }
  });

const toolChoice = z.discriminatedUnion("type", [
  z.looseObject({ type: z.literal("auto"), disable_parallel_tool_use: z.boolean().nullish() }),
  z.looseObject({ type: z.literal("any"), disable_parallel_tool_use: z.boolean().nullish() }),
  z.looseObject({ type: z.literal("tool"), name: z.string().min(1), disable_parallel_tool_use: z.boolean().nullish() }),
  z.looseObject({ type: z.literal("none") }),
]);

/** `thinking`: on (with a budget of tokens, past which the thinking is closed for the model), adaptive (no budget) or off. */
const thinking = z.discriminatedUnion("type", [
  z.looseObject({ type: z.literal("enabled"), budget_tokens: z.number().int().min(1) }),
  z.looseObject({ type: z.literal("disabled") }),
  z.looseObject({ type: z.literal("adaptive") }),
]);

const system = z.union([z.string(), z.array(textBlock)]);

/** The fields `/v1/messages` and `/v1/messages/count_tokens` share: what the prompt is made of. */
const promptFields = {
  model: z.string().min(1),
  messages: z.array(message).min(1),
  system: system.nullish(),
  tools: z.array(tool).max(MAX_TOOLS).nullish(),
  tool_choice: toolChoice.nullish(),
  thinking: thinking.nullish(),
};

export const messagesRequestSchema = z.looseObject({
  ...promptFields,
  max_tokens: z.number().int().min(1),
  stop_sequences: z.array(z.string()).max(MAX_STOP_SEQUENCES).nullish(),
  temperature: z.number().min(0).max(1).nullish(),
  top_p: z.number().min(0).max(1).nullish(),
  top_k: z.number().int().min(0).nullish(),
  stream: z.boolean().nullish(),
  /** `format`: the answer is JSON valid against this schema; `effort`: how much a reasoning model thinks (kiln's think or do not: any effort is on). */
  output_config: z
    .looseObject({
      effort: z.enum(["low", "medium", "high", "xhigh", "max"]).nullish(),
      format: z.looseObject({ type: z.literal("json_schema"), schema: z.record(z.string(), z.unknown()) }).nullish(),
    })
    .nullish(),
  /** The structured-outputs beta's spelling of `output_config.format` (`anthropic-beta: structured-outputs-2025-11-13`). */
  output_format: z.looseObject({ type: z.literal("json_schema"), schema: z.record(z.string(), z.unknown()) }).nullish(),
  metadata: z.looseObject({ user_id: z.string().nullish() }).nullish(),
  service_tier: z.enum(["auto", "standard_only"]).nullish(),
});

export type MessagesRequest = z.output<typeof messagesRequestSchema>;

export const countTokensRequestSchema = z.looseObject(promptFields);

export type CountTokensRequest = z.output<typeof countTokensRequestSchema>;

/** Anthropic's error types by HTTP status. */
const ERROR_TYPES: Record<number, string> = {
  400: "invalid_request_error",
  401: "authentication_error",
  403: "permission_error",
  404: "not_found_error",
  413: "request_too_large",
  429: "rate_limit_error",
  529: "overloaded_error",
};

/**
 * The status Anthropic's API answers `error` with: 529 where kiln's others answer 503 (a full queue,
 * a model loading, a server stopping), the status Anthropic's clients know as overloaded and retry.
 */
export function messagesErrorStatus(error: ApiError): number {
  return error.status === 503 ? 529 : error.status;
}

/** An error as Anthropic's clients read it: `{type: "error", error: {type, message}}`. */
export function messagesErrorBody(error: ApiError): { type: "error"; error: { type: string; message: string } } {
  const type = ERROR_TYPES[messagesErrorStatus(error)] ?? (error.status >= 500 ? "api_error" : "invalid_request_error");
  return { type: "error", error: { type, message: error.message } };
}

/** Why an answer ended, as Anthropic names it. */
export type StopReason = "end_turn" | "max_tokens" | "stop_sequence" | "tool_use";

export type ResponseBlock =
  | { type: "text"; text: string }
  | { type: "thinking"; thinking: string; signature: string }
  | { type: "tool_use"; id: string; name: string; input: Record<string, unknown> };

export interface MessagesUsage {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
}

export interface MessageResponse {
  id: string;
  type: "message";
  role: "assistant";
  model: string;
  content: ResponseBlock[];
  stop_reason: StopReason;
  stop_sequence: string | null;
  usage: MessagesUsage;
}
