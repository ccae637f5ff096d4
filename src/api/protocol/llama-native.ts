/**
 * llama.cpp server's own completion API (`/completion` and `/infill`, what its editor plugins
 * llama.vim and llama.vscode call): the requests as its clients send them, with llama.cpp's sampling
 * defaults, and its error shape.
 */
import { z } from "zod";
import type { ApiError } from "../errors.js";

/** Most stop strings in `stop`. */
export const MAX_NATIVE_STOP = 16;

/** llama.cpp's sampling defaults (common_params_sampling), used where a request leaves one out. */
export const LLAMA_DEFAULTS = { temperature: 0.8, top_k: 40, top_p: 0.95, min_p: 0.05 };

/**
 * Fields that tune how llama.cpp's server runs a request (its slots, cache, time limits, progress
 * reports) rather than what it writes: accepted, and named back in `x-kiln-ignored-fields`.
 */
export const NATIVE_RUNTIME_FIELDS = [
  "cache_prompt",
  "id_slot",
  "n_keep",
  "t_max_prompt_ms",
  "timings_per_token",
  "samplers",
  "return_progress",
  "repeat_last_n",
  "penalize_nl",
  "n_discard",
];

/** A logit bias: `[[token, bias], ...]` (false bans the token) or `{"token": bias}`. */
const logitBias = z.union([
  z.array(z.tuple([z.number().int().min(0), z.union([z.number(), z.literal(false)])])),
  z.record(z.string(), z.union([z.number(), z.literal(false)])),
]);

/** The sampling fields both routes take (llama.cpp's names). */
const samplingFields = {
  /** Which model answers; without it, the one text model the server serves (llama.cpp's server has one). */
  model: z.string().min(1).nullish(),
  /** Most tokens to write: -1 (the default) until the model stops or the context is full. */
  n_predict: z
    .number()
    .int()
    .refine((v) => v === -1 || v >= 0, "must be -1 (no limit) or at least 0")
    .nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_k: z.number().int().nullish(),
  top_p: z.number().min(0).max(1).nullish(),
  min_p: z.number().min(0).max(1).nullish(),
  /** -1 (the default): a random seed. */
  seed: z.number().int().nullish(),
  repeat_penalty: z.number().gt(0).max(2).nullish(),
  presence_penalty: z.number().min(-2).max(2).nullish(),
  frequency_penalty: z.number().min(-2).max(2).nullish(),
  stop: z.array(z.string()).max(MAX_NATIVE_STOP).nullish(),
  ignore_eos: z.boolean().nullish(),
  logit_bias: logitBias.nullish(),
  /** The likeliest tokens to report beside each one written (`completion_probabilities`). */
  n_probs: z.number().int().min(0).max(20).nullish(),
  grammar: z.string().nullish(),
  json_schema: z.record(z.string(), z.unknown()).nullish(),
  stream: z.boolean().nullish(),
  /**
   * Milliseconds of writing (from the first token) after which the answer ends at the next token
   * that holds a line break; 0 (the default) or less: no limit. The editor plugins send it so that a
   * slow completion still ends at a line's end.
   */
  t_max_predict_ms: z.number().int().nullish(),
  /**
   * Spaces and tabs each line after a line break needs: the answer ends after the indentation of the
   * first line indented less (`stop_type` `limit`); 0 (the default): no minimum. The editor plugins
   * send the cursor's indentation, so that a completion ends where its block does.
   */
  n_indent: z.number().int().nullish(),
  /** Only these fields of the final answer, by path (`timings/prompt_n`), flattened as llama.cpp gives them. */
  response_fields: z.array(z.string()).nullish(),
  /** Samplers kiln does not have: accepted only at their values that change nothing. */
  typical_p: z.literal(1, { message: "kiln has no typical sampling: leave 'typical_p' out, or at 1" }).nullish(),
  mirostat: z.literal(0, { message: "kiln has no Mirostat sampling: leave 'mirostat' out, or at 0" }).nullish(),
  xtc_probability: z.literal(0, { message: "kiln has no XTC sampling: leave 'xtc_probability' out, or at 0" }).nullish(),
  dry_multiplier: z.literal(0, { message: "kiln has no DRY sampling: leave 'dry_multiplier' out, or at 0" }).nullish(),
};

/** The sampling fields of either route, as parsed. */
export type NativeSampling = z.output<z.ZodObject<typeof samplingFields>>;

export const nativeCompletionRequestSchema = z.looseObject({
  /** A prompt as text (special-token text stays text) or token ids. */
  prompt: z.union([z.string(), z.array(z.number().int().min(0)).min(1)]),
  ...samplingFields,
});

export type NativeCompletionRequest = z.output<typeof nativeCompletionRequestSchema>;

export const infillRequestSchema = z.looseObject({
  input_prefix: z.string(),
  input_suffix: z.string(),
  input_extra: z.array(z.looseObject({ text: z.string(), filename: z.string().nullish() })).nullish(),
  prompt: z.string().nullish(),
  ...samplingFields,
});

export type InfillRequestBody = z.output<typeof infillRequestSchema>;

const embeddingInput = z.union([z.string(), z.array(z.number().int().min(0)), z.array(z.union([z.string(), z.array(z.number().int().min(0))]))]);

/** POST /embedding and /embeddings (llama.cpp's own shape): `content` (or `input`), a text, token ids, or a list of them. */
export const nativeEmbeddingRequestSchema = z
  .looseObject({
    model: z.string().min(1).nullish(),
    content: embeddingInput.nullish(),
    input: embeddingInput.nullish(),
    /** How each vector is scaled: -1 not at all, 0 to the int16 range by its largest value, 1 taxicab, 2 Euclidean (the default), p > 2 its p-norm. */
    embd_normalize: z.number().int().min(-1).nullish(),
  })
  .superRefine((r, ctx) => {
    const given = r.content ?? r.input;
    if (given == null)
      ctx.addIssue({ code: "custom", path: ["content"], message: "'content' (or 'input') must be provided.", params: { code: "missing_required_parameter" } });
    else if (Array.isArray(given) && given.length === 0)
      ctx.addIssue({ code: "custom", path: [r.content != null ? "content" : "input"], message: "'content' must not be empty." });
  });

export type NativeEmbeddingRequest = z.output<typeof nativeEmbeddingRequestSchema>;

/** Each input of an embedding request, in order: a text or token ids. */
export function nativeEmbeddingInputs(body: NativeEmbeddingRequest): Array<string | number[]> {
  const given = (body.content ?? body.input)!;
  if (typeof given === "string") return [given];
  if (given.every((x) => typeof x === "number")) return [given as number[]];
  return given as Array<string | number[]>;
}

/** `v` scaled as llama.cpp's `embd_normalize` says (see {@link nativeEmbeddingRequestSchema}); a zero scale leaves zeros. */
export function llamaNormalized(v: Float32Array, norm: number): number[] {
  let scale: number;
  if (norm === -1) scale = 1;
  else if (norm === 0) scale = v.reduce((m, x) => Math.max(m, Math.abs(x)), 0) / 32760;
  else
    scale = Math.pow(
      v.reduce((s, x) => s + Math.pow(Math.abs(x), norm), 0),
      1 / norm,
    );
  const factor = scale > 0 ? 1 / scale : 0;
  return Array.from(v, (x) => Math.fround(x * factor));
}

/** The fields of either route kiln reads; the rest are named back as ignored. */
export const NATIVE_FIELDS = new Set([...Object.keys(samplingFields), "prompt", "input_prefix", "input_suffix", "input_extra"]);

/** llama.cpp's error type by status. */
const ERROR_TYPES: Record<number, string> = {
  400: "invalid_request_error",
  401: "authentication_error",
  403: "permission_error",
  404: "not_found_error",
  501: "not_supported_error",
  503: "unavailable_error",
};

/** An error as llama.cpp's server gives it: `{error: {code, message, type}}`. */
export function nativeErrorBody(error: ApiError): { error: { code: number; message: string; type: string } } {
  return {
    error: { code: error.status, message: error.message, type: ERROR_TYPES[error.status] ?? (error.status >= 500 ? "server_error" : "invalid_request_error") },
  };
}
