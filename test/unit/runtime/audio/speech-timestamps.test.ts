/**
 * The speech-timestamps logic against faster-whisper's own `get_speech_timestamps` and
 * `SpeechTimestampsMap` (1.2.1): the expected chunks were printed by faster-whisper for the same
 * per-window probabilities, with its defaults and with short silences, padding and a 1 s limit.
 */
import { describe, expect, it } from "vitest";
import { collectSpeech, SpeechTimeMap, speechTimestamps, type VadOptions } from "../../../../src/runtime/audio/index.js";

const fill = (...runs: Array<[number, number]>) => runs.flatMap(([p, n]) => new Array<number>(n).fill(p));
const SHORT: VadOptions = { minSilenceDurationMs: 500, speechPadMs: 200, maxSpeechDurationS: 1, minSpeechDurationMs: 250 };

const CASES = [
  {
    name: "two stretches far apart",
    probabilities: fill([0.1, 20], [0.9, 30], [0.05, 200], [0.8, 40], [0.1, 10]),
    defaults: [
      { start: 3840, end: 32000 },
      { start: 121600, end: 153500 },
    ],
    short: [
      { start: 7040, end: 19712 },
      { start: 19712, end: 28800 },
      { start: 124800, end: 137472 },
      { start: 137472, end: 147200 },
      { start: 147200, end: 153500 },
    ],
  },
  {
    name: "a short gap inside speech",
    probabilities: fill([0.9, 30], [0.2, 40], [0.9, 30]),
    defaults: [{ start: 0, end: 51100 }],
    short: [
      { start: 0, end: 9472 },
      { start: 9472, end: 18560 },
      { start: 32640, end: 45312 },
      { start: 45312, end: 51100 },
    ],
  },
  {
    name: "probabilities between the two thresholds",
    probabilities: fill([0.9, 10], [0.4, 100], [0.2, 80], [0.6, 5], [0.1, 70]),
    defaults: [
      { start: 0, end: 62720 },
      { start: 90880, end: 106240 },
    ],
    short: [
      { start: 0, end: 12416 },
      { start: 94080, end: 103040 },
    ],
  },
];

describe("speechTimestamps", () => {
  for (const c of CASES) {
    const length = c.probabilities.length * 512 - 100;
    it(`${c.name}: as faster-whisper, with its defaults`, () => {
      expect(speechTimestamps(c.probabilities, length)).toEqual(c.defaults);
    });
    it(`${c.name}: as faster-whisper, with short silences and a length limit`, () => {
      expect(speechTimestamps(c.probabilities, length, SHORT)).toEqual(c.short);
    });
  }

  it("finds nothing in silence", () => {
    expect(speechTimestamps(fill([0.01, 500]), 500 * 512)).toEqual([]);
  });
});

describe("SpeechTimeMap", () => {
  const chunks = [
    { start: 16000, end: 48000 },
    { start: 96000, end: 112000 },
  ];

  it("adds the silence removed before each time's stretch, as faster-whisper does", () => {
    const map = new SpeechTimeMap(chunks);
    expect([0.5, 1.99, 2.0, 2.5].map((t) => map.originalTime(t))).toEqual([1.5, 2.99, 6.0, 6.5]);
    // An end exactly at a stretch's end stays in that stretch.
    expect(map.originalTime(2.0, undefined, true)).toBe(3.0);
  });

  it("joins the stretches' samples", () => {
    const samples = Float32Array.from({ length: 120000 }, (_, i) => i);
    const speech = collectSpeech(samples, chunks);
    expect(speech.length).toBe(48000);
    expect([speech[0], speech[31999], speech[32000]]).toEqual([16000, 47999, 96000]);
  });
});
