/**
 * Beam search exactness: kiln's window decoder (engine batching, one row per beam, beams taking over
 * each other's caches, the worker's rules and candidates) against a reference written straight from
 * CTranslate2's `BeamSearch::search` (what faster-whisper runs), over a deterministic fake decoder
 * whose logits depend on the whole token history of a row, so a wrong cache hand-over shows.
 */
import { describe, expect, it } from "vitest";
import type { WhisperTokens } from "../../../../src/runtime/artifact/index.js";
import type { DecodeRequest, DecodeRowResult, WhisperSampling } from "../../../../src/runtime/speech-worker/protocol.js";
import { alwaysSuppressed, applyWhisperRules, readRow } from "../../../../src/runtime/speech/whisper-rules.js";
import { SpeechEngine, type SpeechRunner } from "../../../../src/scheduler/speech/index.js";
import { type DecodingOptions, WindowDecoder, type WindowRequest } from "../../../../src/scheduler/speech/window-decoding.js";

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
const VOCAB = 15 + 60;
const SUPPRESSED = alwaysSuppressed(TOKENS);

/**
 * Logits of the token after `history`: pseudo-random per history, on a coarse grid (so equal logits,
 * and ties in the ranking, happen), with <|endoftext|> likelier as the history grows.
 */
function fakeLogits(history: readonly number[], salt: number): Float32Array {
  let h = 2166136261 ^ salt;
  for (const t of history) h = Math.imul(h ^ (t + 1), 16777619);
  const logits = new Float32Array(VOCAB);
  for (let i = 0; i < VOCAB; i++) {
    h = Math.imul(h ^ (h >>> 15), 2246822519) ^ i;
    h = Math.imul(h ^ (h >>> 13), 3266489917);
    logits[i] = ((h >>> 0) % 8) * 0.5;
  }
  logits[TOKENS.endOfText] += 0.4 * history.length - 3;
  return logits;
}

/** A fake worker: each slot holds its token history; a row continues from the first `past` tokens of `from` as every slot was before the call. */
function fakeRunner(slots: number, salt: number): SpeechRunner & { rowsPerCall: number[] } {
  const histories: number[][] = Array.from({ length: slots }, () => []);
  const rowsPerCall: number[] = [];
  return {
    slots,
    rowsPerCall,
    async encode() {
      return { runMs: 0 };
    },
    async align() {
      return { starts: [], runMs: 0 };
    },
    async decode(r: Omit<DecodeRequest, "op">) {
      const before = histories.map((x) => [...x]);
      rowsPerCall.push(r.rows.filter((x) => x !== null).length);
      const rows = r.rows.map((row, i): DecodeRowResult | null => {
        if (!row) return null;
        const slot = r.firstSlot + i;
        const source = before[row.from ?? slot];
        if (row.past > source.length) throw new RangeError(`slot ${row.from ?? slot} holds ${source.length} positions, not ${row.past}`);
        histories[slot] = [...source.slice(0, row.past), ...row.tokens];
        return readRow(fakeLogits(histories[slot], salt), row, TOKENS, SUPPRESSED);
      });
      return { rows, runMs: 0 };
    },
  };
}

interface RefHypothesis {
  tokens: number[];
  score: number;
}

/** Whisper's rules for the token after `tokens`, derived here on their own. */
function referenceRule(tokens: readonly number[]): WhisperSampling {
  const stamps = tokens.filter((t) => t >= TOKENS.timestampBegin);
  const n = tokens.length;
  return {
    temperature: 0,
    seed: 0,
    timestamps: true,
    sampled: n,
    lastWasTimestamp: n > 0 && tokens[n - 1] >= TOKENS.timestampBegin,
    penultimateWasTimestamp: n < 2 || tokens[n - 2] >= TOKENS.timestampBegin,
    lastTimestamp: stamps.length ? stamps[stamps.length - 1] : -1,
    maxInitialTimestampIndex: 50,
  };
}

function logSoftmax(logits: Float32Array): number[] {
  let max = -Infinity;
  for (const x of logits) if (x > max) max = x;
  let sum = 0;
  for (const x of logits) sum += Math.exp(x - max);
  const logZ = max + Math.log(sum);
  return Array.from(logits, (x) => x - logZ);
}

/**
 * CTranslate2's beam search, step by step as its `BeamSearch::search` reads: the first step expands
 * the one start hypothesis; every step takes the top 2×beam of (beam score + log-probability) over
 * all beams and tokens (flattened index order on ties); of the first `beam`, those ending are
 * registered and replaced by the next non-ending secondary candidates; stop at round(beam×patience)
 * finished or the last step; rank by score / length^lengthPenalty.
 */
function referenceBeamSearch(prompt: number[], salt: number, o: DecodingOptions & { limit: number }): RefHypothesis {
  const numCandidates = 2 * o.beamSize;
  const maxCandidates = Math.round(o.beamSize * o.patience);
  let alive: RefHypothesis[] = [{ tokens: [], score: 0 }];
  const finished: RefHypothesis[] = [];
  for (let step = 0; ; step++) {
    const isLast = step + 1 >= o.limit;
    const flat: Array<{ beam: number; token: number; score: number }> = [];
    alive.forEach((h, beam) => {
      const logits = fakeLogits([...prompt, ...h.tokens], salt);
      applyWhisperRules(logits, referenceRule(h.tokens), TOKENS, SUPPRESSED);
      logSoftmax(logits).forEach((lp, token) => flat.push({ beam, token, score: h.score + lp }));
    });
    // Stable sort on score keeps the flattened (beam, token) order among equals.
    const top = flat.sort((a, b) => (b.score === a.score ? 0 : b.score > a.score ? 1 : -1)).slice(0, numCandidates);
    const next: typeof top = [];
    let secondary = o.beamSize;
    for (let k = 0; k < o.beamSize; k++) {
      let chosen = top[k];
      if (top[k].token === TOKENS.endOfText || isLast) {
        const parent = alive[top[k].beam];
        finished.push({ tokens: top[k].token === TOKENS.endOfText ? parent.tokens : [...parent.tokens, top[k].token], score: top[k].score });
        for (let j = secondary; j < numCandidates; j++) {
          if (top[j].token !== TOKENS.endOfText) {
            chosen = top[j];
            secondary = j + 1;
            break;
          }
        }
      }
      next.push(chosen);
    }
    if (isLast || finished.length >= maxCandidates) break;
    alive = next.map((c) => ({ tokens: [...alive[c.beam].tokens, c.token], score: c.score }));
  }
  const norm = (h: RefHypothesis) => (h.tokens.length === 0 ? -Infinity : h.score / Math.pow(h.tokens.length, o.lengthPenalty));
  return finished.reduce((best, h) => (norm(h) > norm(best) ? h : best));
}

function windowRequest(slot: number, limit: number): WindowRequest {
  return { slot, previous: [], start: [TOKENS.startOfTranscript], limit, temperature: 0, seed: 0, maxInitialTimestampIndex: 50 };
}

describe("beam search", () => {
  const cases: Array<DecodingOptions & { limit: number }> = [
    { beamSize: 5, bestOf: 5, patience: 1, lengthPenalty: 1, limit: 40 },
    { beamSize: 2, bestOf: 5, patience: 1, lengthPenalty: 1, limit: 40 },
    { beamSize: 3, bestOf: 5, patience: 2, lengthPenalty: 1, limit: 40 },
    { beamSize: 4, bestOf: 5, patience: 1, lengthPenalty: 0, limit: 40 },
    { beamSize: 5, bestOf: 5, patience: 1.5, lengthPenalty: 1, limit: 6 },
  ];
  for (const o of cases) {
    it(`equals CTranslate2's tokens and score (beam ${o.beamSize}, patience ${o.patience}, length penalty ${o.lengthPenalty}, at most ${o.limit} tokens)`, async () => {
      for (let salt = 0; salt < 12; salt++) {
        const runner = fakeRunner(o.beamSize, salt);
        const decoder = new WindowDecoder(new SpeechEngine(runner, { name: "fake", rowsPerTranscription: o.beamSize }), TOKENS);
        const got = await decoder.beams(windowRequest(0, o.limit), o);
        const want = referenceBeamSearch([TOKENS.startOfTranscript], salt, o);
        expect(got.tokens, `salt ${salt}`).toEqual(want.tokens);
        expect(got.logprobs.reduce((a, b) => a + b, 0)).toBeCloseTo(want.score, 9);
      }
    });
  }

  it("runs the beams of concurrent transcriptions as rows of the same decoder calls, each exact", async () => {
    const o = { beamSize: 5, bestOf: 5, patience: 1, lengthPenalty: 1 };
    const salt = 7;
    const runner = fakeRunner(15, salt);
    const engine = new SpeechEngine(runner, { name: "fake", rowsPerTranscription: 5 });
    const decoder = new WindowDecoder(engine, TOKENS);
    // Three windows with different prompts, so their hypotheses differ.
    const prompts = [[], [1, 2], [3]];
    const got = await Promise.all(
      prompts.map((p, i) => {
        const previous = p.length ? [TOKENS.startOfPrev, ...p] : [];
        return decoder.beams({ ...windowRequest(i * 5, 40), previous }, o);
      }),
    );
    for (const [i, p] of prompts.entries()) {
      const previous = p.length ? [TOKENS.startOfPrev, ...p] : [];
      expect(got[i].tokens).toEqual(referenceBeamSearch([...previous, TOKENS.startOfTranscript], salt, { ...o, limit: 40 }).tokens);
    }
    expect(Math.max(...runner.rowsPerCall)).toBe(15);
  });

  it("keeps the likeliest of best_of sampled candidates, each sampled as on its own", async () => {
    const o = { beamSize: 1, bestOf: 4, patience: 1, lengthPenalty: 1 };
    const request = { ...windowRequest(0, 40), temperature: 0.8, seed: 3 };
    const together = await new WindowDecoder(new SpeechEngine(fakeRunner(4, 1), { name: "fake", rowsPerTranscription: 4 }), TOKENS).sampled(request, 4, 4, o);
    // Two rows at a time gives the same candidates, so the same winner.
    const inTwos = await new WindowDecoder(new SpeechEngine(fakeRunner(2, 1), { name: "fake", rowsPerTranscription: 2 }), TOKENS).sampled(request, 4, 2, o);
    expect(inTwos).toEqual(together);
    const single = await new WindowDecoder(new SpeechEngine(fakeRunner(1, 1), { name: "fake" }), TOKENS).sampled(request, 1, 1, o);
    const greedyAtT = await new WindowDecoder(new SpeechEngine(fakeRunner(1, 1), { name: "fake" }), TOKENS).greedy(request);
    expect(single.tokens).toEqual(greedyAtT.tokens);
    const score = (d: { tokens: number[]; logprobs: number[] }) => d.logprobs.reduce((a, b) => a + b, 0) / d.tokens.length;
    expect(score(together)).toBeGreaterThanOrEqual(score(single));
  });
});
