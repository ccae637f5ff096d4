/**
 * Messages across the speech worker's thread boundary: one per model call, as for text. The speech
 * engine decides which transcriptions run; the worker runs the encoder or the decoder for them,
 * applies Whisper's decoding rules beside sampling, and answers with one small result per row.
 */
import type { WhisperShape, WhisperTokens } from "../artifact/index.js";
import type { ComputeDevice } from "../device/index.js";

/** Options of one speech session (what `kiln serve` chooses per loaded speech model). */
export interface SpeechSessionOptions {
  /** Where the encoder and decoder run. Default "cpu". */
  device?: ComputeDevice;
  /** ONNX Runtime intra-op threads. Default 2. */
  threads?: number;
  /**
   * Decoder rows: self-attention KV slots. A transcription takes as many as it decodes hypotheses at
   * once (its beams, or its sampled candidates). Default 4.
   */
  slots?: number;
  /**
   * Consecutive slots that share one encoded window (a transcription's rows): slots are grouped in
   * runs of this many, each run holding one window's cross-attention keys and values, which all its
   * rows read. A divisor of `slots`. Default 1.
   */
  rowsPerWindow?: number;
  /**
   * Bytes free on the GPU adapter at load, when known: a session whose weights, decoder cache,
   * windows and encoder work would not fit is refused before it allocates (AdapterMemoryError).
   * Ignored on the CPU. Default: not checked.
   */
  adapterFreeBytes?: number;
  /**
   * Write onnxruntime profiles (JSON) of the encoder and the decoder, each under this path prefix
   * with "-encoder" or "-decoder" appended; see `SpeechSession.endProfiling`. Default: off.
   */
  profileFilePrefix?: string;
}

export interface SpeechLoadRequest {
  op: "load";
  artifactDir: string;
  options: SpeechSessionOptions;
}

export interface SpeechLoadResult {
  artifactId: string;
  slots: number;
  shape: WhisperShape;
  tokens: WhisperTokens;
}

/**
 * Runs the encoder on one 30 s window and keeps its cross-attention keys and values for the run of
 * `rowsPerWindow` slots that holds `slot`: every row there reads it.
 */
export interface EncodeRequest {
  op: "encode";
  slot: number;
  /** Log-mel features [melBins, 3000]. */
  mel: Float32Array;
}

export interface EncodeResult {
  runMs: number;
}

/**
 * How one row's next token is chosen: Whisper's rules, carried as the few facts they need about the
 * tokens sampled so far in this window (deltas, not the history).
 */
export interface WhisperSampling {
  /** 0 = greedy; else softmax sampling at this temperature. */
  temperature: number;
  /** Seed of this row's random draw (temperature > 0). */
  seed: number;
  /** Timestamp tokens are predicted (else <|notimestamps|> was given). */
  timestamps: boolean;
  /** How many tokens were sampled so far in this window (0: the first sample). */
  sampled: number;
  /** The last sampled token was a timestamp. */
  lastWasTimestamp: boolean;
  /** The one before it was a timestamp (true when fewer than two were sampled, as Whisper has it). */
  penultimateWasTimestamp: boolean;
  /** The latest timestamp token sampled so far, or -1. */
  lastTimestamp: number;
  /** Latest timestamp index allowed first (1 s = 50), or -1 for no limit. */
  maxInitialTimestampIndex: number;
}

/** One row of a decoder call: the call's `tokensPerRow` new tokens for the slot, after keeping `past` cached positions. */
export interface DecodeRow {
  slot: number;
  /** Cached positions of the slot that this row continues from (the rest is forgotten). */
  past: number;
  /**
   * The slot whose first `past` cached positions this row continues from, as that slot held them
   * before this call (a beam taking over another beam's cache). Default: the row's own slot.
   */
  from?: number;
  tokens: number[];
  /** Choose the next token after the last one; null to only run (prompt prefix, or an idle row). */
  sample: WhisperSampling | null;
  /**
   * Instead of choosing a token, report the `candidates` likeliest tokens under the rules, likeliest
   * first (beam search); `sample` must be set, for the rules.
   */
  candidates?: number;
  /** Report the probability of <|nocaptions|> after the last token (it must be <|startoftranscript|>). */
  noSpeech?: boolean;
  /** Report the most likely language token after the last token (multilingual models). */
  detectLanguage?: boolean;
}

/**
 * One decoder call over consecutive slots `firstSlot .. firstSlot + rows.length - 1`, every row with
 * the same number of new tokens. A row that only fills a gap (`idle`) keeps its cache as it was.
 */
export interface DecodeRequest {
  op: "decode";
  firstSlot: number;
  rows: Array<DecodeRow | null>;
  tokensPerRow: number;
}

export interface DecodeRowResult {
  /** The chosen token and its log-probability under the rules' distribution (temperature 1). */
  token?: number;
  logprob?: number;
  /** When `candidates` was asked: the likeliest tokens and their log-probabilities, likeliest first (ties: lower id first). */
  candidates?: { tokens: number[]; logprobs: number[] };
  noSpeechProb?: number;
  /** Language code and its probability. */
  language?: { code: string; probability: number };
}

export interface DecodeResult {
  rows: Array<DecodeRowResult | null>;
  runMs: number;
}

/**
 * Word timing of a decoded window: runs the decoder over the whole window's tokens in `slot` (whose
 * self-attention cache it overwrites) and aligns text tokens to audio frames by dynamic time warping
 * over the alignment heads' cross-attention.
 */
export interface AlignRequest {
  op: "align";
  slot: number;
  /** The window's start-of-transcript sequence followed by <|notimestamps|>. */
  prefix: number[];
  /** The window's text tokens (no timestamps), in order. */
  textTokens: number[];
  /** Mel frames of real audio in the window (at most 3000). */
  frames: number;
}

export interface AlignResult {
  /** When each text token starts, and then the end of the last, in seconds from the window's start (text tokens + 1 values). */
  starts: number[];
  runMs: number;
}

export type SpeechWorkerRequest = SpeechLoadRequest | EncodeRequest | DecodeRequest | AlignRequest;
