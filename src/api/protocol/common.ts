/**
 * Request fields shared by the generation endpoints, and the rules that keep anything a client
 * asks for from being silently ignored: a top-level field the endpoint does not define is a 400
 * naming it, and a field kiln does not honour yet is accepted only when absent, null or at its
 * default (no effect), otherwise a 400 names it.
 */
import { z } from "zod";
import { MAX_ALLOWED_TOKEN_IDS, MAX_BAD_WORDS, MAX_STOP_TOKEN_IDS } from "../../runtime/sampling/index.js";
import { apiError } from "../errors.js";

/** Most choices per request (`n`): they share one prompt pass and then decode side by side. */
export const MAX_CHOICES = 8;
/** Most stop strings, as in the OpenAI API. */
export const MAX_STOP = 4;

const range = (min: number, max: number) => z.number().min(min).max(max).nullish();

/** The sampling fields both endpoints take (OpenAI names; top_k, min_p and repetition_penalty are kiln extensions, named as in vLLM). */
export const samplingFields = {
  temperature: range(0, 2),
  top_p: range(0, 1),
  top_k: z.number().int().min(-1).nullish(),
  min_p: range(0, 1),
  // Divides the logits of tokens already seen (as in vLLM and llama.cpp), so 0 would divide by zero; 1 is off.
  repetition_penalty: z.number().gt(0).max(2).nullish(),
  presence_penalty: range(-2, 2),
  frequency_penalty: range(-2, 2),
  logit_bias: z.record(z.string(), z.number().min(-100).max(100)).nullish(),
  seed: z.number().int().nullish(),
  /** vLLM's extension: neither an end token nor a stop string ends the output before this many tokens. */
  min_tokens: z.number().int().min(0).nullish(),
  /** vLLM's and llama.cpp's extension: end tokens are never sampled; the output ends at its budget or a stop string. */
  ignore_eos: z.boolean().nullish(),
  /** vLLM's extension: where the request waits for a slot, ahead of waiting requests of a larger priority (lower runs earlier). Default 0. */
  priority: z.number().int().min(-1_000_000).max(1_000_000).nullish(),
  /** vLLM's extension: more tokens that end the output, as the model's end tokens do. */
  stop_token_ids: z.array(z.number().int().min(0)).max(MAX_STOP_TOKEN_IDS).nullish(),
  /** vLLM's extension: score the prompt, each token's log probability and rank with this many alternatives (not streamed). */
  prompt_logprobs: z.number().int().min(0).max(20).nullish(),
  /** vLLM's extension: only these tokens may be sampled. */
  allowed_token_ids: z.array(z.number().int().min(0)).min(1).max(MAX_ALLOWED_TOKEN_IDS).nullish(),
  /** vLLM's extension: words the output never writes (each tokenized alone and after a space). */
  bad_words: z
    .array(z.string().min(1).max(256))
    .max(MAX_BAD_WORDS / 2)
    .nullish(),
  /** vLLM's extension: a matched stop string or stop token stays in the output. */
  include_stop_str_in_output: z.boolean().nullish(),
  /** vLLM's extension: false writes control tokens into the output as their text. */
  skip_special_tokens: z.boolean().nullish(),
  /** vLLM's extension: only the prompt's last this many tokens are kept; -1 keeps as many as the context leaves beside the completion. */
  truncate_prompt_tokens: z
    .number()
    .int()
    .min(-1)
    .refine((v) => v !== 0, "'truncate_prompt_tokens' keeps the prompt's last tokens: at least 1, or -1 for as many as fit.")
    .nullish(),
  n: z.number().int().min(1).max(MAX_CHOICES).nullish(),
  stop: z.union([z.string(), z.array(z.string()).max(MAX_STOP)]).nullish(),
  stream: z.boolean().nullish(),
  // Strict, as the reference API is: a misspelled `include_usage` would silently lose the usage chunk.
  // `include_obfuscation` pads chunks against length side channels; kiln sends none, which it may turn off.
  // `continuous_usage_stats` (vLLM's): with `include_usage`, every chunk carries the usage so far.
  stream_options: z
    .strictObject({ include_usage: z.boolean().nullish(), include_obfuscation: z.boolean().nullish(), continuous_usage_stats: z.boolean().nullish() })
    .nullish(),
  user: z.string().nullish(),
};

const sharedSchema = z.object(samplingFields);
/** The fields of {@link samplingFields}, as parsed. */
export type SharedFields = z.output<typeof sharedSchema>;

/** Stop strings as a list (none for null/absent). */
export function stopList(stop: string | string[] | null | undefined): string[] {
  if (stop === null || stop === undefined) return [];
  return typeof stop === "string" ? [stop] : stop;
}

/** A field kiln does not honour yet: `accepts` says which values are harmless (null and absent always are). */
export interface UnsupportedField {
  field: string;
  accepts?: (value: unknown) => boolean;
  /** Why it is refused, for the message. */
  why: string;
}

/**
 * The top-level fields an endpoint knows: those its schema parses and those it refuses by name
 * (so they get their specific 400 rather than the generic one).
 */
export function knownFields(schema: { shape: object }, unsupported: readonly UnsupportedField[]): ReadonlySet<string> {
  return new Set([...Object.keys(schema.shape), ...unsupported.map((f) => f.field)]);
}

/**
 * The top-level fields of `body` outside `known`, in body order. They are accepted and ignored, as
 * the API contract asks (clients merge vendor fields into the body), and named back to the client
 * in the `x-kiln-ignored-fields` header; the other servers' extensions that would change the
 * output are not unknown: they are in {@link FOREIGN_EXTENSIONS}, honoured or refused by name.
 */
export function unknownFields(body: unknown, known: ReadonlySet<string>): string[] {
  if (body === null || typeof body !== "object" || Array.isArray(body)) return [];
  return Object.keys(body).filter((field) => !known.has(field));
}

/** Most characters of the `x-kiln-ignored-fields` header: a body may carry any number of fields, a header line must stay small. */
const MAX_IGNORED_HEADER = 1024;
/** Half of a UTF-16 pair without its other half: JSON's `\ud800` escapes make them, and URL encoding refuses them. */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/**
 * The `x-kiln-ignored-fields` header naming `fields`, or undefined for none. A header value can
 * only hold visible Latin-1 text, and a field name can be any string (Cyrillic, a newline, a
 * lone surrogate), so each name is percent-encoded as a URL component (plain ASCII names read as
 * they are); past {@link MAX_IGNORED_HEADER} characters the rest are counted, not named.
 */
export function ignoredFieldsHeader(fields: readonly string[]): string | undefined {
  if (fields.length === 0) return undefined;
  let header = "";
  for (let i = 0; i < fields.length; i++) {
    const name = encodeURIComponent(fields[i].replace(LONE_SURROGATE, "\ufffd"));
    const next = header === "" ? name : `${header}, ${name}`;
    if (next.length > MAX_IGNORED_HEADER) return `${header}${header === "" ? "" : ", "}(${fields.length - i} more)`;
    header = next;
  }
  return header;
}

const isDefault =
  (...defaults: unknown[]) =>
  (v: unknown): boolean =>
    defaults.includes(v);
const foreign = (field: string, server: string, accepts?: (v: unknown) => boolean): UnsupportedField => ({
  field,
  ...(accepts ? { accepts } : {}),
  why: `is ${server}'s extension, which kiln does not honour here (it honours on chat and completions: ${GENERATION_EXTENSIONS.join(", ")}).`,
});

/**
 * Other servers' extensions that chat and completions honour, as fields of {@link samplingFields}
 * or the constraint fields; the Responses API refuses them by name.
 */
export const GENERATION_EXTENSIONS = [
  "top_k",
  "min_p",
  "repetition_penalty",
  "min_tokens",
  "ignore_eos",
  "stop_token_ids",
  "allowed_token_ids",
  "bad_words",
  "include_stop_str_in_output",
  "skip_special_tokens",
  "truncate_prompt_tokens",
  "prompt_logprobs",
  "guided_json",
  "guided_regex",
  "guided_choice",
  "guided_grammar",
  "structured_outputs",
  "grammar",
  "json_schema",
] as const;

/** {@link FOREIGN_EXTENSIONS} less those an endpoint honours: what it refuses by name. */
export function refusedExtensions(honoured: Iterable<string>): UnsupportedField[] {
  const keep = new Set(honoured);
  return FOREIGN_EXTENSIONS.filter((f) => !keep.has(f.field));
}

/**
 * Other servers' request extensions that change what is generated: a client sending one expects
 * its effect, so each is a 400 naming it (at its default value it changes nothing and is accepted).
 * Those an endpoint honours are fields of its schema, filtered out with {@link refusedExtensions};
 * the ones all generation endpoints honour ({@link GENERATION_EXTENSIONS}' first ones) are not listed.
 */
export const FOREIGN_EXTENSIONS: readonly UnsupportedField[] = [
  // vLLM
  foreign("guided_grammar", "vLLM"),
  foreign("guided_decoding_backend", "vLLM"),
  foreign("guided_whitespace_pattern", "vLLM"),
  foreign("structured_outputs", "vLLM"),
  foreign("stop_token_ids", "vLLM", (v) => Array.isArray(v) && v.length === 0),
  foreign("bad_words", "vLLM", (v) => Array.isArray(v) && v.length === 0),
  foreign("allowed_token_ids", "vLLM"),
  foreign("skip_special_tokens", "vLLM", isDefault(true)),
  foreign("include_stop_str_in_output", "vLLM", isDefault(false)),
  foreign("prompt_logprobs", "vLLM"),
  foreign("use_beam_search", "vLLM", isDefault(false)),
  foreign("length_penalty", "vLLM", isDefault(1)),
  foreign("chat_template", "vLLM"),
  foreign("chat_template_kwargs", "vLLM"),
  foreign("add_generation_prompt", "vLLM", isDefault(true)),
  foreign("continue_final_message", "vLLM", isDefault(false)),
  foreign("truncate_prompt_tokens", "vLLM"),
  // llama.cpp's server
  foreign("grammar", "llama.cpp", isDefault("")),
  foreign("json_schema", "llama.cpp"),
  foreign("n_predict", "llama.cpp", isDefault(-1)),
  foreign("repeat_penalty", "llama.cpp", isDefault(1)),
  foreign("repeat_last_n", "llama.cpp"),
  foreign("typical_p", "llama.cpp", isDefault(1)),
  foreign("tfs_z", "llama.cpp", isDefault(1)),
  foreign("mirostat", "llama.cpp", isDefault(0)),
  foreign("mirostat_tau", "llama.cpp"),
  foreign("mirostat_eta", "llama.cpp"),
  foreign("dynatemp_range", "llama.cpp", isDefault(0)),
  foreign("dry_multiplier", "llama.cpp", isDefault(0)),
  foreign("xtc_probability", "llama.cpp", isDefault(0)),
  foreign("n_probs", "llama.cpp", isDefault(0)),
  foreign("samplers", "llama.cpp"),
  // Ollama
  foreign("options", "Ollama"),
  foreign("format", "Ollama"),
  foreign("think", "Ollama", isDefault(false)),
];

/** Throws a 400 for the first field in `body` that asks for something kiln does not do. */
export function rejectUnsupported(body: Record<string, unknown>, fields: readonly UnsupportedField[]): void {
  for (const { field, accepts, why } of fields) {
    const value = body[field];
    if (value === undefined || value === null) continue;
    if (accepts?.(value)) continue;
    throw apiError("unsupported_parameter", `Unsupported parameter: '${field}' ${why}`, field);
  }
}

export const isEmptyArray = (v: unknown): boolean => Array.isArray(v) && v.length === 0;
export const isOneOf =
  (...allowed: unknown[]) =>
  (v: unknown): boolean =>
    allowed.includes(v);

/** A vLLM-style scored prompt: per prompt token (null for the first) its id's entry and its alternatives', by token id. */
export type PromptLogprobs = Array<Record<string, { logprob: number; rank: number | null; decoded_token: string }> | null>;

/** `prompt_logprobs` comes whole with the answer, as vLLM gives it: not beside `stream`. */
export function checkPromptLogprobs(body: { stream?: boolean | null; prompt_logprobs?: number | null }): void {
  if (body.prompt_logprobs != null && body.stream === true) {
    throw apiError("unsupported_value", "'prompt_logprobs' is not available when 'stream' is enabled.", "prompt_logprobs");
  }
}

/** `stream_options` only means something when streaming. */
export function checkStreamOptions(body: { stream?: boolean | null; stream_options?: unknown }): void {
  if (body.stream_options !== null && body.stream_options !== undefined && body.stream !== true) {
    throw apiError("invalid_value", "The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options");
  }
}

/** The reference API's values of a reasoning model's effort (chat's `reasoning_effort`, the Responses API's `reasoning.effort`). */
export const REASONING_EFFORTS = ["none", "minimal", "low", "medium", "high"] as const;
