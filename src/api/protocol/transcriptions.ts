/**
 * POST /v1/audio/transcriptions: the form fields as the wire sends them (multipart text fields:
 * numbers and booleans arrive as strings, arrays as repeated `name[]` fields), checked with zod,
 * and the answer and stream event shapes. The `file` part is the route's (see transcriptions.ts).
 */
import type { FormFields } from "../multipart-form.js";
import { z } from "zod";
import { apiError } from "../errors.js";
import { parseOrThrow } from "./issues.js";
import { RESPONSE_FORMATS, type TranscriptionResponseFormat } from "./response-formats.js";

export { RESPONSE_FORMATS, type TranscriptionResponseFormat };

export const TIMESTAMP_GRANULARITIES = ["segment", "word"] as const;

/** What `include[]` may ask for besides the text. */
export const TRANSCRIPTION_INCLUDES = ["logprobs"] as const;

export type { FormFields };

/** A number sent as a form string; anything else is left for zod to call a wrong type. */
const numberField = (schema: z.ZodNumber) => z.preprocess((v: unknown) => numberFromString(v), schema);

/**
 * `chunking_strategy`: "auto", or a server_vad object (the clients send it as
 * `chunking_strategy[type]`, `chunking_strategy[threshold]`… form fields, or as one JSON string).
 * Either way the audio is cut at its silences by voice activity detection before decoding.
 */
const chunkingStrategySchema = z.preprocess(
  (v: unknown) => (typeof v === "string" && v.trim().startsWith("{") ? parseJsonOr(v) : v),
  z.union([
    z.literal("auto"),
    z
      .object({
        type: z.literal("server_vad"),
        /** Speech probability from which a window is speech, 0..1. */
        threshold: numberField(z.number().min(0).max(1)).optional(),
        /** Audio kept before (and after) each stretch of speech, ms. */
        prefix_padding_ms: numberField(z.number().int().min(0).max(10_000)).optional(),
        /** Silence that ends a stretch of speech, ms. */
        silence_duration_ms: numberField(z.number().int().min(0).max(60_000)).optional(),
      })
      .strict(),
  ]),
);

function parseJsonOr(v: string): unknown {
  try {
    return JSON.parse(v) as unknown;
  } catch {
    return v;
  }
}

/** A number sent as a form string; anything else is left for zod to call a wrong type. */
const numberFromString = (v: unknown) => (typeof v === "string" && v.trim() !== "" && Number.isFinite(Number(v)) ? Number(v) : v);

/** `"true"`/`"false"` as a form sends them (any case); anything else is left for zod to refuse. */
const booleanFromString = (v: unknown) => (typeof v === "string" && /^(true|false)$/i.test(v) ? v.toLowerCase() === "true" : v);

export const transcriptionRequestSchema = z.object({
  model: z.string().min(1),
  language: z
    .string()
    // Whisper's two languages without an ISO-639-1 code go by three letters: haw (Hawaiian), yue (Cantonese, large-v3).
    .regex(/^[A-Za-z]{2,3}$/, { message: "Invalid 'language': expected an ISO-639-1 code of two letters (e.g. 'en'), or Whisper's 'haw' or 'yue'." })
    .transform((s) => s.toLowerCase())
    .optional(),
  prompt: z.string().optional(),
  response_format: z.enum(RESPONSE_FORMATS).default("json"),
  temperature: z.preprocess(numberFromString, z.number().min(0).max(1)).default(0),
  timestamp_granularities: z.array(z.enum(TIMESTAMP_GRANULARITIES)).default(["segment"]),
  stream: z.preprocess(booleanFromString, z.boolean()).default(false),
  include: z.array(z.enum(TRANSCRIPTION_INCLUDES)).default([]),
  chunking_strategy: chunkingStrategySchema.optional(),
  vad_filter: z.preprocess(booleanFromString, z.boolean()).optional(),
  /** faster-whisper's: words to favour, in every window's prompt (at most 1,000 characters). */
  hotwords: z.string().max(1000).optional(),
  /** kiln's: beams of the beam search (1 = greedy decoding); default the server's `--beam-size`, which is also the most allowed. */
  beam_size: z.preprocess(numberFromString, z.number().int().min(1).max(16)).optional(),
});

export type TranscriptionRequest = z.output<typeof transcriptionRequestSchema>;

/**
 * POST /v1/audio/translations: the reference API's fields (no `language`, no timestamp
 * granularities, no streaming), plus kiln's `vad_filter`; the rest of the request is read as a
 * transcription's, so the same answer formats come back.
 */
export const translationRequestSchema = transcriptionRequestSchema
  .pick({ model: true, prompt: true, hotwords: true, response_format: true, temperature: true, vad_filter: true, beam_size: true })
  .transform((body) => ({
    ...body,
    language: undefined,
    timestamp_granularities: ["segment" as const],
    stream: false,
    include: [],
    chunking_strategy: undefined,
  }));

/** Form names that carry an array: the reference clients send `name[]`, some send the bare name. */
const ARRAY_FIELDS: Record<string, string> = {
  "timestamp_granularities[]": "timestamp_granularities",
  timestamp_granularities: "timestamp_granularities",
  "include[]": "include",
  include: "include",
};

/** Form names that carry one property of an object, as the clients flatten objects: `name[property]` (`chunking_strategy[type]`, `expires_after[seconds]`). */
const OBJECT_FIELD = /^([a-z_]+)\[([a-z_]+)\]$/;

/**
 * The form's fields as one object for the schema: array fields gathered under their bare name,
 * other fields at their last value (as form parsers do), and empty values dropped, since an empty
 * form field says "not given" (curl `-F language=`, an unset HTML input).
 */
export function formObject(fields: FormFields): Record<string, string | string[] | Record<string, string>> {
  const out: Record<string, string | string[] | Record<string, string>> = {};
  for (const [name, values] of Object.entries(fields)) {
    const given = values.filter((v) => v !== "");
    if (given.length === 0) continue;
    const arrayName = ARRAY_FIELDS[name];
    const objectField = OBJECT_FIELD.exec(name);
    if (arrayName) out[arrayName] = [...((out[arrayName] as string[] | undefined) ?? []), ...given];
    else if (objectField) out[objectField[1]] = { ...(objectOf(out[objectField[1]]) ?? {}), [objectField[2]]: given[given.length - 1] };
    else out[name] = given[given.length - 1];
  }
  return out;
}

function objectOf(v: unknown): Record<string, string> | null {
  return typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, string>) : null;
}

/** Validates a translation's form fields, throwing the first problem as a 400 naming its field. */
export function parseTranslationRequest(fields: FormFields): TranscriptionRequest {
  return parseOrThrow(translationRequestSchema, formObject(fields));
}

/** Validates the form's text fields, throwing the first problem as a 400 naming its field. */
export function parseTranscriptionRequest(fields: FormFields): TranscriptionRequest {
  const body = parseOrThrow(transcriptionRequestSchema, formObject(fields));
  checkFormatRules(body);
  return body;
}

/** Rules across fields, as the reference API has them. */
function checkFormatRules(body: TranscriptionRequest): void {
  if (body.timestamp_granularities.includes("word") && body.response_format !== "verbose_json") {
    throw apiError(
      "invalid_value",
      `Word timestamps need response_format 'verbose_json' (the only format with a place for them), but got '${body.response_format}'.`,
      "timestamp_granularities",
    );
  }
  if (body.include.includes("logprobs") && body.response_format !== "json") {
    throw apiError(
      "unsupported_value",
      `Log-probabilities come back in the 'json' answer only (as in the reference API), but response_format is '${body.response_format}'.`,
      "include",
    );
  }
  if (body.include.includes("logprobs") && body.stream) {
    throw apiError("unsupported_value", "Log-probabilities are not sent in streamed transcriptions here: ask without stream=true to have them.", "include");
  }
  if (body.stream && body.response_format !== "json" && body.response_format !== "text") {
    throw apiError(
      "unsupported_value",
      `A streamed transcription sends text events only, so response_format must be 'json' or 'text' with stream=true, not '${body.response_format}'.`,
      "response_format",
    );
  }
}

/** `usage` of a transcription: priced by the audio's duration. */
export interface DurationUsage {
  type: "duration";
  seconds: number;
}

/** `response_format: json`. */
export interface TranscriptionJson {
  text: string;
  /** Only when `include[]` asked for `logprobs`: each text token of the transcript. */
  logprobs?: TranscriptionLogprob[];
  usage: DurationUsage;
}

export interface TranscriptionLogprob {
  token: string;
  logprob: number;
  bytes: number[];
}

export interface VerboseSegment {
  id: number;
  seek: number;
  start: number;
  end: number;
  text: string;
  tokens: number[];
  temperature: number;
  avg_logprob: number;
  compression_ratio: number;
  no_speech_prob: number;
}

export interface VerboseWord {
  word: string;
  start: number;
  end: number;
}

/** `response_format: verbose_json`. */
export interface TranscriptionVerbose {
  task: "transcribe" | "translate";
  language: string;
  duration: number;
  text: string;
  segments: VerboseSegment[];
  /** Only when `timestamp_granularities[]` asked for `word`. */
  words?: VerboseWord[];
  usage: DurationUsage;
}

/** Streaming: new text, window by window. */
export interface TranscriptTextDelta {
  type: "transcript.text.delta";
  delta: string;
}

/** Streaming: the last event, with the whole text (the deltas joined) and the usage. */
export interface TranscriptTextDone {
  type: "transcript.text.done";
  text: string;
  usage: DurationUsage;
}
