/**
 * The scheduler's vocabulary: what a caller asks the engine for (a {@link GenerationRequest}), and
 * what comes back ({@link GenerationEvent}s). A request may ask for several choices and every event
 * names its choice.
 */
import type { ConstraintSpec, ThinkingBudget } from "../runtime/constrain/index.js";
import type { SamplingParams } from "../runtime/sampling/index.js";
import type { Pooling } from "../runtime/text-worker/protocol.js";

export type { SamplingParams } from "../runtime/sampling/index.js";
export type { Pooling } from "../runtime/text-worker/protocol.js";
export type { ChatMessage, ContentPart } from "../runtime/text/index.js";

/** Why a choice ended: an end-of-turn token or a stop string ("stop"), max tokens or the context ("length"), or its caller went away ("cancelled"). */
export type FinishReason = "stop" | "length" | "cancelled";

/** One generation request: a tokenized prompt and how to continue it. */
export interface GenerationRequest {
  /** Prompt token ids, already rendered and tokenized (at least one, shorter than the context). */
  promptIds: number[];
  /**
   * Most new tokens per choice (>= 0; 0 computes the prompt and generates nothing, for its
   * scores). Generation also ends at the model's context length.
   */
  maxTokens: number;
  /** Sampling parameters, as in the OpenAI API (nulls mean defaults). */
  sampling: SamplingParams;
  /**
   * Stop strings: generation of a choice ends at the first occurrence of any of them in its text,
   * and that text is never emitted. Empty strings are ignored. Default none.
   */
  stop?: readonly string[];
  /**
   * A matched stop string, or a sampled `sampling.stop_token_ids` token, stays in the output (its
   * text emitted, the token counted), as vLLM's `include_stop_str_in_output` asks. The model's own
   * end tokens never do. Default false.
   */
  includeStop?: boolean;
  /** Control tokens come out as their text (vLLM's `skip_special_tokens: false`). Default false: they give no text. */
  renderSpecial?: boolean;
  /**
   * Number of choices to generate from the same prompt. Default 1. With a seed, every choice is
   * reproducible yet different: choice i gets the seed's sampler stream i (so choice 0 is what
   * n = 1 gives).
   */
  n?: number;
  /** Report log probabilities of each emitted token, with this many alternatives (0..20). Default: none. */
  logprobs?: { top: number };
  /**
   * Score the prompt: each prompt token's log probability after the tokens before it, with this
   * many alternatives (0..20), computed by the prefill itself and reported in one
   * {@link PromptEvent} per choice before its first delta. Such a prompt is computed whole: a
   * cached prefix would leave its positions unscored. `ranks`: each token's rank among the
   * vocabulary too ({@link PromptTokenLogprob.rank}; null without it). Default: none.
   */
  promptLogprobs?: { top: number; ranks?: boolean };
  /**
   * What every choice's output must be (a JSON object, or JSON valid against a schema): tokens the
   * constraint does not allow are never sampled. Default none.
   */
  constraint?: ConstraintSpec;
  /**
   * Where the request waits for a slot: ahead of every waiting request of a larger priority, behind
   * those of the same or a smaller one (vLLM's `priority`: lower runs earlier), a waiting request's
   * priority counting one less for each `BatchEngineOptions.priorityAgingMs` it has waited. Running
   * sequences are never stopped for it. Default 0.
   */
  priority?: number;
  /**
   * A reasoning model's thinking held to a number of tokens: past it, the thinking's close tag is
   * forced and the answer follows (see {@link ThinkingBudget}). Default none: the model ends its own thinking.
   */
  thinkingBudget?: ThinkingBudget;
  /**
   * The output holds tool calls: a choice that starts writing a call it already made, exactly,
   * ends there (finish `stop`, the repeat never emitted), as a stop string would end it. Default false.
   */
  endRepeatedCalls?: boolean;
  /**
   * Tokens the answer is expected to repeat (the reference API's predicted outputs: a file being
   * edited): a choice decoding alone checks them as drafts, where its output so far follows them or
   * its last tokens occur in them, several per model call. It changes no token's probability. Default none.
   */
  prediction?: readonly number[];
  /**
   * Milliseconds from a choice's first token after which it ends (finish `length`) at the next
   * token that holds a line break, that token included (llama.cpp's `t_max_predict_ms`). Default none.
   */
  lineTimeLimitMs?: number;
  /**
   * Spaces and tabs each line after a line break needs: a line indented less ends the choice after
   * its indentation (finish `length`), as llama.cpp's `n_indent` ends a code completion where its
   * block does. Default none.
   */
  minIndent?: number;
  /**
   * Make the prompt's embedding (see {@link Pooling}) instead of continuing it: the request must
   * ask for no new tokens and one choice; its prompt is computed whole (no cached prefix), and an
   * {@link EmbeddingEvent} comes before its finish. Default: none.
   */
  embed?: { pooling: Pooling };
}

/** The log probability of one token, with the text it decodes to (the API's `logprobs.content` entry). */
export interface TokenLogprob {
  /** The token's id in the model's vocabulary. */
  id: number;
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
  /**
   * What of the request's own ended the choice (vLLM's `stop_reason`): the stop string that matched,
   * or the `stop_token_ids` id sampled. Absent when it ended otherwise (the model's end-of-turn
   * token, the token budget, a cancel).
   */
  stopReason?: string | number;
  /** Tokens generated for this choice (a matched stop string's tokens included, end-of-turn token excluded). */
  completionTokens: number;
  /** Seconds from the first token to the last, for time-per-output-token. */
  decodeSeconds: number;
  /**
   * Prompt tokens this choice found in the prefix cache and did not compute (`usage`'s
   * `cached_tokens`); 0 when its prompt was computed, or copied from a sibling choice's prefill.
   */
  cachedPromptTokens: number;
  /**
   * With a {@link GenerationRequest.prediction}: its tokens this choice's checks confirmed
   * (`accepted_prediction_tokens`), and the rest of it (`rejected_prediction_tokens`). Absent without one.
   */
  prediction?: { accepted: number; rejected: number };
}

/** A prompt token as scored: the first has neither a log probability nor alternatives (nothing came before it). */
export interface PromptTokenLogprob {
  id: number;
  token: string;
  bytes: number[];
  logprob: number | null;
  /** Its rank among the vocabulary by raw log probability (1 = likeliest); null for the first token, and on a device that counts only its top alternatives, for a token outside them. */
  rank: number | null;
  /** The most likely tokens at its position, most likely first. */
  top: TokenLogprob[] | null;
}

/** The scored prompt of one choice (when the request asked for {@link GenerationRequest.promptLogprobs}), before anything else of it. */
export interface PromptEvent {
  type: "prompt";
  choice: number;
  /** One entry per prompt token. */
  logprobs: PromptTokenLogprob[];
}

/** A prompt's embedding (a request with {@link GenerationRequest.embed}): the pooled final hidden states, not normalized. */
export interface EmbeddingEvent {
  type: "embedding";
  choice: number;
  embedding: Float32Array;
}

export type GenerationEvent = PromptEvent | EmbeddingEvent | DeltaEvent | FinishEvent;

/** A running or waiting request: iterate for its events; stop iterating (or abort its signal) to cancel it. */
export type GenerationStream = AsyncIterable<GenerationEvent>;

/** Incremental detokenizer (the runtime's StreamDecoder). */
export interface TokenDecoder {
  /** Text this token completes; "" while a UTF-8 character is incomplete. */
  push(id: number): string;
  /** Text still held at the end of the stream. */
  flush(): string;
}

/** How the engine reads tokens as text (the model's tokenizer). */
export interface TokenText {
  /** A fresh incremental detokenizer for one choice (`renderSpecial`: control tokens as their text). */
  createDecoder(options?: { renderSpecial?: boolean }): TokenDecoder;
  /** The bytes a token decodes to (for logprobs). */
  tokenBytes(id: number): Uint8Array;
}
