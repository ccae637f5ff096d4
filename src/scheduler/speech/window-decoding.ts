/**
 * Decoding one encoded 30 s window, the three ways faster-whisper does: greedy (one row), beam
 * search (one decoder row per beam; beams take over each other's self-attention caches), and, at a
 * temperature above 0, several sampled candidates side by side of which the likeliest wins. Each
 * model call goes through the speech engine, so the rows of concurrent transcriptions run together.
 */
import type { WhisperTokens } from "../../runtime/artifact/index.js";
import type { DecodeRowResult, WhisperSampling } from "../../runtime/speech-worker/protocol.js";
import { BeamSearch, type Hypothesis } from "./beam-search.js";
import type { SpeechEngine } from "./speech-engine.js";

/** How a window is decoded besides its temperature (faster-whisper's defaults in `WHISPER_DECODING`). */
export interface DecodingOptions {
  /** Beams at temperature 0; 1 is greedy decoding. */
  beamSize: number;
  /** Sampled candidates at a temperature above 0, the likeliest of which is kept. */
  bestOf: number;
  /** Beam search stops once beamSize × patience hypotheses have finished. */
  patience: number;
  /** Hypotheses are ranked by sum of log-probabilities / length^lengthPenalty. */
  lengthPenalty: number;
}

/** faster-whisper's defaults. */
export const WHISPER_DECODING: DecodingOptions = { beamSize: 5, bestOf: 5, patience: 1, lengthPenalty: 1 };

/** One window to decode: its rows, its prompt and the rules' parameters. */
export interface WindowRequest {
  /** The first of the transcription's rows; the window's encoding is in as many rows as the decoding takes. */
  slot: number;
  /** <|startofprev|> and the previous text, or nothing. */
  previous: number[];
  /** The start-of-transcript sequence. */
  start: number[];
  /** Most tokens one hypothesis may have. */
  limit: number;
  temperature: number;
  seed: number;
  /** Latest first timestamp, as a timestamp index (50 per second). */
  maxInitialTimestampIndex: number;
  signal?: AbortSignal;
}

/** The chosen hypothesis: its tokens (no <|endoftext|>), each token's log-probability (<|endoftext|>'s last, when it ended), and the no-speech probability. */
export interface WindowDecoding {
  tokens: number[];
  logprobs: number[];
  noSpeechProb: number;
}

export class WindowDecoder {
  constructor(
    private readonly engine: SpeechEngine,
    private readonly tokens: WhisperTokens,
  ) {}

  /** Greedy decoding (or one sampled candidate) in the request's first row. */
  async greedy(w: WindowRequest): Promise<WindowDecoding> {
    // The no-speech probability is read right after <|startoftranscript|>; the rest of the start sequence follows.
    const head = [...w.previous, w.start[0]];
    const rest = w.start.slice(1);
    let result = await this.engine.decode({ slot: w.slot, past: 0, tokens: head, sample: rest.length === 0 ? this.rule(w, [], w.seed) : null, noSpeech: true });
    const noSpeechProb = result.noSpeechProb ?? 0;
    if (rest.length > 0) result = await this.engine.decode({ slot: w.slot, past: head.length, tokens: rest, sample: this.rule(w, [], w.seed) });
    const sampled = await this.continueSampling(w, w.slot, result, head.length + rest.length, w.seed);
    return { ...sampled, noSpeechProb };
  }

  /** Beam search over `beamSize` rows from the request's first. */
  async beams(w: WindowRequest, options: DecodingOptions): Promise<WindowDecoding> {
    const search = new BeamSearch({ ...options, endOfText: this.tokens.endOfText });
    const candidates = search.candidatesPerStep;
    const head = [...w.previous, w.start[0]];
    const rest = w.start.slice(1);
    const first = rest.length === 0 ? { sample: this.rule(w, [], w.seed), candidates } : { sample: null };
    let result = await this.engine.decode({ slot: w.slot, past: 0, tokens: head, noSpeech: true, ...first });
    const noSpeechProb = result.noSpeechProb ?? 0;
    if (rest.length > 0) result = await this.engine.decode({ slot: w.slot, past: head.length, tokens: rest, sample: this.rule(w, [], w.seed), candidates });
    let length = head.length + rest.length;
    let continuations = [continuationsOf(result)];
    for (;;) {
      search.step(continuations, search.alive[0].tokens.length + 1 >= w.limit);
      if (search.done) break;
      w.signal?.throwIfAborted();
      const results = await Promise.all(
        search.alive.map((h, k) =>
          this.engine.decode({
            slot: w.slot + k,
            from: w.slot + search.parents[k],
            past: length,
            tokens: [h.tokens[h.tokens.length - 1]],
            sample: this.rule(w, h.tokens, w.seed),
            candidates,
          }),
        ),
      );
      length += 1;
      continuations = results.map(continuationsOf);
    }
    const best = search.best();
    return { tokens: best.tokens, logprobs: best.logprobs, noSpeechProb };
  }

  /**
   * `count` sampled candidates, `rows` at a time side by side (rows from the request's first),
   * each with its own seed; the one with the best length-normalized log-probability wins.
   */
  async sampled(w: WindowRequest, count: number, rows: number, options: DecodingOptions): Promise<WindowDecoding> {
    const all: WindowDecoding[] = [];
    for (let done = 0; done < count; ) {
      const side = Math.min(rows, count - done);
      all.push(...(await this.sampleSideBySide(w, side, done)));
      done += side;
    }
    const rank = new BeamSearch({ ...options, beamSize: 1, endOfText: this.tokens.endOfText });
    const scored = all.map((d) => ({ d, score: rank.normalized(hypothesisOf(d)) }));
    return scored.reduce((a, b) => (b.score > a.score ? b : a)).d;
  }

  /** `side` candidates in rows slot.. that share the prompt's cache: it is run once, then every row forks it. */
  private async sampleSideBySide(w: WindowRequest, side: number, firstCandidate: number): Promise<WindowDecoding[]> {
    const sequence = [...w.previous, ...w.start];
    const last = sequence.length - 1;
    const sot = w.previous.length;
    let noSpeechProb = 0;
    // The prompt up to its last token in the first row (split after <|startoftranscript|> to read the no-speech probability there).
    if (sot < last) {
      const r = await this.engine.decode({ slot: w.slot, past: 0, tokens: sequence.slice(0, sot + 1), sample: null, noSpeech: true });
      noSpeechProb = r.noSpeechProb ?? 0;
      if (sot + 1 < last) await this.engine.decode({ slot: w.slot, past: sot + 1, tokens: sequence.slice(sot + 1, last), sample: null });
    } else if (last > 0) {
      await this.engine.decode({ slot: w.slot, past: 0, tokens: sequence.slice(0, last), sample: null });
    }
    const seeds = Array.from({ length: side }, (_, c) => candidateSeed(w.seed, firstCandidate + c));
    const firsts = await Promise.all(
      seeds.map((seed, c) =>
        this.engine.decode({
          slot: w.slot + c,
          from: w.slot,
          past: last,
          tokens: [sequence[last]],
          sample: this.rule(w, [], seed),
          noSpeech: c === 0 && sot === last,
        }),
      ),
    );
    if (sot === last) noSpeechProb = firsts[0].noSpeechProb ?? 0;
    const decoded = await Promise.all(firsts.map((r, c) => this.continueSampling(w, w.slot + c, r, sequence.length, seeds[c])));
    return decoded.map((d) => ({ ...d, noSpeechProb }));
  }

  /** Samples one row's hypothesis to its end, from the result that chose its first token. */
  private async continueSampling(
    w: WindowRequest,
    slot: number,
    result: DecodeRowResult,
    length: number,
    seed: number,
  ): Promise<Omit<WindowDecoding, "noSpeechProb">> {
    const tokens: number[] = [];
    const logprobs: number[] = [];
    while (result.token !== undefined) {
      logprobs.push(result.logprob ?? 0);
      if (result.token === this.tokens.endOfText || tokens.length + 1 >= w.limit) {
        if (result.token !== this.tokens.endOfText) tokens.push(result.token);
        break;
      }
      tokens.push(result.token);
      w.signal?.throwIfAborted();
      result = await this.engine.decode({ slot, past: length, tokens: [result.token], sample: this.rule(w, tokens, seed) });
      length += 1;
    }
    return { tokens, logprobs };
  }

  /** Whisper's rules for the token after `tokens` (the hypothesis so far). */
  private rule(w: WindowRequest, tokens: readonly number[], seed: number): WhisperSampling {
    const begin = this.tokens.timestampBegin;
    const n = tokens.length;
    let lastTimestamp = -1;
    for (let i = n - 1; i >= 0 && lastTimestamp < 0; i--) if (tokens[i] >= begin) lastTimestamp = tokens[i];
    return {
      temperature: w.temperature,
      seed,
      timestamps: true,
      sampled: n,
      lastWasTimestamp: n >= 1 && tokens[n - 1] >= begin,
      penultimateWasTimestamp: n < 2 || tokens[n - 2] >= begin,
      lastTimestamp,
      maxInitialTimestampIndex: w.maxInitialTimestampIndex,
    };
  }
}

function continuationsOf(r: DecodeRowResult): { tokens: number[]; logprobs: number[] } {
  if (!r.candidates) throw new Error("the speech worker returned no candidates for a beam");
  return r.candidates;
}

function hypothesisOf(d: WindowDecoding): Hypothesis {
  return { tokens: d.tokens, logprobs: d.logprobs, score: d.logprobs.reduce((a, b) => a + b, 0) };
}

/** Candidate 0 keeps the attempt's seed (a single candidate samples as greedy decoding at that temperature does). */
function candidateSeed(seed: number, candidate: number): number {
  return candidate === 0 ? seed : (seed + candidate * 0x9e3779b1) >>> 0;
}
