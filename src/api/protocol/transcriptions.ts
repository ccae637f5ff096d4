/**
 * POST /v1/audio/transcriptions: the form fields as the wire sends them (multipart text fields:
 * numbers and booleans arrive as strings, arrays as repeated `name[]` fields), checked with zod,
 * and the answer and stream event shapes. The `file` part is the route's (see transcriptions.ts).
 */
import { z } from "zod";
import { apiError } from "../errors.js";
import { parseOrThrow } from "./issues.js";

export const RESPONSE_FORMATS = ["json", "text", "srt", "vtt", "verbose_json"] as const;
export type TranscriptionResponseFormat = (typeof RESPONSE_FORMATS)[number];

export const TIMESTAMP_GRANULARITIES = ["segment", "word"] as const;

/** The form's text fields: each name with its values in the order they came. */
export type FormFields = Record<string, string[]>;

/** A number sent as a form string; anything else is left for zod to call a wrong type. */
const numberFromString = (v: unknown) => (typeof v === "string" && v.trim() !== "" && Number.isFinite(Number(v)) ? Number(v) : v);

/** `"true"`/`"false"` as a form sends them (any case); anything else is left for zod to refuse. */
const booleanFromString = (v: unknown) => (typeof v === "string" && /^(true|false)$/i.test(v) ? v.toLowerCase() === "true" : v);

export const transcriptionRequestSchema = z.object({
  model: z.string().min(1),
  language: z
    .string()
    .regex(/^[A-Za-z]{2}$/, { message: "Invalid 'language': expected an ISO-639-1 code of two letters (e.g. 'en')." })
    .transform((s) => s.toLowerCase())
    .optional(),
  prompt: z.string().optional(),
  response_format: z.enum(RESPONSE_FORMATS).default("json"),
  temperature: z.preprocess(numberFromString, z.number().min(0).max(1)).default(0),
  timestamp_granularities: z.array(z.enum(TIMESTAMP_GRANULARITIES)).default(["segment"]),
  stream: z.preprocess(booleanFromString, z.boolean()).default(false),
});

export type TranscriptionRequest = z.output<typeof transcriptionRequestSchema>;

/** Form names that carry an array: the reference clients send `name[]`, some send the bare name. */
const ARRAY_FIELDS: Record<string, string> = {
  "timestamp_granularities[]": "timestamp_granularities",
  timestamp_granularities: "timestamp_granularities",
};

/**
 * The form's fields as one object for the schema: array fields gathered under their bare name,
 * other fields at their last value (as form parsers do), and empty values dropped, since an empty
 * form field says "not given" (curl `-F language=`, an unset HTML input).
 */
export function formObject(fields: FormFields): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [name, values] of Object.entries(fields)) {
    const given = values.filter((v) => v !== "");
    if (given.length === 0) continue;
    const arrayName = ARRAY_FIELDS[name];
    if (arrayName) out[arrayName] = [...((out[arrayName] as string[] | undefined) ?? []), ...given];
    else out[name] = given[given.length - 1];
  }
  return out;
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
  usage: DurationUsage;
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
  task: "transcribe";
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
