/**
 * POST /v1/audio/transcriptions and /v1/audio/translations (the same work with Whisper's translate
 * task): multipart form -> fields checked -> speech model -> audio decoded
 * (ffmpeg) -> transcript -> the asked format, or server-sent text events. The upload is read with
 * bounded memory (at most {@link MAX_FILE_BYTES} of file, small fields); a client that goes away
 * aborts the decoding and the transcription; every transcription that reached its model is
 * counted in the metrics and metered in cloud mode.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { AudioDecodeError, decodeAudio } from "../../runtime/audio/index.js";
import type { ServedSpeechModel, TranscribeOptions, Transcript, TranscriptSegment } from "../../scheduler/index.js";
import type { ApiContext } from "../context.js";
import { apiError, ApiError } from "../errors.js";
import { EngineClosedError, joinSegmentTexts, OverloadedError } from "../../scheduler/index.js";
import { readForm, registerMultipart, requireFile, type FormSpec, type Upload } from "../multipart-form.js";
import { formatTranscript } from "../protocol/transcription-formats.js";
import {
  parseTranscriptionRequest,
  parseTranslationRequest,
  type DurationUsage,
  type FormFields,
  type TranscriptionRequest,
  type TranscriptTextDelta,
  type TranscriptTextDone,
} from "../protocol/transcriptions.js";
import { streamSse, type SseSink } from "../sse.js";
import { answerId } from "./ids.js";
import { lookupServedModel } from "./model-lookup.js";
import { assertUsageKept, CLIENT_CLOSED_STATUS, RequestLife } from "./request-life.js";

/** Most bytes of an uploaded audio file: 25 MiB, the reference API's "25 MB". */
export const MAX_FILE_BYTES = 25 * 1024 * 1024;
/** Most bytes of one text field (a prompt is at most a few hundred tokens). */
export const MAX_FIELD_BYTES = 64 * 1024;
/** The decoder's sample rate (decodeAudio gives 16 kHz mono). */
const SAMPLE_RATE = 16_000;

/** The form this route reads: one audio file of at most {@link MAX_FILE_BYTES}, small text fields. */
const AUDIO_FORM: FormSpec = {
  maxFileBytes: MAX_FILE_BYTES,
  maxFieldBytes: MAX_FIELD_BYTES,
  what: "the transcription request",
  fileTooLarge: () =>
    apiError(
      "file_too_large",
      `The audio file is larger than the ${MAX_FILE_BYTES / (1024 * 1024)} MB limit: split it, or compress it (e.g. to mp3 or ogg).`,
      "file",
    ),
  missingFile: "Missing required parameter: 'file' (the audio, as a file part of the form).",
};

/**
 * Registers the route with its own multipart parser: registered in this (encapsulated) context,
 * it reads multipart bodies for this route only, and every other route keeps the JSON parser and
 * its body limit.
 */
export async function transcriptionsRoute(app: FastifyInstance, ctx: ApiContext): Promise<void> {
  await registerMultipart(app, AUDIO_FORM);
  app.post("/audio/transcriptions", (request, reply) => speechToText(ctx, request, reply, "transcribe"));
  app.post("/audio/translations", (request, reply) => speechToText(ctx, request, reply, "translate"));
}

/** Either route: the form read and checked, the model found, then the work. */
async function speechToText(ctx: ApiContext, request: FastifyRequest, reply: FastifyReply, task: SpeechTask): Promise<unknown> {
  const { fields, upload } = await readForm(request, AUDIO_FORM);
  const body = task === "translate" ? parseTranslationRequest(fields) : parseTranscriptionRequest(fields);
  const model = await lookupServedModel(ctx, request, body.model, "transcription");
  assertLanguage(model, body.language);
  assertTask(model, task);
  assertBeamSize(model, body.beam_size);
  const file = requireFile(upload, AUDIO_FORM);
  assertUsageKept(ctx);
  const transcription = new Transcription(ctx, request, reply, model);
  try {
    return await answerTranscription(ctx, request, reply, transcription, body, file, task);
  } finally {
    transcription.end();
  }
}

type SpeechTask = "transcribe" | "translate";

function assertLanguage(model: ServedSpeechModel, language: string | undefined): void {
  if (language === undefined || model.languages.includes(language)) return;
  const which = model.multilingual ? "" : ` (it transcribes ${model.languages.join(", ")} only)`;
  throw apiError(
    "unsupported_value",
    `The model '${model.slug}' does not know the language '${language}'${which}; leave 'language' out to detect it.`,
    "language",
  );
}

function assertBeamSize(model: ServedSpeechModel, beamSize: number | undefined): void {
  if (beamSize === undefined || beamSize <= model.maxBeamSize) return;
  throw apiError("invalid_value", `'beam_size' is at most ${model.maxBeamSize} on this server (kiln serve --beam-size sets it), not ${beamSize}.`, "beam_size");
}

/** Translation needs a multilingual model: an English-only one has no translate task token. */
function assertTask(model: ServedSpeechModel, task: SpeechTask): void {
  if (task !== "translate" || model.multilingual) return;
  throw apiError(
    "unsupported_value",
    `The model '${model.slug}' is English-only and cannot translate: use a multilingual Whisper model (one without '.en' in its name), or /v1/audio/transcriptions.`,
    "model",
  );
}

// ---------------------------------------------------------------------------------------------
// The work

/**
 * One transcription: its {@link RequestLife} (aborted at once when its client goes away or the drain
 * deadline passes), counted (metrics, usage) once the audio has reached the model, however it ends.
 */
class Transcription {
  private readonly life: RequestLife;
  private audioSeconds: number | null = null;

  constructor(
    private readonly ctx: ApiContext,
    request: FastifyRequest,
    reply: FastifyReply,
    readonly model: ServedSpeechModel,
  ) {
    this.life = new RequestLife(ctx, request, reply, answerId("transcr"));
  }

  get id(): string {
    return this.life.id;
  }

  get log(): FastifyRequest["log"] {
    return this.life.log;
  }

  get signal(): AbortSignal {
    return this.life.signal;
  }

  /** Whether the client went away before the answer was complete. */
  get clientLeft(): boolean {
    return this.life.clientLeft;
  }

  /** Marks the audio as handed to the model: from here on the request is counted and metered. */
  started(samples: Float32Array): DurationUsage {
    this.audioSeconds = billedSeconds(samples.length);
    return { type: "duration", seconds: this.audioSeconds };
  }

  /** The answer's error for a transcription that stopped with `err`. */
  failure(err: unknown): unknown {
    // Refused before any work (a full queue, a closing model): nothing is charged, and cloud mode's reservation is given back.
    if (err instanceof OverloadedError || err instanceof EngineClosedError) {
      this.audioSeconds = null;
      void this.ctx.cloud?.release(this.id);
    } else if (!this.life.signal.aborted) {
      this.life.failed();
    }
    return this.life.cutOffError() ?? err;
  }

  /** Stops watching the client and records the metrics and usage, once. */
  end(): void {
    this.life.end((settledFrom) => {
      if (this.audioSeconds === null) return;
      this.ctx.metrics.transcription({ model: this.model.slug, audioSeconds: this.audioSeconds, cancelled: settledFrom === "cancelled" });
      this.life.recordUsage({ slug: this.model.slug, promptTokens: 0, completionTokens: 0, audioSeconds: this.audioSeconds }, settledFrom);
    });
  }
}

/**
 * Seconds of audio billed and reported in `usage`: whole seconds, rounded up, as the reference
 * API reports them (a 2.3 s clip is 3 s). Counted from the samples, so float error cannot add a second.
 */
export function billedSeconds(sampleCount: number): number {
  return Math.ceil(sampleCount / SAMPLE_RATE);
}

async function answerTranscription(
  ctx: ApiContext,
  request: FastifyRequest,
  reply: FastifyReply,
  transcription: Transcription,
  body: TranscriptionRequest,
  file: Upload,
  task: SpeechTask,
): Promise<unknown> {
  const samples = await decode(request, transcription, file);
  if (transcription.clientLeft) return reply.code(CLIENT_CLOSED_STATUS).send();
  // Cloud mode: admitted (limits, reservation) for the audio's billed length before the model sees it.
  await ctx.cloud?.admit(request, reply, {
    requestId: transcription.id,
    slug: transcription.model.slug,
    artifactId: null,
    promptTokens: 0,
    maxCompletionTokens: 0,
    audioMs: billedSeconds(samples.length) * 1000,
  });
  const usage = transcription.started(samples);
  const options: TranscribeOptions = {
    language: body.language,
    prompt: body.prompt,
    hotwords: body.hotwords,
    temperature: body.temperature,
    beamSize: body.beam_size,
    wordTimestamps: body.timestamp_granularities.includes("word"),
    task,
    logprobs: body.include.includes("logprobs"),
    vadFilter: vadFilterOf(body),
    signal: transcription.signal,
  };
  if (body.stream) {
    await streamSse(reply, ctx.sse, (sse) => streamTranscript(transcription, sse, samples, options, usage), "last-event");
    return reply;
  }
  let transcript: Transcript;
  try {
    transcript = await transcription.model.transcribe(samples, options);
  } catch (err) {
    if (transcription.clientLeft) return reply.code(CLIENT_CLOSED_STATUS).send();
    throw transcription.failure(err);
  }
  const answer = formatTranscript(transcript, body.response_format, usage, { words: options.wordTimestamps ?? false, logprobs: options.logprobs ?? false });
  return reply.type(answer.contentType).send(answer.body);
}

/**
 * Whether (and how) silence is skipped: `chunking_strategy` (the reference API's, "auto" or a
 * server_vad object, mapped onto the detector's options) first, then kiln's `vad_filter`; neither
 * leaves it to the server's default.
 */
export function vadFilterOf(body: Pick<TranscriptionRequest, "chunking_strategy" | "vad_filter">): TranscribeOptions["vadFilter"] {
  const strategy = body.chunking_strategy;
  if (strategy === "auto") return true;
  if (strategy) {
    return {
      ...(strategy.threshold !== undefined ? { threshold: strategy.threshold } : {}),
      ...(strategy.silence_duration_ms !== undefined ? { minSilenceDurationMs: strategy.silence_duration_ms } : {}),
      ...(strategy.prefix_padding_ms !== undefined ? { speechPadMs: strategy.prefix_padding_ms } : {}),
    };
  }
  return body.vad_filter;
}

/** The upload as 16 kHz mono samples; a file ffmpeg cannot read is the client's 400, a missing ffmpeg the server's 500. */
async function decode(request: FastifyRequest, transcription: Transcription, file: Upload): Promise<Float32Array> {
  try {
    return await decodeAudio(file.bytes, { filename: file.filename, signal: transcription.signal });
  } catch (err) {
    if (transcription.signal.aborted) {
      if (transcription.clientLeft) return new Float32Array(0);
      throw transcription.failure(err);
    }
    if (!(err instanceof AudioDecodeError)) throw err;
    if (err.reason === "ffmpeg_missing") {
      request.log.error({ err }, "cannot decode audio: ffmpeg is not installed");
      throw apiError("audio_decoder_missing", "The server cannot decode audio: ffmpeg is not installed on it. This is the server's fault, not the request's.");
    }
    throw apiError("invalid_audio", AUDIO_PROBLEM[err.reason], "file");
  }
}

const AUDIO_PROBLEM: Record<"empty" | "unsupported" | "corrupt", string> = {
  empty: "The audio file is empty: it holds no audio to transcribe.",
  unsupported: "The file is not in a supported audio format (flac, mp3, mp4, mpeg, mpga, m4a, ogg, wav or webm).",
  corrupt: "The audio file could not be decoded: it is corrupt or cut short.",
};

/**
 * The streamed answer: a `transcript.text.delta` with each window's new text as the model reports
 * it, then `transcript.text.done` with the whole text and the usage. The deltas are the growth of
 * {@link joinSegmentTexts} over the segments so far, and the done text is the same function over all
 * of them, so the deltas joined are exactly the text.
 */
async function streamTranscript(
  transcription: Transcription,
  sse: SseSink,
  samples: Float32Array,
  options: TranscribeOptions,
  usage: DurationUsage,
): Promise<void> {
  const seen: TranscriptSegment[] = [];
  let sent = "";
  // onSegments is synchronous; sends are chained so that they go out in order, each after the last.
  let sending: Promise<void> = Promise.resolve();
  const sendGrowth = (text: string) => {
    if (text.length <= sent.length || !text.startsWith(sent)) return;
    const delta: TranscriptTextDelta = { type: "transcript.text.delta", delta: text.slice(sent.length) };
    sent = text;
    sending = sending.then(() => sse.send(delta));
  };
  let transcript: Transcript;
  try {
    transcript = await transcription.model.transcribe(samples, {
      ...options,
      onSegments: (segments) => {
        seen.push(...segments);
        sendGrowth(joinSegmentTexts(seen));
      },
    });
  } catch (err) {
    await sending;
    // Nothing is left to tell a client that has gone.
    if (transcription.clientLeft) return;
    throw transcription.failure(err);
  }
  const text = joinSegmentTexts(transcript.segments);
  sendGrowth(text);
  await sending;
  // Only a model whose final segments differ from those it reported gets here; the client is told the final text.
  if (sent !== text) transcription.log.error({ model: transcription.model.slug }, "streamed transcript deltas differ from the final segments' text");
  const done: TranscriptTextDone = { type: "transcript.text.done", text, usage };
  await sse.send(done);
}
