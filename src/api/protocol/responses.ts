/**
 * POST /v1/responses (the reference API's Responses API): the request as the wire sends it (zod),
 * what kiln does not honour, and the shapes of the response object, its items and its stream events.
 * The request's input items are messages (`input_text` parts), `function_call` and
 * `function_call_output` items, and `item_reference`s to stored items; its tools are functions
 * (hosted tools such as web search are a 400 naming them).
 */
import { z } from "zod";
import { apiError } from "../errors.js";
import {
  checkStreamOptions,
  FOREIGN_EXTENSIONS,
  isOneOf,
  REASONING_EFFORTS,
  knownFields,
  rejectUnsupported,
  unknownFields,
  type UnsupportedField,
} from "./common.js";
import { parseOrThrow } from "./issues.js";

const functionName = z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, "must be 1-64 letters, digits, underscores or dashes");

/** A message's content part: text only (`input_text`; `output_text` and `refusal` in replayed assistant messages). */
const contentPart = z.discriminatedUnion("type", [
  z.looseObject({ type: z.literal("input_text"), text: z.string() }),
  z.looseObject({ type: z.literal("output_text"), text: z.string() }),
  z.looseObject({ type: z.literal("refusal"), refusal: z.string() }),
]);
/** The content part types kiln reads; any other (images, files, audio) is refused by name before parsing. */
const TEXT_PARTS = new Set(["input_text", "output_text", "refusal"]);

const messageItem = z.looseObject({
  type: z.literal("message"),
  id: z.string().nullish(),
  role: z.enum(["user", "assistant", "system", "developer"]),
  content: z.union([z.string(), z.array(contentPart)]),
  status: z.string().nullish(),
});

const functionCallItem = z.looseObject({
  type: z.literal("function_call"),
  id: z.string().nullish(),
  call_id: z.string().min(1),
  name: z.string().min(1),
  arguments: z.string(),
  status: z.string().nullish(),
});

const functionCallOutputItem = z.looseObject({
  type: z.literal("function_call_output"),
  id: z.string().nullish(),
  call_id: z.string().min(1),
  output: z.union([z.string(), z.array(contentPart)]),
  status: z.string().nullish(),
});

const itemReference = z.looseObject({ type: z.literal("item_reference"), id: z.string().min(1) });

/** A reasoning item of an earlier output, replayed: kept in the conversation, not shown to the model again (templates drop earlier turns' reasoning). */
const reasoningItem = z.looseObject({
  type: z.literal("reasoning"),
  id: z.string().nullish(),
  summary: z.array(z.unknown()).nullish(),
  content: z.array(z.unknown()).nullish(),
  status: z.string().nullish(),
});

/** An input item; a message may leave out `type` (the reference API's "easy" message). */
const inputItem = z.preprocess(
  (v) => (v !== null && typeof v === "object" && !Array.isArray(v) && (v as { type?: unknown }).type == null ? { ...v, type: "message" } : v),
  z.discriminatedUnion("type", [messageItem, functionCallItem, functionCallOutputItem, itemReference, reasoningItem]),
);
const INPUT_ITEM_TYPES = new Set(["message", "function_call", "function_call_output", "item_reference", "reasoning"]);

const functionTool = z.object({
  type: z.literal("function"),
  name: functionName,
  description: z.string().nullish(),
  parameters: z.record(z.string(), z.unknown()).nullish(),
  strict: z.boolean().nullish(),
});

const toolChoice = z.union([
  z.enum(["none", "auto", "required"]),
  z.object({ type: z.literal("function"), name: z.string().min(1) }),
  z.object({
    type: z.literal("allowed_tools"),
    mode: z.enum(["auto", "required"]),
    tools: z.array(z.object({ type: z.literal("function"), name: z.string().min(1) })).min(1),
  }),
]);

/** `text.format`: plain text, any JSON object, or JSON valid against a schema. */
const textFormat = z.discriminatedUnion("type", [
  z.object({ type: z.literal("text") }),
  z.object({ type: z.literal("json_object") }),
  z.object({
    type: z.literal("json_schema"),
    name: functionName,
    schema: z.record(z.string(), z.unknown()),
    description: z.string().nullish(),
    strict: z.boolean().nullish(),
  }),
]);

/** What `include` may ask for: the reference API's values. Only `message.output_text.logprobs` adds anything here; the others name outputs kiln never makes. */
const INCLUDABLE = [
  "message.output_text.logprobs",
  "reasoning.encrypted_content",
  "file_search_call.results",
  "web_search_call.results",
  "web_search_call.action.sources",
  "message.input_image.image_url",
  "computer_call_output.output.image_url",
  "code_interpreter_call.outputs",
] as const;

/** Most tools per request, as on chat. */
const MAX_TOOLS = 128;

const range = (min: number, max: number) => z.number().min(min).max(max).nullish();

export const responsesRequestSchema = z.object({
  model: z.string().min(1),
  input: z.union([z.string(), z.array(inputItem)]).nullish(),
  instructions: z.string().nullish(),
  previous_response_id: z.string().min(1).nullish(),
  max_output_tokens: z.number().int().min(1).nullish(),
  temperature: range(0, 2),
  top_p: range(0, 1),
  tools: z.array(functionTool).max(MAX_TOOLS).nullish(),
  tool_choice: toolChoice.nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  // Counts calls of hosted tools, which kiln has none of: nothing to limit.
  max_tool_calls: z.number().int().min(1).nullish(),
  text: z.object({ format: textFormat.nullish(), verbosity: z.enum(["low", "medium", "high"]).nullish() }).nullish(),
  include: z.array(z.enum(INCLUDABLE)).nullish(),
  top_logprobs: z.number().int().min(0).max(20).nullish(),
  metadata: z.record(z.string(), z.string().max(512)).nullish(),
  store: z.boolean().nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.object({ include_obfuscation: z.boolean().nullish() }).nullish(),
  truncation: z.enum(["auto", "disabled"]).nullish(),
  /** On a reasoning model, `effort` none or minimal switches its thinking off where it can (as chat's `reasoning_effort`); kiln writes no summaries. */
  reasoning: z.object({ effort: z.enum(REASONING_EFFORTS).nullish(), summary: z.string().nullish(), generate_summary: z.string().nullish() }).nullish(),
  background: z.boolean().nullish(),
  service_tier: z.string().nullish(),
  user: z.string().nullish(),
  // Caching and abuse-tracking hints of the reference API: nothing for kiln to do with them, and nothing lost.
  prompt_cache_key: z.string().nullish(),
  prompt_cache_retention: z.string().nullish(),
  prompt_cache_options: z.record(z.string(), z.unknown()).nullish(),
  safety_identifier: z.string().nullish(),
  // kiln's sampling extensions, as on chat and completions (named as in vLLM).
  top_k: z.number().int().min(-1).nullish(),
  min_p: range(0, 1),
  repetition_penalty: z.number().gt(0).max(2).nullish(),
  seed: z.number().int().nullish(),
});

export type ResponsesRequest = z.output<typeof responsesRequestSchema>;
export type ResponsesInputItem = Exclude<ResponsesRequest["input"], string | null | undefined>[number];
export type ResponsesContentPart = z.output<typeof contentPart>;
export type ResponsesTool = z.output<typeof functionTool>;
export type ResponsesToolChoice = z.output<typeof toolChoice>;
export type ResponsesTextFormat = z.output<typeof textFormat>;

const chatField = (field: string, instead: string, accepts?: (v: unknown) => boolean): UnsupportedField => ({
  field,
  ...(accepts ? { accepts } : {}),
  why: `is a chat completions field; the Responses API's is ${instead}.`,
});

const UNSUPPORTED: readonly UnsupportedField[] = [
  { field: "background", accepts: isOneOf(false), why: "is not supported: kiln answers while the client waits (or streams)." },
  { field: "conversation", why: "is not supported: continue a conversation with 'previous_response_id'." },
  { field: "prompt", why: "(stored prompt templates) is not supported: send 'instructions' and 'input'." },
  { field: "context_management", why: "is not supported." },
  { field: "moderation", why: "is not supported: kiln does not moderate." },
  { field: "service_tier", accepts: isOneOf("auto", "default"), why: "can only be 'auto' or 'default'." },
  // Fields of chat completions sent here by mistake change the answer, so each is refused with the field that does it here.
  chatField("messages", "'input'"),
  chatField("max_tokens", "'max_output_tokens'"),
  chatField("max_completion_tokens", "'max_output_tokens'"),
  chatField("response_format", "'text.format'"),
  chatField("n", "one output per response", isOneOf(1)),
  chatField("stop", "none (kiln stops at the end of the turn or at 'max_output_tokens')", (v) => Array.isArray(v) && v.length === 0),
  chatField("logprobs", "'include: [\"message.output_text.logprobs\"]' with 'top_logprobs'", isOneOf(false)),
  chatField("presence_penalty", "none", isOneOf(0)),
  chatField("frequency_penalty", "none", isOneOf(0)),
  chatField("logit_bias", "none", (v) => v !== null && typeof v === "object" && Object.keys(v).length === 0),
  chatField("functions", "'tools'", (v) => Array.isArray(v) && v.length === 0),
  chatField("function_call", "'tool_choice'"),
  { field: "guided_json", why: "is not taken here: constrain the output with 'text.format'." },
  { field: "guided_regex", why: "is not taken here: constrain the output with 'text.format'." },
  { field: "guided_choice", why: "is not taken here: constrain the output with 'text.format'." },
];

const REFUSED = [...UNSUPPORTED, ...FOREIGN_EXTENSIONS];
const KNOWN = knownFields(responsesRequestSchema, REFUSED);

/** Top-level fields of the body kiln neither knows nor refuses: accepted and ignored (see `unknownFields`). */
export function ignoredResponsesFields(body: unknown): string[] {
  return unknownFields(body, KNOWN);
}

/** Validates a Responses API request body; throws a 400 ApiError naming the field at fault. */
export function parseResponsesRequest(body: unknown): ResponsesRequest {
  if (body !== null && typeof body === "object" && !Array.isArray(body)) refuseWhatKilnLacks(body as Record<string, unknown>);
  const request = parseOrThrow(responsesRequestSchema, body);
  rejectUnsupported(body as Record<string, unknown>, REFUSED);
  checkStreamOptions(request);
  if (request.text?.verbosity != null && request.text.verbosity !== "medium") {
    throw apiError("unsupported_value", `Unsupported value: 'text.verbosity' can only be 'medium' on kiln, not '${request.text.verbosity}'.`, "text.verbosity");
  }
  if (request.input == null && request.previous_response_id == null) {
    throw apiError("missing_required_parameter", "Missing required parameter: 'input' (or 'previous_response_id' to continue a stored response).", "input");
  }
  if (Array.isArray(request.input) && request.input.length === 0 && request.previous_response_id == null) {
    throw apiError("invalid_value", "Invalid 'input': expected at least one item.", "input");
  }
  return request;
}

/**
 * What the request asks of things kiln does not have, each a 400 naming where it is, before the
 * schema is checked (so that a hosted tool is not reported as a malformed function): hosted tools
 * and choices of them, input items other than messages and function calls, and content parts other
 * than text.
 */
function refuseWhatKilnLacks(body: Record<string, unknown>): void {
  const typeOf = (v: unknown): unknown => (v !== null && typeof v === "object" ? (v as { type?: unknown }).type : undefined);
  if (Array.isArray(body.tools)) {
    body.tools.forEach((tool, i) => {
      const type = typeOf(tool);
      if (typeof type === "string" && type !== "function") {
        throw apiError(
          "unsupported_value",
          `Unsupported value: kiln does not host the '${type}' tool; it offers the model function tools only (type 'function'), which your code runs.`,
          `tools[${i}].type`,
        );
      }
    });
  }
  const choice = typeOf(body.tool_choice);
  if (typeof choice === "string" && choice !== "function" && choice !== "allowed_tools") {
    throw apiError(
      "unsupported_value",
      `Unsupported value: 'tool_choice' of type '${choice}' names a hosted tool, and kiln offers function tools only.`,
      "tool_choice.type",
    );
  }
  if (!Array.isArray(body.input)) return;
  body.input.forEach((item, i) => {
    const type = typeOf(item);
    if (typeof type === "string" && !INPUT_ITEM_TYPES.has(type)) {
      throw apiError(
        "unsupported_value",
        `Unsupported value: input items of type '${type}' are not supported; kiln takes 'message', 'function_call', 'function_call_output', 'reasoning' and 'item_reference' items.`,
        `input[${i}].type`,
      );
    }
    if (type === "reasoning") return;
    const content = item !== null && typeof item === "object" ? (item as { content?: unknown; output?: unknown }) : {};
    for (const [field, parts] of [
      ["content", content.content],
      ["output", content.output],
    ] as const) {
      if (!Array.isArray(parts)) continue;
      parts.forEach((part, j) => {
        const partType = typeOf(part);
        if (typeof partType === "string" && !TEXT_PARTS.has(partType)) {
          throw apiError(
            "unsupported_value",
            `Unsupported value: content parts of type '${partType}' are not supported: kiln serves text models, send parts of type 'input_text'.`,
            `input[${i}].${field}[${j}].type`,
          );
        }
      });
    }
  });
}

// ── The response object, its items and its stream events ─────────────────────────────────────

/** A token's log probability, as output_text parts and text deltas carry them. */
export interface ResponsesLogprob {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: Array<{ token: string; logprob: number; bytes: number[] }>;
}

export interface OutputTextPart {
  type: "output_text";
  text: string;
  annotations: [];
  logprobs: ResponsesLogprob[];
}

export type ItemStatus = "in_progress" | "completed" | "incomplete";

export interface OutputMessage {
  id: string;
  type: "message";
  status: ItemStatus;
  role: "assistant";
  content: OutputTextPart[];
}

export interface FunctionCallItem {
  id: string;
  type: "function_call";
  status: ItemStatus;
  arguments: string;
  call_id: string;
  name: string;
}

/** A reasoning model's thinking: its text in one `reasoning_text` part; no summary (kiln writes none). */
export interface ReasoningItem {
  id: string;
  type: "reasoning";
  status: ItemStatus;
  summary: [];
  content: Array<{ type: "reasoning_text"; text: string }>;
}

export type OutputItem = OutputMessage | FunctionCallItem | ReasoningItem;

/** An input item as stored and listed: every item with its id (messages' content as parts). */
export type StoredInputItem =
  | { id: string; type: "message"; status: "completed"; role: "user" | "assistant" | "system" | "developer"; content: Array<Record<string, unknown>> }
  | FunctionCallItem
  | { id: string; type: "function_call_output"; status: "completed"; call_id: string; output: string | Array<Record<string, unknown>> };

export interface ResponsesUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

export type ResponseStatus = "in_progress" | "completed" | "incomplete" | "failed";

/** The request's fields a response echoes (the clients read them back), as the reference API fills them in. */
export interface EchoedFields {
  instructions: string | null;
  max_output_tokens: number | null;
  max_tool_calls: number | null;
  model: string;
  parallel_tool_calls: boolean;
  previous_response_id: string | null;
  prompt_cache_key: string | null;
  /** The request's `reasoning`, echoed. */
  reasoning: { effort: string | null; summary: string | null };
  safety_identifier: string | null;
  service_tier: "default";
  store: boolean;
  temperature: number;
  text: { format: ResponsesTextFormat; verbosity: "medium" };
  tool_choice: ResponsesToolChoice;
  tools: Array<Required<Omit<ResponsesTool, "parameters">> & { parameters: Record<string, unknown> | null }>;
  top_logprobs: number;
  top_p: number;
  truncation: "auto" | "disabled";
  user: string | null;
  metadata: Record<string, string>;
}

export interface ResponseObject extends Omit<EchoedFields, "metadata" | "user"> {
  id: string;
  object: "response";
  created_at: number;
  status: ResponseStatus;
  background: false;
  completed_at: number | null;
  error: { code: string; message: string } | null;
  incomplete_details: { reason: "max_output_tokens" } | null;
  output: OutputItem[];
  usage: ResponsesUsage | null;
  user: string | null;
  metadata: Record<string, string>;
  /** The text of every `output_text` part, joined: the official SDKs' convenience, sent for the clients that read it off the wire. */
  output_text: string;
}
