/**
 * The one catalogue of API errors: each kiln error code maps to an HTTP status and the OpenAI
 * error body `{error: {message, type, param, code}}` (the shape the official clients parse).
 * Routes throw `apiError(code, message, param)`; the app's error handler turns anything thrown
 * (ours, fastify's, the scheduler's) into one of these answers.
 */
import { ChatTemplateError, EngineClosedError, ModelTooLargeError, OverloadedError, VadUnavailableError } from "../scheduler/index.js";
import { UnknownModelError } from "../catalogue/catalogue.js";

interface ErrorSpec {
  status: number;
  type: string;
  /** The `code` field of the body (null where the API sends none). */
  code: string | null;
  /** Seconds for a `retry-after` header, where the client should come back later. */
  retryAfter?: number;
  /** Sends `x-should-retry: false`, which the official clients obey, where a retry cannot succeed. */
  noRetry?: boolean;
}

export const ERRORS = {
  invalid_json: { status: 400, type: "invalid_request_error", code: "invalid_json" },
  invalid_type: { status: 400, type: "invalid_request_error", code: "invalid_type" },
  invalid_value: { status: 400, type: "invalid_request_error", code: "invalid_value" },
  missing_required_parameter: { status: 400, type: "invalid_request_error", code: "missing_required_parameter" },
  unsupported_parameter: { status: 400, type: "invalid_request_error", code: "unsupported_parameter" },
  // A field inside an object the reference API defines whole (response_format, stream_options, a tool's function): a typo there would silently change nothing.
  unknown_parameter: { status: 400, type: "invalid_request_error", code: "unknown_parameter" },
  // A top-level field the endpoint does not define (a typo, or another server's extension): refused, since ignoring it would silently drop what it asked for.
  unsupported_value: { status: 400, type: "invalid_request_error", code: "unsupported_value" },
  context_length_exceeded: { status: 400, type: "invalid_request_error", code: "context_length_exceeded" },
  invalid_request: { status: 400, type: "invalid_request_error", code: null },
  invalid_api_key: { status: 401, type: "invalid_request_error", code: "invalid_api_key" },
  model_not_allowed: { status: 403, type: "permission_error", code: "model_not_allowed" },
  // Cloud mode: the console's operator actions (promote, rollback) with a key that is not an admin key (`kiln keys create --admin`).
  admin_key_required: { status: 403, type: "permission_error", code: "admin_key_required" },
  model_not_found: { status: 404, type: "invalid_request_error", code: "model_not_found" },
  // A catalogue model whose weights this server does not have (and may not pull on demand): the message names `kiln pull`.
  model_not_pulled: { status: 404, type: "invalid_request_error", code: "model_not_pulled" },
  route_not_found: { status: 404, type: "invalid_request_error", code: null },
  // GET, DELETE or input_items of a response that is not stored, past retention, or another key's.
  response_not_found: { status: 404, type: "invalid_request_error", code: null },
  // A file (Files API) or batch (Batch API) that does not exist, has expired, or is another key's.
  file_not_found: { status: 404, type: "invalid_request_error", code: null },
  batch_not_found: { status: 404, type: "invalid_request_error", code: null },
  // A pull (Ollama's /api/pull) that no source of the model could serve: the sources are another server's.
  model_pull_failed: { status: 502, type: "server_error", code: "model_pull_failed" },
  // A Message Batch's results or deletion asked for before it has ended.
  batch_in_progress: { status: 400, type: "invalid_request_error", code: "batch_in_progress" },
  // A `previous_response_id` the key has no stored response for: the reference API's 400 and code.
  previous_response_not_found: { status: 400, type: "invalid_request_error", code: "previous_response_not_found" },
  request_too_large: { status: 413, type: "invalid_request_error", code: "request_too_large" },
  // An uploaded audio file past the 25 MB limit (param `file`); the contract's 413 code.
  file_too_large: { status: 413, type: "invalid_request_error", code: "request_too_large" },
  // A body labelled compressed (content-encoding gzip, br…): kiln reads plain bodies only, and never parses a compressed one as if it were plain.
  unsupported_content_encoding: { status: 415, type: "invalid_request_error", code: "unsupported_content_encoding" },
  // An uploaded audio file that is empty, of no format ffmpeg reads, or damaged (param `file`).
  invalid_audio: { status: 400, type: "invalid_request_error", code: "invalid_audio" },
  // The contract forbids 408 (the clients retry it), so a request too slow to arrive is a 400.
  request_timeout: { status: 400, type: "invalid_request_error", code: "request_timeout" },
  rate_limit_exceeded: { status: 429, type: "requests", code: "rate_limit_exceeded", retryAfter: 1 },
  // Cloud mode: the key's tokens-per-minute limit (requests per minute and concurrency are `rate_limit_exceeded`).
  token_rate_limit_exceeded: { status: 429, type: "tokens", code: "rate_limit_exceeded", retryAfter: 1 },
  // Cloud mode: the key's daily budget is spent (retry-after: until the next UTC day).
  insufficient_quota: { status: 429, type: "insufficient_quota", code: "insufficient_quota", retryAfter: 60 },
  internal_error: { status: 500, type: "server_error", code: null },
  // The server cannot decode audio at all (ffmpeg not installed): the operator's to fix, not the client's.
  audio_decoder_missing: { status: 500, type: "server_error", code: "audio_decoder_missing" },
  // A transcription asked to skip silence, and the server's voice activity detector could not be had (its model not pulled, not loadable): the operator's to fix.
  vad_unavailable: { status: 500, type: "server_error", code: "vad_unavailable" },
  overloaded: { status: 503, type: "server_error", code: "overloaded", retryAfter: 1 },
  model_loading: { status: 503, type: "server_error", code: "overloaded", retryAfter: 5 },
  model_unavailable: { status: 503, type: "server_error", code: "model_unavailable" },
  // The model cannot fit this server's memory budget even with the others unloaded: retrying never helps, so the clients are told not to.
  model_too_large: { status: 503, type: "server_error", code: "model_too_large", noRetry: true },
  shutting_down: { status: 503, type: "server_error", code: "overloaded", retryAfter: 5 },
  // Usage can be neither recorded nor spooled (cloud mode): refused before any work, never served free.
  ledger_unavailable: { status: 503, type: "server_error", code: "overloaded", retryAfter: 5 },
  // Cloud mode fails closed: the key database or the limit counters cannot be reached, so no key can be checked or request admitted.
  auth_unavailable: { status: 503, type: "server_error", code: "overloaded", retryAfter: 5 },
  limits_unavailable: { status: 503, type: "server_error", code: "overloaded", retryAfter: 5 },
} as const satisfies Record<string, ErrorSpec>;

export type ErrorCode = keyof typeof ERRORS;

export interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

/** An error with its place in the catalogue; thrown by routes, answered by the error handler. */
export class ApiError extends Error {
  readonly status: number;
  readonly type: string;
  readonly wireCode: string | null;
  readonly retryAfter: number | undefined;
  readonly noRetry: boolean;

  /** @param retryAfter seconds for `retry-after` when this answer knows better than the table (a rate limit's wait). */
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly param: string | null = null,
    retryAfter?: number,
  ) {
    super(message);
    this.name = "ApiError";
    const spec: ErrorSpec = ERRORS[code];
    this.status = spec.status;
    this.type = spec.type;
    this.wireCode = spec.code;
    this.retryAfter = retryAfter ?? spec.retryAfter;
    this.noRetry = spec.noRetry === true;
  }

  toBody(): ErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.wireCode } };
  }
}

export function apiError(code: ErrorCode, message: string, param: string | null = null): ApiError {
  return new ApiError(code, message, param);
}

/** Fastify's own error codes, as they reach the error handler. */
const FASTIFY: Record<string, (err: Error) => ApiError> = {
  FST_ERR_CTP_BODY_TOO_LARGE: () => apiError("request_too_large", "The request body is larger than this server accepts."),
  FST_ERR_CTP_EMPTY_JSON_BODY: () => apiError("invalid_json", "The request body is empty; send a JSON object."),
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: () => apiError("invalid_request", "The content-length header does not match the body."),
  FST_ERR_CTP_INVALID_JSON_BODY: () => apiError("invalid_json", "We could not parse the JSON body of your request."),
  FST_ERR_BAD_URL: () => apiError("invalid_request", "The request URL is not valid: its percent-encoding does not decode to UTF-8 text."),
  FST_ERR_MAX_PARAM_LENGTH: () => apiError("invalid_request", "The request URL has a path segment longer than this server accepts."),
};

/**
 * Turns anything thrown while answering into a catalogue error. Unknown errors become a 500 whose
 * message names the request id and nothing else (no stack, no internals).
 */
export function toApiError(err: unknown, requestId: string): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof OverloadedError) return apiError("overloaded", err.message);
  if (err instanceof EngineClosedError) return apiError("shutting_down", err.message);
  if (err instanceof VadUnavailableError)
    return apiError(
      "vad_unavailable",
      `The server cannot skip silence: ${err.message}. Send the request without vad_filter or chunking_strategy.`,
      "vad_filter",
    );
  if (err instanceof ModelTooLargeError)
    return apiError("model_too_large", `The model '${err.slug}' cannot be served on this server: ${err.message}.`, "model");
  if (err instanceof UnknownModelError) return apiError("model_not_found", `The model '${err.slug}' does not exist.`, "model");
  // The template raised on these messages, or cannot render their shape: the request's to fix, never a 500.
  if (err instanceof ChatTemplateError && err.phase === "render") return apiError("invalid_value", err.message, "messages");
  if (err instanceof Error) {
    const code = (err as { code?: unknown }).code;
    if (typeof code === "string" && FASTIFY[code]) return FASTIFY[code](err);
    const status = (err as { statusCode?: unknown }).statusCode;
    if (err instanceof SyntaxError && status === 400) return apiError("invalid_json", `We could not parse the JSON body of your request: ${err.message}`);
    if (typeof status === "number" && status === 413) return apiError("request_too_large", err.message);
    if (typeof status === "number" && status >= 400 && status < 500) return apiError("invalid_request", err.message);
  }
  return apiError("internal_error", `The server had an error while processing your request (request id ${requestId}).`);
}
