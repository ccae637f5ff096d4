/**
 * The scheduler's vocabulary: what a caller asks an engine for (a {@link GenerationRequest}), and
 * what comes back ({@link GenerationEvent}s). The shapes are batch-ready: a request may ask for
 * several choices and every event names its choice, whatever the engine does underneath (one
 * sequence at a time in the serial engine, continuous batching in the batch engine).
 */
import type { FinishReason as RuntimeFinishReason } from "../runtime/generate.js";
import type { SamplingParams } from "../runtime/sampling/index.js";
import type { EngineStatsReader } from "./engine-stats.js";

export type { SamplingParams } from "../runtime/sampling/index.js";
export type { ChatMessage, ContentPart } from "../runtime/text/index.js";

/** Why a choice ended: an end-of-turn token or a stop string ("stop"), max tokens or the context ("length"), or its caller went away ("cancelled"). */
export type FinishReason = RuntimeFinishReason;

/** One generation job: a tokenized prompt and how to continue it. */
export interface GenerationRequest {
  /** Prompt token ids, already rendered and tokenized (at least one, shorter than the context). */
  promptIds: number[];
  /** Most new tokens per choice (>= 1). Generation also ends at the model's context length. */
  maxTokens: number;
  /** Sampling parameters, as in the OpenAI API (nulls mean defaults). */
  sampling: SamplingParams;
  /**
   * Stop strings: generation of a choice ends at the first occurrence of any of them in its text,
   * and that text is never emitted. Empty strings are ignored. Default none.
   */
  stop?: readonly string[];
  /**
   * Number of choices to generate from the same prompt. Default 1. With a seed, every choice is
   * reproducible yet different: the batch engine gives choice i the seed's sampler stream i (so
   * choice 0 is what n = 1 gives), the serial engine uses seed + i.
   */
  n?: number;
  /** Report log probabilities of each emitted token, with this many alternatives (0..20). Default: none. */
  logprobs?: { top: number };
}

/** The log probability of one token, with the text it decodes to (the OpenAI `logprobs.content` entry). */
export interface TokenLogprob {
  token: string;
  logprob: number;
  /** The token's UTF-8 bytes (a token may hold part of a character). */
  bytes: number[];
}

export interface EmittedTokenLogprob extends TokenLogprob {
  /** The most likely alternatives at this position, most likely first. */
  top: TokenLogprob[];
}

/**
 * Some text of one choice. Emitted once per generated token, so `text` may be "" while text is
 * held back (a partial UTF-8 character, or a possible start of a stop string).
 */
export interface DeltaEvent {
  type: "delta";
  choice: number;
  text: string;
  /** Tokens generated so far for this choice, including those whose text is held back. */
  completionTokens: number;
  /** Log probabilities of the tokens whose text this delta completes (when asked for). */
  logprobs?: EmittedTokenLogprob[];
}

/** The end of one choice. */
export interface FinishEvent {
  type: "finish";
  choice: number;
  reason: FinishReason;
  /** Tokens generated for this choice (a matched stop string's tokens included, end-of-turn token excluded). */
  completionTokens: number;
  /** Seconds from the first token to the last, for time-per-output-token. */
  decodeSeconds: number;
}

export type GenerationEvent = DeltaEvent | FinishEvent;

/** A running or waiting request: iterate for its events; stop iterating (or abort its signal) to cancel it. */
export type GenerationStream = AsyncIterable<GenerationEvent>;

/** What every engine offers, whatever its scheduling. */
export interface Engine {
  /**
   * Queues a request and returns its event stream. Throws `OverloadedError` at once when the
   * waiting queue is full, and `EngineClosedError` once the engine is closed. Aborting `signal`
   * cancels the request (removed from the queue, or its generation stopped at the next token).
   */
  submit(request: GenerationRequest, signal?: AbortSignal): GenerationStream;
  /** Requests waiting, and running. */
  readonly load: { waiting: number; running: number };
  /** Batch size, queue time and gauge statistics, where the engine keeps them (the batch engine does). */
  readonly stats?: EngineStatsReader;
  /** Refuses new requests, lets queued and running ones finish. */
  close(): Promise<void>;
}

/** One sampled token, as the runtime yields it. */
export interface SampledToken {
  token: number;
  logprob?: number;
  top?: Array<{ token: number; logprob: number }>;
}

/** Incremental detokenizer (the runtime's StreamDecoder). */
export interface TokenDecoder {
  /** Text this token completes; "" while a UTF-8 character is incomplete. */
  push(id: number): string;
  /** Text still held at the end of the stream. */
  flush(): string;
}

/**
 * What an engine drives: one model's generation loop and its detokenizer. The runtime adapter
 * (`runtime-backend.ts`) wraps `generate()`; unit tests give a scripted fake.
 */
export interface TokenBackend {
  /** Generates one sequence; resolves to why it ended. Must stop at the next token once `signal` aborts. */
  generate(
    promptIds: number[],
    options: { maxTokens: number; sampling: SamplingParams; signal: AbortSignal },
  ): AsyncGenerator<SampledToken, FinishReason>;
  createDecoder(): TokenDecoder;
  /** The bytes a token decodes to (for logprobs). */
  tokenBytes(id: number): Uint8Array;
}
