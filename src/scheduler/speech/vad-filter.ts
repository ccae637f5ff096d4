/**
 * Transcribing only the speech of an upload (faster-whisper's `vad_filter`): the voice activity
 * detector finds the stretches of speech, the stretches are joined without the silence between
 * them and transcribed as one audio, and every segment's and word's time is mapped back to the
 * original audio. Silence is then never decoded, which saves whole 30 s windows on padded audio
 * and keeps Whisper from hallucinating text into it.
 */
import { collectSpeech, SpeechTimeMap, speechTimestamps, type SpeechChunk, type VadOptions } from "../../runtime/audio/index.js";
import { HOP_LENGTH, SAMPLE_RATE } from "../../runtime/artifact/index.js";
import type { TranscribeOptions, Transcript, TranscriptSegment } from "./types.js";

/** What the filter needs of a voice activity detector: one speech probability per 512-sample window. */
export interface SpeechDetector {
  speechProbabilities(samples: Float32Array, signal?: AbortSignal): Promise<Float32Array>;
}

/** Thrown when a transcription asks for the filter and the server has no detector (its model could not be had). */
export class VadUnavailableError extends Error {}

/** The stretches of speech in `samples`. */
export async function findSpeech(detector: SpeechDetector, samples: Float32Array, options: VadOptions, signal?: AbortSignal): Promise<SpeechChunk[]> {
  const probabilities = await detector.speechProbabilities(samples, signal);
  return speechTimestamps(probabilities, samples.length, options);
}

/**
 * Transcribes the speech of `samples` with `transcribe`, times in the original audio. Audio with no
 * speech at all gives an empty transcript without running the model.
 */
export async function transcribeSpeechOnly(
  transcribe: (samples: Float32Array, options: TranscribeOptions) => Promise<Transcript>,
  detector: SpeechDetector,
  samples: Float32Array,
  vad: VadOptions,
  options: TranscribeOptions,
  emptyLanguage: string,
): Promise<Transcript> {
  const duration = samples.length / SAMPLE_RATE;
  const chunks = await findSpeech(detector, samples, vad, options.signal);
  if (chunks.length === 0) return { language: emptyLanguage, duration, text: "", segments: [] };
  const map = new SpeechTimeMap(chunks);
  const onSegments = options.onSegments;
  const transcript = await transcribe(collectSpeech(samples, chunks), {
    ...options,
    onSegments: onSegments && ((segments) => onSegments(segments.map((s) => restoreTimes(s, map)))),
  });
  return { ...transcript, duration, segments: transcript.segments.map((s) => restoreTimes(s, map)) };
}

/**
 * A segment of the speech-only audio with its times in the original (faster-whisper's
 * `restore_speech_timestamps`): each word mapped within the stretch holding its middle, and the
 * segment spanning its words; without words, the start and end mapped on their own.
 */
export function restoreTimes(segment: TranscriptSegment, map: SpeechTimeMap): TranscriptSegment {
  const seek = Math.round(map.originalTime((segment.seek * HOP_LENGTH) / SAMPLE_RATE) * (SAMPLE_RATE / HOP_LENGTH));
  if (segment.words && segment.words.length > 0) {
    const words = segment.words.map((w) => {
      const chunk = map.chunkIndex((w.start + w.end) / 2);
      return { ...w, start: map.originalTime(w.start, chunk), end: map.originalTime(w.end, chunk) };
    });
    return { ...segment, seek, words, start: words[0].start, end: words[words.length - 1].end };
  }
  return { ...segment, seek, start: map.originalTime(segment.start), end: map.originalTime(segment.end, undefined, true) };
}
