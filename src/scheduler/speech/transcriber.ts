/**
 * One transcription, window by window (openai-whisper's `transcribe` loop): encode a 30 s window,
 * decode it with Whisper's prompt and rules, fall back to higher temperatures when the text
 * repeats itself or is unlikely, skip silence, split by timestamps, seek to the last closing
 * timestamp, and carry the text over as the next window's prompt. Every model call goes through
 * the speech engine, which decides when it runs.
 */
import { deflateSync } from "node:zlib";
import { contentFrames, logMelAsync, melWindow } from "../../runtime/audio/index.js";
import { HOP_LENGTH, SAMPLE_RATE, WINDOW_FRAMES, type WhisperShape, type WhisperTokens } from "../../runtime/artifact/index.js";
import { languageName } from "../../runtime/speech/index.js";
import type { Tokenizer } from "../../runtime/text/index.js";
import { joinSegmentTexts, splitWindow } from "./segments.js";
import { textTokenLogprobs } from "./token-logprobs.js";
import type { SpeechEngine } from "./speech-engine.js";
import type { TranscribeOptions, Transcript, TranscriptSegment, TranscriptWord } from "./types.js";
import { type DecodingOptions, WHISPER_DECODING, WindowDecoder, type WindowDecoding, type WindowRequest } from "./window-decoding.js";
import { wordsOfWindow } from "./words.js";

/** Whisper's decoding thresholds (openai-whisper and faster-whisper defaults). */
export const WHISPER_DEFAULTS = {
  /** A window whose text compresses better than this (gzip ratio) repeats itself: try a higher temperature. */
  compressionRatioThreshold: 2.4,
  /** A window whose mean token log-probability is below this is unlikely: try a higher temperature. */
  logprobThreshold: -1,
  /** With <|nocaptions|> likelier than this (and an unlikely text) the window is silence. */
  noSpeechThreshold: 0.6,
  /** Temperature step of the fallback, up to 1. */
  temperatureStep: 0.2,
  /** The first timestamp is at most this many seconds into a window. */
  maxInitialTimestamp: 1,
  /** Above this temperature the window's text is not used as the next one's prompt. */
  promptResetTemperature: 0.5,
} as const;

interface Attempt {
  tokens: number[];
  logprobs: number[];
  temperature: number;
  avgLogprob: number;
  compressionRatio: number;
  noSpeechProb: number;
  text: string;
}

/** The text tokens a window's decoding follows: the hotwords (every window), then the text so far (or the request's prompt). */
interface WindowPrompt {
  hotwords: number[];
  prompt: number[];
}

/** What a window's decoding is conditioned on besides the audio: the language (absent: English) and the task. */
interface Conditioning {
  language: string | undefined;
  task: "transcribe" | "translate";
}

export interface TranscriberModel {
  shape: WhisperShape;
  tokens: WhisperTokens;
  tokenizer: Tokenizer;
  multilingual: boolean;
}

export class Transcriber {
  private readonly sampleLength: number;
  private readonly decoder: WindowDecoder;
  private readonly decoding: DecodingOptions;

  constructor(
    private readonly engine: SpeechEngine,
    private readonly model: TranscriberModel,
    /** Defaults of every transcription (faster-whisper's when not given); `beamSize` at most the engine's rows per transcription. */
    decoding: Partial<DecodingOptions> = {},
  ) {
    this.sampleLength = Math.floor(model.shape.textContext / 2);
    this.decoder = new WindowDecoder(engine, model.tokens);
    this.decoding = { ...WHISPER_DECODING, beamSize: Math.min(WHISPER_DECODING.beamSize, engine.rowsPerTranscription), ...decoding };
    this.checkBeamSize(this.decoding.beamSize);
  }

  /** The widest beam a transcription may ask for: the rows the engine gives each. */
  get maxBeamSize(): number {
    return this.engine.rowsPerTranscription;
  }

  async transcribe(samples: Float32Array, options: TranscribeOptions = {}): Promise<Transcript> {
    const signal = options.signal;
    const duration = samples.length / SAMPLE_RATE;
    const decoding: DecodingOptions = { ...this.decoding, ...(options.beamSize !== undefined ? { beamSize: options.beamSize } : {}) };
    this.checkBeamSize(decoding.beamSize);
    const temperature = options.temperature ?? 0;
    return this.engine.withSlot(async (slot) => {
      // Computed once admitted, so queued transcriptions hold only their samples.
      const mel = await logMelAsync(samples, this.model.shape.melBins, signal);
      const frames = contentFrames(mel);
      const segments: TranscriptSegment[] = [];
      let language = options.language ?? (this.model.multilingual ? undefined : "en");
      const task = options.task ?? "transcribe";
      const history: number[] = options.prompt?.trim() ? this.model.tokenizer.encode(" " + options.prompt.trim()) : [];
      // faster-whisper keeps up to 223 tokens of them; kiln half that, so that with the text so far the window keeps room to decode.
      const hotwords = options.hotwords?.trim() ? this.model.tokenizer.encode(" " + options.hotwords.trim()).slice(0, this.sampleLength >> 1) : [];
      let promptFrom = 0;
      let seek = 0;
      while (seek < frames) {
        signal?.throwIfAborted();
        const windowFrames = Math.min(WINDOW_FRAMES, frames - seek);
        const offset = (seek * HOP_LENGTH) / SAMPLE_RATE;
        // Once per window: every row of the transcription (its beams, its candidates at a fallback) reads it.
        await this.engine.encode({ slot, mel: melWindow(mel, this.model.shape.melBins, seek) });
        signal?.throwIfAborted();
        if (language === undefined) language = await this.detectLanguage(slot);
        const prompt = history.slice(promptFrom);
        const attempt = await this.decodeWithFallback(slot, seek, { hotwords, prompt }, { language, task }, temperature, decoding, signal);
        if (isSilence(attempt)) {
          seek += windowFrames;
          continue;
        }
        const split = splitWindow(attempt.tokens, this.model.tokens.timestampBegin, windowFrames, (windowFrames * HOP_LENGTH) / SAMPLE_RATE);
        let at = 0;
        const found = split.segments
          .map((s) => this.segment(segments.length, seek, offset, s, attempt, options.logprobs ? attempt.logprobs.slice(at, (at += s.tokens.length)) : null))
          .filter((s) => s.text.trim() !== "" && s.end > s.start);
        found.forEach((s, i) => (s.id = segments.length + i));
        if (options.wordTimestamps && found.length > 0) await this.addWords(slot, found, attempt, { language, task }, windowFrames, offset);
        segments.push(...found);
        for (const s of found) history.push(...s.tokens.filter((t) => t < this.model.tokens.endOfText));
        if (attempt.temperature > WHISPER_DEFAULTS.promptResetTemperature) promptFrom = history.length;
        seek += split.advance;
        if (found.length > 0) options.onSegments?.(found);
      }
      return { task, language: languageName(language ?? "en"), duration, text: joinSegmentTexts(segments), segments };
    }, signal);
  }

  private checkBeamSize(beamSize: number): void {
    if (!Number.isInteger(beamSize) || beamSize < 1 || beamSize > this.maxBeamSize)
      throw new RangeError(`the beam size is a whole number from 1 to ${this.maxBeamSize} here, not ${beamSize}`);
  }

  private segment(
    id: number,
    seek: number,
    offset: number,
    piece: { tokens: number[]; start: number; end: number },
    attempt: Attempt,
    logprobs: number[] | null,
  ): TranscriptSegment {
    const textTokens = piece.tokens.filter((t) => t < this.model.tokens.endOfText);
    return {
      ...(logprobs ? { logprobs: textTokenLogprobs(this.model.tokenizer, piece.tokens, logprobs, this.model.tokens.endOfText) } : {}),
      id,
      seek,
      start: round2(offset + piece.start),
      end: round2(offset + piece.end),
      text: this.model.tokenizer.decode(textTokens),
      tokens: piece.tokens,
      temperature: attempt.temperature,
      avgLogprob: attempt.avgLogprob,
      compressionRatio: attempt.compressionRatio,
      noSpeechProb: attempt.noSpeechProb,
    };
  }

  /** The start-of-transcript sequence: <|startoftranscript|>, then language and task on multilingual models. */
  private startSequence({ language, task }: Conditioning): number[] {
    const t = this.model.tokens;
    if (!this.model.multilingual) return [t.startOfTranscript];
    const lang = t.languages[language ?? "en"] ?? t.languages.en;
    const taskToken = task === "translate" ? t.translate : t.transcribe;
    return [t.startOfTranscript, lang, taskToken ?? t.startOfTranscript].filter((x) => x !== undefined && x !== null);
  }

  private async detectLanguage(slot: number): Promise<string> {
    const r = await this.engine.decode({ slot, past: 0, tokens: [this.model.tokens.startOfTranscript], sample: null, detectLanguage: true });
    return r.language?.code ?? "en";
  }

  /**
   * Decodes the window at rising temperatures until an attempt passes Whisper's checks. When none
   * does, the likeliest attempt that does not repeat itself wins (faster-whisper's choice), not the
   * last, most random one.
   */
  private async decodeWithFallback(
    slot: number,
    seek: number,
    prompt: WindowPrompt,
    conditioning: Conditioning,
    temperature: number,
    decoding: DecodingOptions,
    signal?: AbortSignal,
  ): Promise<Attempt> {
    const attempts: Attempt[] = [];
    for (let t = temperature, i = 0; t <= 1 + 1e-9; t += WHISPER_DEFAULTS.temperatureStep, i++) {
      signal?.throwIfAborted();
      // Seeded by position, so the same audio gives the same transcript (streamed or not).
      const attempt = await this.decodeWindow(slot, prompt, conditioning, Math.round(t * 100) / 100, seek * 7 + i, decoding, signal);
      if (!needsFallback(attempt)) return attempt;
      attempts.push(attempt);
    }
    const plausible = attempts.filter((a) => a.compressionRatio <= WHISPER_DEFAULTS.compressionRatioThreshold);
    const best = (plausible.length > 0 ? plausible : attempts).reduce((a, b) => (b.avgLogprob > a.avgLogprob ? b : a));
    // The temperature reached decides whether the next window is prompted with this text.
    return { ...best, temperature: attempts[attempts.length - 1].temperature };
  }

  /** One decoding attempt of the window encoded for the transcription's rows, which start at `slot`. */
  private async decodeWindow(
    slot: number,
    { hotwords, prompt }: WindowPrompt,
    conditioning: Conditioning,
    temperature: number,
    seed: number,
    decoding: DecodingOptions,
    signal?: AbortSignal,
  ): Promise<Attempt> {
    const t = this.model.tokens;
    const previous = prompt.length > 0 || hotwords.length > 0 ? [t.startOfPrev, ...hotwords, ...prompt.slice(-(this.sampleLength - 1))] : [];
    const start = this.startSequence(conditioning);
    const request: WindowRequest = {
      slot,
      previous,
      start,
      limit: Math.min(this.sampleLength, this.model.shape.textContext - previous.length - start.length - 1),
      temperature,
      seed,
      maxInitialTimestampIndex: Math.round(WHISPER_DEFAULTS.maxInitialTimestamp / 0.02),
      signal,
    };
    const rows = this.rowsFor(temperature, decoding);
    let decoded: WindowDecoding;
    if (temperature > 0 && decoding.bestOf > 1) decoded = await this.decoder.sampled(request, decoding.bestOf, rows, decoding);
    else if (temperature === 0 && decoding.beamSize > 1) decoded = await this.decoder.beams(request, decoding);
    else decoded = await this.decoder.greedy(request);
    const { tokens, logprobs, noSpeechProb } = decoded;
    const text = this.model.tokenizer.decode(tokens.filter((x) => x < t.endOfText));
    const sum = logprobs.reduce((a, b) => a + b, 0);
    return { tokens, logprobs, temperature, avgLogprob: sum / (tokens.length + 1), compressionRatio: compressionRatio(text), noSpeechProb, text };
  }

  /** Rows an attempt decodes in at once: its beams, or as many of its candidates as the transcription's rows hold. */
  private rowsFor(temperature: number, decoding: DecodingOptions): number {
    if (temperature > 0) return Math.min(decoding.bestOf, this.engine.rowsPerTranscription);
    return decoding.beamSize;
  }

  private async addWords(
    slot: number,
    found: TranscriptSegment[],
    attempt: Attempt,
    conditioning: Conditioning,
    frames: number,
    offset: number,
  ): Promise<void> {
    const t = this.model.tokens;
    const textTokens = found.flatMap((s) => s.tokens.filter((x) => x < t.endOfText));
    if (textTokens.length === 0) return;
    const { starts } = await this.engine.align({ slot, prefix: [...this.startSequence(conditioning), t.noTimestamps], textTokens, frames });
    const probabilities = attempt.tokens
      .map((tok, i) => ({ tok, p: Math.exp(attempt.logprobs[i] ?? 0) }))
      .filter((x) => x.tok < t.endOfText)
      .map((x) => x.p);
    let at = 0;
    for (const s of found) {
      const count = s.tokens.filter((x) => x < t.endOfText).length;
      const words: TranscriptWord[] = wordsOfWindow(
        this.model.tokenizer,
        textTokens.slice(at, at + count),
        starts.slice(at, at + count + 1),
        probabilities.slice(at, at + count),
      ).map((w) => ({ ...w, start: clamp(round2(offset + w.start), s.start, s.end), end: clamp(round2(offset + w.end), s.start, s.end) }));
      s.words = words;
      at += count;
    }
  }
}

function needsFallback(a: Attempt): boolean {
  if (isSilence(a)) return false;
  return a.compressionRatio > WHISPER_DEFAULTS.compressionRatioThreshold || a.avgLogprob < WHISPER_DEFAULTS.logprobThreshold;
}

function isSilence(a: Attempt): boolean {
  return a.noSpeechProb > WHISPER_DEFAULTS.noSpeechThreshold && a.avgLogprob < WHISPER_DEFAULTS.logprobThreshold;
}

/** How much the text compresses (zlib), Whisper's repetition detector. */
export function compressionRatio(text: string): number {
  const bytes = Buffer.from(text, "utf8");
  if (bytes.length === 0) return 0;
  return bytes.length / deflateSync(bytes).length;
}

const round2 = (x: number) => Math.round(x * 100) / 100;
const clamp = (x: number, lo: number, hi: number) => Math.min(hi, Math.max(lo, x));
