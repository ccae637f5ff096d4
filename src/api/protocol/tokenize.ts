/**
 * POST /tokenize and /detokenize (vLLM's extension, also at /v1): a prompt or a chat as the model's
 * token ids, and ids back to text. Request schemas and answer shapes.
 */
import { z } from "zod";
import { apiError } from "../errors.js";
import { chatMessage } from "./chat-completions.js";
import { knownFields, rejectUnsupported, unknownFields, type UnsupportedField } from "./common.js";
import { parseOrThrow } from "./issues.js";
import { toolFields } from "./tools.js";

export const tokenizeRequestSchema = z
  .object({
    /** Which model tokenizes; without it, the one text model served (llama.cpp's server sends none). */
    model: z.string().min(1).nullish(),
    /** A completion prompt. Exactly one of `prompt`, `content` and `messages`. */
    prompt: z.string().nullish(),
    /** llama.cpp's spelling of `prompt`, with its own defaults: `add_special` false. */
    content: z.string().nullish(),
    /** `content` only (llama.cpp's): put the BOS the model wants in front. Default false. */
    add_special: z.boolean().nullish(),
    /** `content` only (llama.cpp's): answer each token as `{id, piece}`, its text. Default false. */
    with_pieces: z.boolean().nullish(),
    /** `content` only (llama.cpp's): special-token text (`<|im_start|>`) becomes its control token, as llama.cpp's /tokenize reads it. Default true. */
    parse_special: z.boolean().nullish(),
    /** A chat, rendered through the model's template as a chat completion renders it. */
    messages: z.array(chatMessage).min(1).nullish(),
    /** `prompt` only: put the BOS the model wants in front (default true). A chat's special tokens are its template's. */
    add_special_tokens: z.boolean().nullish(),
    /** `messages` only: end with the assistant turn's opening (default true), as a chat completion's prompt does. */
    add_generation_prompt: z.boolean().nullish(),
    /** `messages` only: leave the last message, an assistant's, open, as a chat completion continuing it does. */
    continue_final_message: z.boolean().nullish(),
    chat_template_kwargs: z.record(z.string(), z.unknown()).nullish(),
    /** Also answer each token's vocabulary entry (`token_strs`). Default false. */
    return_token_strs: z.boolean().nullish(),
    ...toolFields,
  })
  .superRefine((r, ctx) => {
    const has = (v: unknown) => v !== null && v !== undefined;
    const given = (["prompt", "content", "messages"] as const).filter((k) => has(r[k]));
    if (given.length !== 1) {
      ctx.addIssue({
        code: "custom",
        path: [given[1] ?? "prompt"],
        message: "Send exactly one of 'prompt' (a completion prompt, or llama.cpp's 'content') and 'messages' (a chat).",
        params: { code: given.length > 1 ? "invalid_value" : "missing_required_parameter" },
      });
    }
    for (const k of ["add_special", "with_pieces", "parse_special"] as const) {
      if (has(r[k]) && !has(r.content)) {
        ctx.addIssue({ code: "custom", path: [k], message: `'${k}' is llama.cpp's and goes with its 'content'.`, params: { code: "invalid_value" } });
      }
    }
  });

export type TokenizeRequest = z.output<typeof tokenizeRequestSchema>;

const chatOnly = (field: string): UnsupportedField => ({ field, why: "applies to a chat: send 'messages', not 'prompt'." });

const TOKENIZE_REFUSED: readonly UnsupportedField[] = [
  { field: "chat_template", why: "is not supported: the model's own chat template renders the chat (`kiln serve --chat-template-file` sets another)." },
];
const TOKENIZE_KNOWN = knownFields(tokenizeRequestSchema, TOKENIZE_REFUSED);

/** Top-level fields of a tokenize body kiln neither knows nor refuses: accepted and ignored. */
export function ignoredTokenizeFields(body: unknown): string[] {
  return unknownFields(body, TOKENIZE_KNOWN);
}

/** Validates a tokenize body; throws a 400 ApiError naming the field at fault. */
export function parseTokenizeRequest(body: unknown): TokenizeRequest {
  const request = parseOrThrow(tokenizeRequestSchema, body);
  rejectUnsupported(body as Record<string, unknown>, TOKENIZE_REFUSED);
  if (request.prompt != null || request.content != null) {
    const chatField = (["add_generation_prompt", "continue_final_message", "chat_template_kwargs", "tools", "tool_choice"] as const).find(
      (f) => request[f] != null,
    );
    if (chatField) throw apiError("invalid_value", `'${chatField}' ${chatOnly(chatField).why}`, chatField);
    if (request.content != null && request.add_special_tokens != null)
      throw apiError("invalid_value", "'add_special_tokens' goes with 'prompt'; with llama.cpp's 'content', send 'add_special'.", "add_special_tokens");
  } else if (request.add_special_tokens === true) {
    throw apiError(
      "unsupported_value",
      "'add_special_tokens' applies to a 'prompt': a chat's special tokens are those its template writes.",
      "add_special_tokens",
    );
  }
  return request;
}

export interface TokenizeAnswer {
  /** How many tokens. */
  count: number;
  /** Tokens a request may use on this server, prompt plus completion (the served context). */
  max_model_len: number;
  /** The ids; with llama.cpp's `with_pieces`, each as `{id, piece}` (its text; a token holding part of a character gives U+FFFD). */
  tokens: number[] | Array<{ id: number; piece: string }>;
  /** Each token's vocabulary entry, when `return_token_strs` asked for them; null otherwise. */
  token_strs: string[] | null;
}

export const detokenizeRequestSchema = z.object({
  /** Which model; without it, the one text model served (llama.cpp's server sends none). */
  model: z.string().min(1).nullish(),
  tokens: z.array(z.number().int().min(0)),
});

export type DetokenizeRequest = z.output<typeof detokenizeRequestSchema>;

const DETOKENIZE_KNOWN = knownFields(detokenizeRequestSchema, []);

/** Top-level fields of a detokenize body kiln does not know: accepted and ignored. */
export function ignoredDetokenizeFields(body: unknown): string[] {
  return unknownFields(body, DETOKENIZE_KNOWN);
}

/** Validates a detokenize body; throws a 400 ApiError naming the field at fault. */
export function parseDetokenizeRequest(body: unknown): DetokenizeRequest {
  return parseOrThrow(detokenizeRequestSchema, body);
}

export interface DetokenizeAnswer {
  /** The tokens' text, control tokens written as their text. */
  prompt: string;
  /** The same text, under llama.cpp's name. */
  content: string;
}
