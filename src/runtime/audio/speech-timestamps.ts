/**
 * From per-window speech probabilities to stretches of speech, and back from the speech-only audio's
 * times to the original's: faster-whisper's `get_speech_timestamps`, `collect_chunks` and
 * `SpeechTimestampsMap` (its vad.py, adapted from silero-vad), so that kiln keeps and drops the same
 * audio as faster-whisper's `vad_filter`.
 */
import { VAD_WINDOW } from "./vad.js";

const SAMPLE_RATE = 16_000;

/** How speech is told from silence; the defaults are faster-whisper's `VadOptions`. */
export interface VadOptions {
  /** A window whose speech probability is at least this is speech. Default 0.5. */
  threshold?: number;
  /** Below this a window is silence even inside speech. Default: threshold - 0.15 (at least 0.01). */
  negThreshold?: number;
  /** Stretches of speech shorter than this (ms) are dropped. Default 0. */
  minSpeechDurationMs?: number;
  /** A stretch longer than this (seconds) is split, at its last silence of 98 ms or more if any. Default: no limit. */
  maxSpeechDurationS?: number;
  /** Silence (ms) that must pass before a stretch of speech ends. Default 2000. */
  minSilenceDurationMs?: number;
  /** Audio (ms) kept on each side of a stretch of speech. Default 400. */
  speechPadMs?: number;
}

export const VAD_DEFAULTS: Required<Omit<VadOptions, "negThreshold">> = {
  threshold: 0.5,
  minSpeechDurationMs: 0,
  maxSpeechDurationS: Infinity,
  minSilenceDurationMs: 2000,
  speechPadMs: 400,
};

/** A stretch of speech in samples of the original audio: [start, end). */
export interface SpeechChunk {
  start: number;
  end: number;
}

/** The stretches of speech of audio `audioLength` samples long whose windows have `probabilities`. */
export function speechTimestamps(probabilities: ArrayLike<number>, audioLength: number, options: VadOptions = {}): SpeechChunk[] {
  const o = { ...VAD_DEFAULTS, ...options };
  const w = VAD_WINDOW;
  const negThreshold = options.negThreshold ?? Math.max(o.threshold - 0.15, 0.01);
  const minSpeechSamples = (SAMPLE_RATE * o.minSpeechDurationMs) / 1000;
  const padSamples = (SAMPLE_RATE * o.speechPadMs) / 1000;
  const maxSpeechSamples = SAMPLE_RATE * o.maxSpeechDurationS - w - 2 * padSamples;
  const minSilenceSamples = (SAMPLE_RATE * o.minSilenceDurationMs) / 1000;
  const minSilenceAtMaxSpeech = (SAMPLE_RATE * 98) / 1000;

  const speeches: SpeechChunk[] = [];
  let triggered = false;
  let current: Partial<SpeechChunk> = {};
  let tempEnd = 0;
  let prevEnd = 0;
  let nextStart = 0;
  for (let i = 0; i < probabilities.length; i++) {
    const p = probabilities[i];
    const at = w * i;
    if (p >= o.threshold && tempEnd) {
      tempEnd = 0;
      if (nextStart < prevEnd) nextStart = at;
    }
    if (p >= o.threshold && !triggered) {
      triggered = true;
      current.start = at;
      continue;
    }
    if (triggered && at - current.start! > maxSpeechSamples) {
      if (prevEnd) {
        speeches.push({ start: current.start!, end: prevEnd });
        current = {};
        // Silence was reached (below negThreshold) and speech has not resumed.
        if (nextStart < prevEnd) triggered = false;
        else current.start = nextStart;
        prevEnd = nextStart = tempEnd = 0;
      } else {
        speeches.push({ start: current.start!, end: at });
        current = {};
        prevEnd = nextStart = tempEnd = 0;
        triggered = false;
        continue;
      }
    }
    if (p < negThreshold && triggered) {
      if (!tempEnd) tempEnd = at;
      // Remember a silence long enough to cut at, should the stretch grow too long.
      if (at - tempEnd > minSilenceAtMaxSpeech) prevEnd = tempEnd;
      if (at - tempEnd < minSilenceSamples) continue;
      if (tempEnd - current.start! > minSpeechSamples) speeches.push({ start: current.start!, end: tempEnd });
      current = {};
      prevEnd = nextStart = tempEnd = 0;
      triggered = false;
    }
  }
  if (current.start !== undefined && audioLength - current.start > minSpeechSamples) speeches.push({ start: current.start, end: audioLength });
  padSpeeches(speeches, padSamples, audioLength);
  return speeches;
}

/** Widens each stretch by the pad, or by half the silence between two stretches closer than two pads. */
function padSpeeches(speeches: SpeechChunk[], padSamples: number, audioLength: number): void {
  for (let i = 0; i < speeches.length; i++) {
    const s = speeches[i];
    if (i === 0) s.start = Math.trunc(Math.max(0, s.start - padSamples));
    if (i !== speeches.length - 1) {
      const next = speeches[i + 1];
      const silence = next.start - s.end;
      if (silence < 2 * padSamples) {
        s.end += Math.floor(silence / 2);
        next.start = Math.trunc(Math.max(0, next.start - Math.floor(silence / 2)));
      } else {
        s.end = Math.trunc(Math.min(audioLength, s.end + padSamples));
        next.start = Math.trunc(Math.max(0, next.start - padSamples));
      }
    } else {
      s.end = Math.trunc(Math.min(audioLength, s.end + padSamples));
    }
  }
}

/** The speech stretches of `samples` one after the other (silence removed). */
export function collectSpeech(samples: Float32Array, chunks: readonly SpeechChunk[]): Float32Array {
  const out = new Float32Array(chunks.reduce((n, c) => n + (c.end - c.start), 0));
  let at = 0;
  for (const c of chunks) {
    out.set(samples.subarray(c.start, c.end), at);
    at += c.end - c.start;
  }
  return out;
}

/** Maps a time in the speech-only audio back to the original audio's time (faster-whisper's SpeechTimestampsMap). */
export class SpeechTimeMap {
  /** Per chunk: its end in the speech-only audio's samples. */
  private readonly chunkEnds: number[] = [];
  /** Per chunk: seconds of silence removed before it. */
  private readonly silenceBefore: number[] = [];

  constructor(chunks: readonly SpeechChunk[]) {
    let previousEnd = 0;
    let silent = 0;
    for (const c of chunks) {
      silent += c.start - previousEnd;
      previousEnd = c.end;
      this.chunkEnds.push(c.end - silent);
      this.silenceBefore.push(silent / SAMPLE_RATE);
    }
  }

  /** The original time of `time` (seconds of speech-only audio), rounded to 10 ms; `chunk` forces the chunk it falls in. */
  originalTime(time: number, chunk?: number, isEnd = false): number {
    if (this.chunkEnds.length === 0) return time;
    const index = chunk ?? this.chunkIndex(time, isEnd);
    return Math.round((this.silenceBefore[index] + time) * 100) / 100;
  }

  /** The chunk holding `time`; an end exactly at a chunk's end stays in that chunk. */
  chunkIndex(time: number, isEnd = false): number {
    const sample = Math.trunc(time * SAMPLE_RATE);
    if (isEnd) {
      const exact = this.chunkEnds.indexOf(sample);
      if (exact >= 0) return exact;
    }
    // bisect_right: the first chunk whose end is past the sample.
    let lo = 0;
    let hi = this.chunkEnds.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.chunkEnds[mid] <= sample) lo = mid + 1;
      else hi = mid;
    }
    return Math.min(lo, this.chunkEnds.length - 1);
  }
}
