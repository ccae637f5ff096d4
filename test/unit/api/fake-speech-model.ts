/**
 * A served speech model without a model: it "transcribes" any audio into scripted segments, one
 * list per 30 s window as Whisper decodes them, reporting each window through `onSegments` as it
 * goes, spread over the audio's real duration, and honouring the abort signal between windows.
 * Audio that is all silence gives no segments, as a real model's no-speech check does.
 */
import type { ServedSpeechModel, TranscribeOptions, Transcript, TranscriptSegment, TranscriptWord } from "../../../src/scheduler/index.js";

export const SPEECH_SLUG = "whisper-tiny";

/** The texts the fake decodes, window by window (Whisper's leading spaces included). */
export const DEFAULT_WINDOWS: readonly (readonly string[])[] = [
  [" Hello there,", " this is a test."],
  [" And the second window", " ends here."],
];

const LANGUAGE_NAMES: Record<string, string> = { en: "english", fr: "french", de: "german" };

export interface FakeSpeechOptions {
  slug?: string;
  windows?: readonly (readonly string[])[];
  /** Milliseconds each window takes. Default 0. */
  windowDelayMs?: number;
  languages?: readonly string[];
  /** Thrown by every transcribe call (e.g. the scheduler's OverloadedError). */
  fail?: Error;
}

export interface FakeSpeechModel {
  model: ServedSpeechModel;
  /** The options of every transcribe call (samples' length as `samples`). */
  calls: Array<TranscribeOptions & { samples: number }>;
  /** How each call ended: "done", or "aborted" (with the signal's reason). */
  outcomes: string[];
}

const SAMPLE_RATE = 16_000;

export function fakeSpeechModel(options: FakeSpeechOptions = {}): FakeSpeechModel {
  const windows = options.windows ?? DEFAULT_WINDOWS;
  const languages = options.languages ?? ["en", "fr", "de"];
  const calls: FakeSpeechModel["calls"] = [];
  const outcomes: string[] = [];
  const model: ServedSpeechModel = {
    kind: "transcription",
    slug: options.slug ?? SPEECH_SLUG,
    artifactId: "fake-speech-artifact-1",
    artifactCreatedAt: "2025-02-03T04:05:06.000Z",
    multilingual: languages.length > 1,
    languages,
    beamSize: 5,
    maxBeamSize: 5,
    async transcribe(samples, opts = {}) {
      calls.push({ ...opts, samples: samples.length });
      if (options.fail) throw options.fail;
      const duration = samples.length / SAMPLE_RATE;
      const texts = isSilent(samples) ? [] : windows;
      const segments: TranscriptSegment[] = [];
      try {
        for (let w = 0; w < texts.length; w++) {
          await pause(options.windowDelayMs ?? 0, opts.signal);
          const window = scriptedWindow(texts, w, segments.length, duration, opts);
          segments.push(...window);
          opts.onSegments?.(window);
        }
        opts.signal?.throwIfAborted();
      } catch (err) {
        outcomes.push("aborted");
        throw err;
      }
      outcomes.push("done");
      const transcript: Transcript = {
        language: LANGUAGE_NAMES[opts.language ?? "en"] ?? "english",
        duration,
        text: segments
          .map((s) => s.text)
          .join("")
          .trim(),
        segments,
      };
      return transcript;
    },
    close: async () => {},
  };
  return { model, calls, outcomes };
}

/** Window `w`'s segments, spread evenly over the audio (each window a share of the duration). */
function scriptedWindow(texts: readonly (readonly string[])[], w: number, firstId: number, duration: number, opts: TranscribeOptions): TranscriptSegment[] {
  const all = texts.flat();
  const span = duration / all.length;
  const before = texts.slice(0, w).flat().length;
  return texts[w].map((text, i) => {
    const start = round2((before + i) * span);
    const end = round2((before + i + 1) * span);
    const segment: TranscriptSegment = {
      id: firstId + i,
      seek: Math.round((start * 100) / 3000) * 3000,
      start,
      end,
      text,
      tokens: [...text].map((c) => c.charCodeAt(0)),
      temperature: opts.temperature ?? 0,
      avgLogprob: -0.25,
      compressionRatio: 1.1,
      noSpeechProb: 0.01,
    };
    if (opts.wordTimestamps) segment.words = wordsOf(text, start, end);
    return segment;
  });
}

function wordsOf(text: string, start: number, end: number): TranscriptWord[] {
  const words = text.split(/(?= )/).filter((w) => w.trim() !== "");
  const step = (end - start) / words.length;
  return words.map((word, i) => ({ word, start: round2(start + i * step), end: round2(start + (i + 1) * step), probability: 0.9 }));
}

function isSilent(samples: Float32Array): boolean {
  for (const s of samples) if (Math.abs(s) > 1e-3) return false;
  return true;
}

const round2 = (x: number) => Math.round(x * 100) / 100;

/** Waits `ms` (at least a tick, so that aborts land between windows), rejecting with the signal's reason when aborted. */
function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    signal?.throwIfAborted();
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
