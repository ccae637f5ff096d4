/** POST /v1/completions (legacy): request schema, unsupported fields, answer shapes. */
import { z } from "zod";
import { apiError } from "../errors.js";
import {
  checkPromptLogprobs,
  checkStreamOptions,
  GENERATION_EXTENSIONS,
  refusedExtensions,
  isEmptyArray,
  knownFields,
  MAX_CHOICES,
  rejectUnsupported,
  unknownFields,
  samplingFields,
  type PromptLogprobs,
  type UnsupportedField,
} from "./common.js";
import { parseOrThrow } from "./issues.js";
import { checkRequestConstraint, constraintFields } from "./output-constraint.js";
import type { Usage } from "./chat-completions.js";

/** Default `max_tokens` of a legacy completion, as in the OpenAI API. */
export const DEFAULT_COMPLETION_MAX_TOKENS = 16;

/** Most prompts in one request (each runs as its own generation, all submitted together). */
export const MAX_PROMPTS = 64;

const tokenIds = z.array(z.number().int().min(0));

export const completionRequestSchema = z
  .object({
    model: z.string().min(1),
    // The reference API's four shapes: a string, strings, token ids, lists of token ids.
    prompt: z.union([z.string(), z.array(z.string()), tokenIds, z.array(tokenIds)]),
    max_tokens: z.number().int().min(0).nullish(),
    echo: z.boolean().nullish(),
    logprobs: z.number().int().min(0).max(5).nullish(),
    /** Text after the completion: the model fills in what goes between the prompt and it (a model with fill-in-the-middle tokens only). */
    suffix: z.string().nullish(),
    /** Choices generated per prompt, of which the `n` with the highest log probability per token are returned. Default `n`. */
    best_of: z.number().int().min(1).max(MAX_CHOICES).nullish(),
    ...samplingFields,
    ...constraintFields,
  })
  .superRefine((r, ctx) => {
    if (Array.isArray(r.prompt) && r.prompt.length === 0) {
      ctx.addIssue({ code: "custom", path: ["prompt"], message: "'prompt' must not be an empty array." });
    } else if (Array.isArray(r.prompt) && typeof r.prompt[0] !== "number" && r.prompt.length > MAX_PROMPTS) {
      ctx.addIssue({ code: "custom", path: ["prompt"], message: `'prompt' holds ${r.prompt.length} prompts: send at most ${MAX_PROMPTS} per request.` });
    }
  });

export type CompletionRequest = z.output<typeof completionRequestSchema>;

const UNSUPPORTED: readonly UnsupportedField[] = [
  {
    field: "response_format",
    accepts: (v) => (v as { type?: unknown })?.type === "text",
    why: "is a chat completions field: on completions, constrain the output with 'guided_json'.",
  },
  { field: "tools", accepts: isEmptyArray, why: "is a chat completions field: tool calling needs messages." },
  { field: "tool_choice", accepts: (v) => v === "none", why: "is a chat completions field: tool calling needs messages." },
];

const REFUSED = [...UNSUPPORTED, ...refusedExtensions(GENERATION_EXTENSIONS)];
const KNOWN = knownFields(completionRequestSchema, REFUSED);

/** Top-level fields of the body kiln neither knows nor refuses: accepted and ignored (see `unknownFields`). */
export function ignoredCompletionFields(body: unknown): string[] {
  return unknownFields(body, KNOWN);
}

/** Validates a legacy completion body; throws a 400 ApiError naming the field at fault. */
export function parseCompletionRequest(body: unknown): CompletionRequest {
  const request = parseOrThrow(completionRequestSchema, body);
  rejectUnsupported(body as Record<string, unknown>, REFUSED);
  checkStreamOptions(request);
  checkPromptLogprobs(request);
  checkRequestConstraint(request);
  const n = request.n ?? 1;
  if (request.best_of != null && request.best_of < n) throw apiError("invalid_value", `'best_of' (${request.best_of}) must be at least 'n' (${n}).`, "best_of");
  if (request.best_of != null && request.best_of > n && request.stream === true) {
    throw apiError(
      "unsupported_value",
      "'best_of' above 'n' cannot be combined with 'stream': the candidates are ranked once they are all complete.",
      "best_of",
    );
  }
  return request;
}

/**
 * The text the model fills in before, or null for a plain completion. `suffix` "" is a plain
 * completion on a model without fill-in-the-middle markers (clients send it for "nothing after"); any
 * other suffix needs the markers (a 400 naming `suffix` without them). An infill leaves no place for
 * an echo, and truncating its prompt would cut the markers around it.
 */
export function infillSuffix(request: CompletionRequest, slug: string, modelHasMarkers: boolean): string | null {
  if (request.suffix == null || (request.suffix === "" && !modelHasMarkers)) return null;
  if (!modelHasMarkers) {
    throw apiError(
      "unsupported_value",
      `The model '${slug}' cannot fill in the middle: its vocabulary has no fill-in-the-middle tokens. Send 'suffix' to a code model that has them (Qwen2.5, StarCoder2, CodeLlama, DeepSeek-Coder, Codestral), or leave it out.`,
      "suffix",
    );
  }
  if (request.echo) throw apiError("unsupported_value", "'echo' cannot be combined with 'suffix': the prompt is not text before the completion.", "echo");
  if (request.truncate_prompt_tokens != null) {
    throw apiError(
      "unsupported_value",
      "'truncate_prompt_tokens' cannot be combined with 'suffix': shorten the prompt or the suffix instead.",
      "truncate_prompt_tokens",
    );
  }
  return request.suffix;
}

/** The legacy logprobs object of one choice: with `echo`, the prompt's tokens come first, and the first of them has nulls. */
export interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: Array<number | null>;
  top_logprobs: Array<Record<string, number> | null>;
  text_offset: number[];
}

export interface CompletionChoice {
  index: number;
  text: string;
  logprobs: CompletionLogprobs | null;
  finish_reason: "stop" | "length" | null;
  /** vLLM's: the request's stop string or stop token id that ended the choice; absent when none did. */
  stop_reason?: string | number;
  /** vLLM's, when asked for. */
  prompt_logprobs?: PromptLogprobs;
}

export interface Completion {
  id: string;
  object: "text_completion";
  created: number;
  model: string;
  system_fingerprint: string;
  choices: CompletionChoice[];
  usage?: Usage | null;
}
