/**
 * Ollama's native API (`/api/chat`, `/api/generate` and the model listings), as its clients send
 * it: request schemas, and Ollama's `options` turned into the sampling fields kiln's other routes
 * take. Ollama's clients read an error as `{"error": "<message>"}`, so its routes answer errors in
 * that shape (see {@link ollamaErrorBody}).
 */
import { z } from "zod";
import { apiError, type ApiError } from "../errors.js";
import type { SharedFields } from "./common.js";
import { toolDefinition, MAX_TOOLS } from "./tools.js";

/** Most stop strings in `options.stop`. */
export const MAX_OLLAMA_STOP = 16;

/**
 * Ollama's own sampling defaults (its Modelfile documentation), used where `options` leaves one
 * out, so that an Ollama client gets the sampling it would get from Ollama.
 */
export const OLLAMA_DEFAULTS = { temperature: 0.8, top_k: 40, top_p: 0.9 };

/**
 * Options that tune how Ollama runs a model (threads, GPU layers, memory mapping, batch and
 * context sizes) rather than what it writes: kiln decides those itself, so they are accepted and
 * named back in `x-kiln-ignored-fields`.
 */
const RUNTIME_OPTIONS = new Set([
  "num_ctx",
  "num_batch",
  "num_gpu",
  "main_gpu",
  "num_thread",
  "use_mmap",
  "use_mlock",
  "numa",
  "low_vram",
  "vocab_only",
  "num_keep",
  "repeat_last_n",
  "penalize_newline",
]);

const options = z.looseObject({
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().min(0).max(1).nullish(),
  /** 0 or less: no top-k cut, as in llama.cpp. */
  top_k: z.number().int().nullish(),
  min_p: z.number().min(0).max(1).nullish(),
  seed: z.number().int().nullish(),
  /** Most tokens to write: -1 (the default) until the model stops or the context is full, -2 until the context is full. */
  num_predict: z
    .number()
    .int()
    .refine((v) => v === -1 || v === -2 || v >= 1, "must be -1 (no limit), -2 (fill the context) or at least 1")
    .nullish(),
  stop: z.union([z.string(), z.array(z.string()).max(MAX_OLLAMA_STOP)]).nullish(),
  repeat_penalty: z.number().gt(0).max(2).nullish(),
  presence_penalty: z.number().min(-2).max(2).nullish(),
  frequency_penalty: z.number().min(-2).max(2).nullish(),
  /** Samplers kiln does not have: accepted only at their values that change nothing. */
  typical_p: z.literal(1, { message: "kiln has no typical sampling: leave 'typical_p' out, or at 1" }).nullish(),
  mirostat: z.literal(0, { message: "kiln has no Mirostat sampling: leave 'mirostat' out, or at 0" }).nullish(),
  tfs_z: z.literal(1, { message: "kiln has no tail-free sampling: leave 'tfs_z' out, or at 1" }).nullish(),
});

type Options = z.output<typeof options>;

/** `format`: "json" for any JSON object, a JSON schema, or "" for none. */
const format = z.union([z.literal("json"), z.literal(""), z.record(z.string(), z.unknown())]).nullish();

/** `think`: on or off, or a level (kiln's reasoning models think or do not: any level is on). */
const think = z.union([z.boolean(), z.enum(["low", "medium", "high", "max"])]).nullish();

/** What both generation routes take beside their prompt. */
const generationFields = {
  model: z.string().min(1),
  format,
  options: options.nullish(),
  think,
  stream: z.boolean().nullish(),
  /**
   * How long a model loaded on demand stays loaded after the request: seconds, or a duration
   * ("5m", "1h30m", "300ms"); 0 unloads it, a negative one keeps it ({@link keepAliveMs}).
   */
  keep_alive: z.union([z.string(), z.number()]).nullish(),
  logprobs: z.boolean().nullish(),
  top_logprobs: z.number().int().min(0).max(20).nullish(),
  /**
   * On `/api/chat` (default true): a chat too long for the context keeps its system messages and its
   * latest turns that fit, as Ollama cuts it; false refuses it (a 400). `/api/generate` refuses a
   * prompt too long either way.
   */
  truncate: z.boolean().nullish(),
  shift: z.boolean().nullish(),
  images: z.array(z.string()).max(0, "kiln serves text models: images cannot be sent").nullish(),
};

const toolCall = z.looseObject({
  id: z.string().nullish(),
  function: z.looseObject({ index: z.number().int().nullish(), name: z.string().min(1), arguments: z.record(z.string(), z.unknown()).nullish() }),
});

export const ollamaMessage = z.looseObject({
  role: z
    .string()
    .transform((r) => r.toLowerCase())
    .pipe(z.enum(["system", "user", "assistant", "tool"])),
  content: z.string().nullish(),
  thinking: z.string().nullish(),
  images: z.array(z.string()).max(0, "kiln serves text models: images cannot be sent").nullish(),
  tool_calls: z.array(toolCall).nullish(),
  tool_name: z.string().nullish(),
  tool_call_id: z.string().nullish(),
});

export type OllamaMessage = z.output<typeof ollamaMessage>;

export const ollamaChatRequestSchema = z.looseObject({
  ...generationFields,
  messages: z.array(ollamaMessage).nullish(),
  tools: z.array(toolDefinition).max(MAX_TOOLS).nullish(),
});

export type OllamaChatRequest = z.output<typeof ollamaChatRequestSchema>;

export const ollamaGenerateRequestSchema = z.looseObject({
  ...generationFields,
  prompt: z.string().nullish(),
  /** Text after the response: the model fills in the middle (a model with fill-in-the-middle markers). */
  suffix: z.string().nullish(),
  system: z.string().nullish(),
  /** The prompt as written: no chat template around it. */
  raw: z.boolean().nullish(),
  /** Ollama's Go-template prompt; kiln renders each model's own chat template. */
  template: z.literal("", { message: "kiln renders each model's own chat template: leave 'template' out" }).nullish(),
  /** The deprecated token context of an earlier answer. */
  context: z.array(z.number()).max(0, "the deprecated 'context' is not kept by kiln: send the conversation to /api/chat").nullish(),
});

export type OllamaGenerateRequest = z.output<typeof ollamaGenerateRequestSchema>;

/** POST /api/embed: one input or several, each made unit length. */
export const ollamaEmbedRequestSchema = z.looseObject({
  model: z.string().min(1),
  /** A text or texts; absent or empty loads the model and embeds nothing. */
  input: z.union([z.string(), z.array(z.string())]).nullish(),
  /** Cut an input too long for the context to its first tokens (Ollama's default, true); false refuses it. */
  truncate: z.boolean().nullish(),
  /** Keep each vector's first this many values, made unit length again. Default: all of them. */
  dimensions: z.number().int().min(1).nullish(),
  options: options.nullish(),
  keep_alive: z.union([z.string(), z.number()]).nullish(),
});

export type OllamaEmbedRequest = z.output<typeof ollamaEmbedRequestSchema>;

/** POST /api/embeddings (Ollama's older route): one prompt, its vector as pooled (not unit length). */
export const ollamaEmbeddingsRequestSchema = z.looseObject({
  model: z.string().min(1),
  /** The text; absent or empty loads the model and answers an empty vector. */
  prompt: z.string().nullish(),
  options: options.nullish(),
  keep_alive: z.union([z.string(), z.number()]).nullish(),
});

export const ollamaShowRequestSchema = z.looseObject({
  model: z.string().min(1).optional(),
  name: z.string().min(1).optional(),
  verbose: z.boolean().nullish(),
});

/** POST /api/pull: the model (`name` is Ollama's older spelling), and whether its progress streams (default true). */
export const ollamaPullRequestSchema = z.looseObject({
  model: z.string().min(1).optional(),
  name: z.string().min(1).optional(),
  insecure: z.boolean().nullish(),
  stream: z.boolean().nullish(),
});

/** DELETE /api/delete: the model (`name` is Ollama's older spelling). */
export const ollamaDeleteRequestSchema = z.looseObject({
  model: z.string().min(1).optional(),
  name: z.string().min(1).optional(),
});

/** Options Ollama has that kiln takes but does not use (named back to the client), in `body.options`. */
export function ignoredOllamaOptions(body: { options?: Options | null; keep_alive?: unknown; shift?: unknown }): string[] {
  const ignored = Object.keys(body.options ?? {})
    .filter((k) => RUNTIME_OPTIONS.has(k) || !(k in options.shape))
    .map((k) => `options.${k}`);
  if (body.shift != null) ignored.push("shift");
  return ignored;
}

/** An embedding request's `options`, none of which changes an embedding: all named back to the client. */
export function ignoredEmbeddingOptions(body: { options?: Options | null }): string[] {
  return Object.keys(body.options ?? {}).map((k) => `options.${k}`);
}

const DURATION_UNITS_MS: Record<string, number> = { ns: 1e-6, us: 1e-3, µs: 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/**
 * A `keep_alive` in milliseconds, as Ollama reads it: a number of seconds, or a duration of Go's
 * form (`"5m"`, `"1h30m"`, `"300ms"`, `"-1m"`; a bare number counts as seconds); negative keeps
 * the model (Infinity). Undefined when absent; a 400 naming `keep_alive` when unreadable.
 */
export function keepAliveMs(value: string | number | null | undefined): number | undefined {
  if (value === null || value === undefined) return undefined;
  let ms: number;
  if (typeof value === "number") ms = value * 1000;
  else if (/^\s*[-+]?\d+(\.\d+)?\s*$/.test(value)) ms = Number(value) * 1000;
  else {
    const match = /^([-+]?)((?:\d+(?:\.\d*)?(?:ns|us|µs|ms|s|m|h))+)$/.exec(value.trim());
    if (!match)
      throw apiError("invalid_value", `'keep_alive' must be seconds or a duration such as "5m" or "1h30m", not ${JSON.stringify(value)}.`, "keep_alive");
    ms = 0;
    for (const [, amount, unit] of match[2].matchAll(/(\d+(?:\.\d*)?)(ns|us|µs|ms|s|m|h)/g)) ms += Number(amount) * DURATION_UNITS_MS[unit];
    if (match[1] === "-") ms = -ms;
  }
  return ms < 0 ? Infinity : ms;
}

/**
 * Ollama's `options` as the sampling fields of kiln's other routes, with Ollama's defaults where
 * they are left out. `num_predict` is the budget: null for none (until the model stops, or the context is full).
 */
export function ollamaSampling(body: { options?: Options | null; stream?: boolean | null }): { fields: SharedFields; maxTokens: number | null } {
  const o = body.options ?? {};
  const topK = o.top_k ?? OLLAMA_DEFAULTS.top_k;
  const fields: SharedFields = {
    temperature: o.temperature ?? OLLAMA_DEFAULTS.temperature,
    top_p: o.top_p ?? OLLAMA_DEFAULTS.top_p,
    top_k: topK <= 0 ? -1 : topK,
    min_p: o.min_p,
    seed: o.seed,
    repetition_penalty: o.repeat_penalty,
    presence_penalty: o.presence_penalty,
    frequency_penalty: o.frequency_penalty,
    stop: o.stop,
    // Ollama streams unless told not to; the final line carries the counts, as a usage chunk would.
    stream: body.stream !== false,
    stream_options: body.stream !== false ? { include_usage: true } : undefined,
  };
  const predict = o.num_predict ?? -1;
  return { fields, maxTokens: predict > 0 ? predict : null };
}

/** The alternatives to report beside each token, or null: Ollama's `logprobs` with `top_logprobs`. */
export function ollamaTopLogprobs(body: { logprobs?: boolean | null; top_logprobs?: number | null }): number | null {
  if (!body.logprobs) {
    if (body.top_logprobs) throw apiError("invalid_value", "'top_logprobs' requires 'logprobs' to be true.", "top_logprobs");
    return null;
  }
  return body.top_logprobs ?? 0;
}

/** An error as Ollama's clients read it: its message under `error` (the status says the rest). */
export function ollamaErrorBody(error: ApiError): { error: string } {
  return { error: error.message };
}
