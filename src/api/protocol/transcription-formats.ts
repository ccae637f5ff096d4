/**
 * A transcript as each `response_format` answers it (json, text, srt, vtt, verbose_json). The text
 * is always `joinSegmentTexts` (the scheduler's one rule, which the streamed deltas follow too).
 */
import { joinSegmentTexts, type Transcript, type TranscriptSegment } from "../../scheduler/index.js";
import type { DurationUsage, TranscriptionJson, TranscriptionResponseFormat, TranscriptionVerbose, VerboseSegment, VerboseWord } from "./transcriptions.js";

/** A formatted answer: its body and content type. */
export interface FormattedTranscript {
  contentType: string;
  body: string | object;
}

export const TEXT_CONTENT_TYPE = "text/plain; charset=utf-8";
export const VTT_CONTENT_TYPE = "text/vtt; charset=utf-8";
export const JSON_CONTENT_TYPE = "application/json; charset=utf-8";

export function formatTranscript(
  transcript: Transcript,
  format: TranscriptionResponseFormat,
  usage: DurationUsage,
  options: { words: boolean; logprobs?: boolean },
): FormattedTranscript {
  switch (format) {
    case "json":
      return { contentType: JSON_CONTENT_TYPE, body: jsonAnswer(transcript, usage, options.logprobs ?? false) };
    case "verbose_json":
      return { contentType: JSON_CONTENT_TYPE, body: verboseAnswer(transcript, usage, options.words) };
    case "text":
      return { contentType: TEXT_CONTENT_TYPE, body: `${joinSegmentTexts(transcript.segments)}\n` };
    case "srt":
      return { contentType: TEXT_CONTENT_TYPE, body: srt(transcript.segments) };
    case "vtt":
      return { contentType: VTT_CONTENT_TYPE, body: vtt(transcript.segments) };
  }
}

export function jsonAnswer(transcript: Transcript, usage: DurationUsage, withLogprobs = false): TranscriptionJson {
  const logprobs = withLogprobs ? transcript.segments.flatMap((s) => s.logprobs ?? []) : null;
  return { text: joinSegmentTexts(transcript.segments), ...(logprobs ? { logprobs } : {}), usage };
}

export function verboseAnswer(transcript: Transcript, usage: DurationUsage, withWords: boolean): TranscriptionVerbose {
  return {
    task: transcript.task ?? "transcribe",
    language: transcript.language,
    duration: transcript.duration,
    text: joinSegmentTexts(transcript.segments),
    segments: transcript.segments.map(verboseSegment),
    ...(withWords ? { words: transcript.segments.flatMap((s) => (s.words ?? []).map(verboseWord)) } : {}),
    usage,
  };
}

function verboseSegment(s: TranscriptSegment): VerboseSegment {
  return {
    id: s.id,
    seek: s.seek,
    start: s.start,
    end: s.end,
    text: s.text,
    tokens: s.tokens,
    temperature: s.temperature,
    avg_logprob: s.avgLogprob,
    compression_ratio: s.compressionRatio,
    no_speech_prob: s.noSpeechProb,
  };
}

/** The reference API gives words without Whisper's leading space. */
function verboseWord(w: { word: string; start: number; end: number }): VerboseWord {
  return { word: w.word.trim(), start: w.start, end: w.end };
}

/** SubRip: numbered cues from 1, `HH:MM:SS,mmm --> HH:MM:SS,mmm`, each cue followed by a blank line. */
export function srt(segments: readonly TranscriptSegment[]): string {
  return cues(segments)
    .map((c, i) => `${i + 1}\n${timestamp(c.start, ",")} --> ${timestamp(c.end, ",")}\n${c.text}\n\n`)
    .join("");
}

/** WebVTT: the `WEBVTT` header and a blank line, then cues `HH:MM:SS.mmm --> HH:MM:SS.mmm`, each followed by a blank line. */
export function vtt(segments: readonly TranscriptSegment[]): string {
  return (
    "WEBVTT\n\n" +
    cues(segments)
      .map((c) => `${timestamp(c.start, ".")} --> ${timestamp(c.end, ".")}\n${c.text}\n\n`)
      .join("")
  );
}

/**
 * Cues of the segments that have text: trimmed, and with no blank line inside (a blank line would
 * end the cue early in both formats).
 */
function cues(segments: readonly TranscriptSegment[]): Array<{ start: number; end: number; text: string }> {
  return segments.map((s) => ({ start: s.start, end: Math.max(s.start, s.end), text: s.text.trim().replace(/\n\s*\n/g, "\n") })).filter((c) => c.text !== "");
}

/** `HH:MM:SS<sep>mmm` of `seconds`, rounded to the millisecond (hours may pass 99). */
export function timestamp(seconds: number, separator: "," | "."): string {
  const ms = Math.max(0, Math.round(seconds * 1000));
  const pad = (n: number, width = 2) => String(n).padStart(width, "0");
  const h = Math.floor(ms / 3_600_000);
  const m = Math.floor(ms / 60_000) % 60;
  const s = Math.floor(ms / 1000) % 60;
  return `${pad(h)}:${pad(m)}:${pad(s)}${separator}${pad(ms % 1000, 3)}`;
}
