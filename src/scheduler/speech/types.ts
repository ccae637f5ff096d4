/**
 * What the API sees of a served speech model: transcribe 16 kHz mono samples into segments.
 * Audio decoding (ffmpeg) happens before, in the route; the transcript's formatting after.
 */
import type { ComputeDevice } from "../../runtime/device/index.js";
import type { VadOptions } from "../../runtime/audio/index.js";

/** One decoded stretch of speech, as `verbose_json` reports it. Times in seconds from the file's start. */
export interface TranscriptSegment {
  id: number;
  /** Start of the 30 s window it was decoded in, in mel frames (10 ms each). */
  seek: number;
  start: number;
  end: number;
  text: string;
  /** Token ids of its text (and timestamps), as decoded. */
  tokens: number[];
  /** Temperature of the decoding attempt that was kept. */
  temperature: number;
  avgLogprob: number;
  compressionRatio: number;
  noSpeechProb: number;
  /** Words with their times, when word timestamps were asked for. */
  words?: TranscriptWord[];
  /** Each text token with its log-probability, when `logprobs` was asked for. */
  logprobs?: TranscriptTokenLogprob[];
}

/** One text token of a segment and its log-probability, as the reference API's `logprobs` lists them. */
export interface TranscriptTokenLogprob {
  token: string;
  /** Natural log of the token's probability after Whisper's rules (suppressed tokens, timestamp grammar) at temperature 1. */
  logprob: number;
  /** The token's UTF-8 bytes (a token may hold part of a character). */
  bytes: number[];
}

export interface TranscriptWord {
  /** The word with its leading space, as Whisper tokenizes it. */
  word: string;
  start: number;
  end: number;
  /** Mean probability of its tokens. */
  probability: number;
}

/** Options of one transcription, already validated by the API. */
export interface TranscribeOptions {
  /** ISO-639-1 code; absent: detected (multilingual models) or English (English-only models). */
  language?: string;
  /** Text of a previous part of the audio, to carry style and spelling over (`<|startofprev|>`). */
  prompt?: string;
  /**
   * Words and spellings to favour (faster-whisper's `hotwords`): put after `<|startofprev|>` in
   * every window, before the text so far, as faster-whisper does (at most their first 112 tokens).
   * Default none.
   */
  hotwords?: string;
  /** Starting sampling temperature, 0..1; Whisper falls back to higher ones when a window fails. Default 0. */
  temperature?: number;
  /**
   * Beams of the beam search at temperature 0; 1 is greedy decoding. Default: the served model's
   * (`kiln serve --beam-size`), which is also the most a transcription may ask for.
   */
  beamSize?: number;
  /** Compute each word's start and end from cross-attention alignment. Default false. */
  wordTimestamps?: boolean;
  /** "translate": decode English text from speech in any language (multilingual models). Default "transcribe". */
  task?: "transcribe" | "translate";
  /** Report each text token's log-probability on its segment. Default false. */
  logprobs?: boolean;
  /**
   * Skip silence before decoding with voice activity detection: true for faster-whisper's defaults,
   * or the detector's options; false decodes the whole audio. Default: the server's `--vad-filter`.
   */
  vadFilter?: boolean | VadOptions;
  /** Aborts the work (client gone); the promise rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Called with the segments of each window as soon as that window is decoded (streaming). */
  onSegments?: (segments: readonly TranscriptSegment[]) => void;
}

export interface Transcript {
  /** What was asked of the model; absent means "transcribe". */
  task?: "transcribe" | "translate";
  /** Language name in English, lowercase ("english"), as `verbose_json` reports it. */
  language: string;
  /** Audio duration in seconds. */
  duration: number;
  /** The whole text: segments' texts joined, trimmed. */
  text: string;
  segments: TranscriptSegment[];
}

/** A speech model in service. */
export interface ServedSpeechModel {
  kind: "transcription";
  slug: string;
  artifactId: string;
  /** Where its encoder and decoder run, as provisioning loaded it. Absent: the CPU (test fakes). */
  device?: ComputeDevice;
  artifactCreatedAt: string;
  /** Whether the model knows more than English (language detection, `language`). */
  multilingual: boolean;
  /** ISO-639-1 codes the model accepts for `language`. */
  languages: readonly string[];
  /** The beam width transcriptions get by default (1: greedy decoding). */
  beamSize: number;
  /** The widest beam a transcription may ask for (`TranscribeOptions.beamSize`). */
  maxBeamSize: number;
  /**
   * Transcribes audio (16 kHz mono float samples in -1..1). Rejects with `OverloadedError` when the
   * queue is full, with the signal's reason when aborted.
   */
  transcribe(samples: Float32Array, options?: TranscribeOptions): Promise<Transcript>;
  /** Lets running transcriptions finish, then frees the model. */
  close(): Promise<void>;
}
