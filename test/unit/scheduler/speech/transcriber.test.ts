import { describe, expect, it } from "vitest";
import type { WhisperShape, WhisperTokens } from "../../../../src/runtime/artifact/index.js";
import type { DecodeRequest, DecodeRowResult } from "../../../../src/runtime/speech-worker/protocol.js";
import type { Tokenizer } from "../../../../src/runtime/text/index.js";
import { SpeechEngine, Transcriber, type TranscriptSegment } from "../../../../src/scheduler/speech/index.js";

// Toy vocabulary: 0..9 words, 10 EOT, 11 SOT, 12 prev, 13 nocaptions, 14 notimestamps, 15.. timestamps.
const TOKENS: WhisperTokens = {
  endOfText: 10,
  startOfTranscript: 11,
  startOfPrev: 12,
  startOfLm: null,
  noTimestamps: 14,
  noSpeech: 13,
  timestampBegin: 15,
  transcribe: null,
  translate: null,
  languages: {},
  suppress: [],
  suppressAtBegin: [],
};
const SHAPE: WhisperShape = {
  melBins: 80,
  audioContext: 1500,
  textContext: 448,
  width: 4,
  heads: 1,
  headDim: 4,
  encoderLayers: 1,
  decoderLayers: 1,
  vocab: 1600,
  alignmentHeads: [[0, 0]],
  sourceDtype: "float32",
};
const WORDS = [" zero", " one", " two", " three", " four", " five", " six", " seven", " eight", " nine"];
const tokenizer = {
  decode: (ids: Iterable<number>) => [...ids].map((i) => WORDS[i] ?? "").join(""),
  encode: (text: string) =>
    text
      .trim()
      .split(/\s+/)
      .map((w) => WORDS.indexOf(" " + w)),
} as unknown as Tokenizer;
const ts = (seconds: number) => 15 + Math.round(seconds / 0.02);

interface Attempt {
  tokens: number[];
  logprob?: number;
  noSpeech?: number;
}

/** A fake speech worker answering each window's decoding attempts from a script, recording what it was sent. */
function scripted(windows: Attempt[][]) {
  const heads: number[][] = [];
  /** Multi-token calls after the head: the rest of the start sequence. */
  const rests: number[][] = [];
  let detected = 0;
  let window = -1;
  let attempt = -1;
  let step = 0;
  const runner = {
    slots: 1,
    async encode() {
      window++;
      attempt = -1;
      return { runMs: 0 };
    },
    async decode(r: Omit<DecodeRequest, "op">) {
      const row = r.rows.find((x) => x !== null)!;
      if (row.detectLanguage) {
        detected++;
        return { rows: r.rows.map((x) => (x ? { language: { code: "de", probability: 0.9 } } : null)), runMs: 0 };
      }
      if (row.past > 0 && row.tokens.length > 1) rests.push(row.tokens);
      if (row.past === 0) {
        attempt++;
        step = 0;
        heads.push(row.tokens);
      }
      const script = windows[window][attempt];
      const out: DecodeRowResult = {};
      if (row.noSpeech) out.noSpeechProb = script.noSpeech ?? 0.01;
      if (row.sample) {
        out.token = script.tokens[step++] ?? 10;
        out.logprob = script.logprob ?? -0.1;
      }
      return { rows: r.rows.map((x) => (x ? out : null)), runMs: 0 };
    },
    async align() {
      return { starts: [], runMs: 0 };
    },
  };
  return { runner, heads, rests, detected: () => detected };
}

function transcriber(windows: Attempt[][], tokens = TOKENS) {
  const { runner, heads, rests } = scripted(windows);
  const engine = new SpeechEngine(runner, { name: "fake" });
  const multilingual = Object.keys(tokens.languages).length > 0;
  // One sampled candidate per temperature: the scripts answer one attempt per temperature.
  return { t: new Transcriber(engine, { shape: SHAPE, tokens, tokenizer, multilingual }, { bestOf: 1 }), heads, rests };
}

const seconds = (s: number) => new Float32Array(s * 16000);

describe("Transcriber", () => {
  it("splits by timestamps, seeks to the last closing timestamp, and prompts the next window with the text so far", async () => {
    const { t, heads } = transcriber([[{ tokens: [ts(0), 1, 2, ts(2), ts(2.5), 3, ts(20), ts(20), 4, 10] }], [{ tokens: [ts(0), 5, 6, ts(4), 10] }]]);
    const streamed: TranscriptSegment[][] = [];
    const out = await t.transcribe(seconds(40), { onSegments: (s) => streamed.push([...s]) });
    expect(out.segments.map((s) => [s.start, s.end, s.text])).toEqual([
      [0, 2, " one two"],
      [2.5, 20, " three"],
      [20, 24, " five six"],
    ]);
    expect(out.segments[2].seek).toBe(2000);
    expect(out.text).toBe("one two three five six");
    expect(out.duration).toBe(40);
    expect(out.language).toBe("english");
    expect(streamed.map((s) => s.length)).toEqual([2, 1]);
    expect(heads[0]).toEqual([11]);
    expect(heads[1]).toEqual([12, 1, 2, 3, 11]);
  });

  it("falls back to a higher temperature when the text repeats itself", async () => {
    const loop = [ts(0), ...Array<number>(40).fill(7), ts(5), 10];
    const { t } = transcriber([[{ tokens: loop }, { tokens: [ts(0), 1, 2, ts(3), 10] }]]);
    const out = await t.transcribe(seconds(5));
    expect(out.text).toBe("one two");
    expect(out.segments[0].temperature).toBe(0.2);
    expect(out.segments[0].compressionRatio).toBeLessThan(2.4);
  });

  it("falls back when the text is unlikely, and keeps the likeliest attempt when every temperature fails", async () => {
    const unlikely = { tokens: [ts(0), 4, ts(1), 10], logprob: -3 };
    const { t } = transcriber([[{ tokens: [ts(0), 3, ts(1), 10], logprob: -1.5 }, unlikely, unlikely, unlikely, unlikely, unlikely]]);
    const out = await t.transcribe(seconds(2));
    expect(out.text).toBe("three");
    // The temperature reached is reported (and decides whether the next window is prompted with this text).
    expect(out.segments[0].temperature).toBe(1);
  });

  it("skips a window of silence: no-speech likely and text unlikely", async () => {
    const { t } = transcriber([[{ tokens: [ts(0), 9, ts(1), 10], logprob: -2, noSpeech: 0.95 }]]);
    const out = await t.transcribe(seconds(4));
    expect(out.text).toBe("");
    expect(out.segments).toEqual([]);
  });

  it("passes the prompt as previous text, and stops when aborted", async () => {
    const { t, heads } = transcriber([[{ tokens: [ts(0), 1, ts(1), 10] }]]);
    await t.transcribe(seconds(2), { prompt: "eight nine" });
    expect(heads[0]).toEqual([12, 8, 9, 11]);
    const abort = new AbortController();
    abort.abort(new Error("gone"));
    await expect(transcriber([[{ tokens: [10] }]]).t.transcribe(seconds(2), { signal: abort.signal })).rejects.toThrow("gone");
  });

  it("on a multilingual model detects the language once, then decodes with language and task tokens", async () => {
    const multilingual: WhisperTokens = { ...TOKENS, transcribe: 1500, languages: { en: 1400, de: 1401 } };
    const { t, heads, rests } = transcriber([[{ tokens: [ts(0), 1, ts(1), 10] }], [{ tokens: [ts(0), 2, ts(1), 10] }]], multilingual);
    const out = await t.transcribe(seconds(45));
    expect(out.language).toBe("german");
    expect(heads[0]).toEqual([11]);
    expect(rests).toEqual([
      [1401, 1500],
      [1401, 1500],
    ]);
    const given = transcriber([[{ tokens: [ts(0), 1, ts(1), 10] }]], multilingual);
    expect((await given.t.transcribe(seconds(2), { language: "en" })).language).toBe("english");
    expect(given.rests).toEqual([[1400, 1500]]);
  });
});
