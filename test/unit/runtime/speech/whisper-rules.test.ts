import { describe, expect, it } from "vitest";
import type { WhisperTokens } from "../../../../src/runtime/artifact/index.js";
import type { WhisperSampling } from "../../../../src/runtime/speech-worker/protocol.js";
import { alwaysSuppressed, applyWhisperRules, chooseToken, likeliestLanguage, noSpeechProbability } from "../../../../src/runtime/speech/whisper-rules.js";

// A toy vocabulary: 0..9 text, 10 EOT, 11 SOT, 12 prev, 13 nocaptions, 14 notimestamps, 15.. timestamps.
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
  suppress: [3],
  suppressAtBegin: [0, 10],
};
const VOCAB = 40;
const rule = (over: Partial<WhisperSampling> = {}): WhisperSampling => ({
  temperature: 0,
  seed: 1,
  timestamps: true,
  sampled: 3,
  lastWasTimestamp: false,
  penultimateWasTimestamp: false,
  lastTimestamp: -1,
  maxInitialTimestampIndex: -1,
  ...over,
});
const flat = () => new Float32Array(VOCAB).fill(0);
const allowed = (x: Float32Array) => [...x.keys()].filter((i) => x[i] > -Infinity);

describe("Whisper's decoding rules", () => {
  it("suppresses the model's list and its control tokens everywhere", () => {
    const x = flat();
    applyWhisperRules(x, rule(), TOKENS, alwaysSuppressed(TOKENS));
    for (const t of [3, 11, 12, 13, 14]) expect(x[t]).toBe(-Infinity);
  });

  it("starts with a timestamp no later than the initial limit", () => {
    const x = flat();
    applyWhisperRules(x, rule({ sampled: 0, maxInitialTimestampIndex: 5 }), TOKENS, alwaysSuppressed(TOKENS));
    expect(allowed(x)).toEqual([15, 16, 17, 18, 19, 20]);
  });

  it("after a lone timestamp allows only a later-or-equal timestamp or the end; after a pair, only text", () => {
    const lone = flat();
    lone[10] = 5; // the end likelier than all timestamps together, so the mass rule does not force one
    applyWhisperRules(lone, rule({ lastWasTimestamp: true, penultimateWasTimestamp: false, lastTimestamp: 20 }), TOKENS, alwaysSuppressed(TOKENS));
    expect(allowed(lone)).toEqual([10, ...Array.from({ length: VOCAB - 20 }, (_, i) => 20 + i)]);
    const pair = flat();
    pair[5] = 3; // text must win somewhere for the mass rule not to force a timestamp
    applyWhisperRules(pair, rule({ lastWasTimestamp: true, penultimateWasTimestamp: true, lastTimestamp: 20 }), TOKENS, []);
    expect(allowed(pair).every((t) => t < 15)).toBe(true);
  });

  it("never goes back in time: timestamps below the last one (+1 after text) are out", () => {
    const x = flat();
    x[5] = 10; // text is likelier
    applyWhisperRules(x, rule({ lastTimestamp: 20 }), TOKENS, []);
    expect(allowed(x).filter((t) => t >= 15)[0]).toBe(21);
  });

  it("forces a timestamp when timestamps together outweigh the best text token", () => {
    const x = flat();
    x[5] = 2; // exp(2) = 7.4 < 25 timestamps of exp(0)
    applyWhisperRules(x, rule(), TOKENS, []);
    expect(allowed(x).every((t) => t >= 15)).toBe(true);
  });

  it("without timestamps, suppresses every timestamp", () => {
    const x = flat();
    applyWhisperRules(x, rule({ timestamps: false }), TOKENS, []);
    expect(allowed(x).every((t) => t < 15)).toBe(true);
  });

  it("picks the argmax at temperature 0 and reports its log-probability", () => {
    const x = new Float32Array([0, Math.log(3), -Infinity, 0]);
    const { token, logprob } = chooseToken(x, rule());
    expect(token).toBe(1);
    expect(logprob).toBeCloseTo(Math.log(3 / 5), 6);
  });

  it("samples reproducibly by seed at a temperature, only among allowed tokens", () => {
    const x = new Float32Array([0, 0, -Infinity, 0]);
    const a = chooseToken(x, rule({ temperature: 1, seed: 7 }));
    expect(chooseToken(x, rule({ temperature: 1, seed: 7 }))).toEqual(a);
    const seen = new Set(Array.from({ length: 50 }, (_, s) => chooseToken(x, rule({ temperature: 1, seed: s })).token));
    expect(seen.has(2)).toBe(false);
    expect(seen.size).toBe(3);
  });

  it("reads the no-speech probability and the likeliest language from raw logits", () => {
    const x = flat();
    x[13] = Math.log(VOCAB - 1); // p = (V-1) / (2(V-1))
    expect(noSpeechProbability(x, TOKENS)).toBeCloseTo(0.5, 6);
    const lang = likeliestLanguage(Float32Array.from([0, 2, 0]), { ...TOKENS, languages: { en: 0, de: 1, fr: 2 } });
    expect(lang?.code).toBe("de");
    expect(lang?.probability).toBeCloseTo(Math.exp(2) / (Math.exp(2) + 2), 6);
  });
});
