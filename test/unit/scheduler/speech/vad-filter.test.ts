/**
 * The speech-only transcription with a scripted detector and a scripted model: what audio reaches
 * the model, and how its segments' and words' times come back onto the original audio.
 */
import { describe, expect, it } from "vitest";
import { VAD_WINDOW } from "../../../../src/runtime/audio/index.js";
import type { TranscribeOptions, Transcript, TranscriptSegment } from "../../../../src/scheduler/index.js";
import { transcribeSpeechOnly, type SpeechDetector } from "../../../../src/scheduler/speech/index.js";

const RATE = 16_000;

/** Speech (probability 0.9) over the given seconds of a `seconds`-long audio, silence elsewhere. */
function detector(seconds: number, speech: Array<[number, number]>): SpeechDetector {
  return {
    async speechProbabilities() {
      const windows = Math.floor((seconds * RATE) / VAD_WINDOW) + 1;
      return Float32Array.from({ length: windows }, (_, w) => {
        const t = (w * VAD_WINDOW) / RATE;
        return speech.some(([a, b]) => t >= a && t < b) ? 0.9 : 0.05;
      });
    },
  };
}

function segment(start: number, end: number, words?: Array<[number, number]>): TranscriptSegment {
  return {
    id: 0,
    seek: 0,
    start,
    end,
    text: " words",
    tokens: [1],
    temperature: 0,
    avgLogprob: -0.1,
    compressionRatio: 1,
    noSpeechProb: 0.01,
    ...(words ? { words: words.map(([s, e]) => ({ word: " w", start: s, end: e, probability: 0.9 })) } : {}),
  };
}

describe("transcribeSpeechOnly", () => {
  it("decodes only the speech, padded by 400 ms, and maps times back past the silence removed", async () => {
    const seconds = 60;
    const samples = new Float32Array(seconds * RATE);
    let heard = 0;
    const transcript = await transcribeSpeechOnly(
      async (speech): Promise<Transcript> => {
        heard = speech.length;
        // Speech-only audio: 20.0..23.0 s kept with 0.4 s either side, so 3.8 s; a segment over all of it.
        return {
          language: "english",
          duration: speech.length / RATE,
          text: "words",
          segments: [
            segment(0.2, 3.4, [
              [0.4, 1.0],
              [1.2, 3.4],
            ]),
            segment(0.5, 3.0),
          ],
        };
      },
      detector(seconds, [[20, 23]]),
      samples,
      {},
      {},
      "english",
    );
    // The detector ends speech at the first silent window after it, so the stretch ends up to a window late.
    expect(heard / RATE).toBeGreaterThan(3.79);
    expect(heard / RATE).toBeLessThan(3.9);
    expect(transcript.duration).toBe(60);
    const [withWords, plain] = transcript.segments;
    const silenceBefore = 19.6;
    expect(withWords.words?.map((w) => [w.start, w.end])).toEqual([
      [+(0.4 + silenceBefore).toFixed(2), +(1.0 + silenceBefore).toFixed(2)],
      [+(1.2 + silenceBefore).toFixed(2), +(3.4 + silenceBefore).toFixed(2)],
    ]);
    expect([withWords.start, withWords.end]).toEqual([20.0, 23.0]);
    expect([plain.start, plain.end]).toEqual([20.1, 22.6]);
  });

  it("gives an empty transcript for audio without speech, without running the model", async () => {
    let called = false;
    const transcript = await transcribeSpeechOnly(
      async () => {
        called = true;
        throw new Error("not expected");
      },
      detector(10, []),
      new Float32Array(10 * RATE),
      {},
      {},
      "english",
    );
    expect(called).toBe(false);
    expect(transcript).toEqual({ language: "english", duration: 10, text: "", segments: [] });
  });

  it("reports the streamed segments with their original times too", async () => {
    const reported: TranscriptSegment[] = [];
    const options: TranscribeOptions = { onSegments: (s) => reported.push(...s) };
    await transcribeSpeechOnly(
      async (_speech, o) => {
        const segments = [segment(0.5, 3.0)];
        o.onSegments?.(segments);
        return { language: "english", duration: 4, text: "words", segments };
      },
      detector(40, [[30, 33]]),
      new Float32Array(40 * RATE),
      {},
      options,
      "english",
    );
    // Speech starts with the first window at or after 30 s (window 938, at 30.016 s), kept from 400 ms before it.
    expect([reported[0].start, reported[0].end]).toEqual([30.12, 32.62]);
  });
});
