/**
 * One choice of one request as the batch engine drives it: its tokens, where its cache stands, and
 * its state machine
 *
 *     waiting -> prefilling -> running -> finished
 *        \___________\____________\_____-> cancelled
 *
 * waiting: queued, no KV slot. prefilling: owns a slot, its prompt goes in chunk by chunk (or it
 * waits for a sibling's prefill to copy). running: its prompt is cached and its last sampled token
 * is the next decode input. The engine moves it along; this class only keeps the books.
 */
import type { ChoiceOutput } from "./choice-output.js";
import type { FinishReason, Pooling, PromptTokenLogprob } from "../types.js";
import { EmbeddingPool } from "./embedding-pool.js";

export type SequenceStatus = "waiting" | "prefilling" | "running" | "finished" | "cancelled";

export interface SequenceInit {
  /** Unique id (also the worker's sampler id). */
  id: number;
  /** Index of the choice within its request (also its sampler stream). */
  choice: number;
  promptIds: readonly number[];
  /** Most generated tokens. */
  maxTokens: number;
  /** The model's context: prompt plus generated tokens never exceed it. */
  contextLength: number;
  output: ChoiceOutput;
  /** Its request scores the prompt (see {@link Sequence.promptLogprobs}). Default false. */
  scorePrompt?: boolean;
  /** Tokens its output is expected to repeat (`GenerationRequest.prediction`). Default none. */
  prediction?: readonly number[];
  /** Its request makes the prompt's embedding this way (`GenerationRequest.embed`). Default none. */
  embed?: Pooling;
}

export class Sequence {
  readonly id: number;
  readonly choice: number;
  readonly promptLength: number;
  readonly maxTokens: number;
  readonly contextLength: number;
  readonly output: ChoiceOutput;
  status: SequenceStatus = "waiting";
  /** The prompt, then every generated token (a stop token is never appended). */
  readonly tokens: number[];
  /** Positions whose keys and values sit in the slot. */
  cached = 0;
  /**
   * Leading cached positions computed exactly as a fresh, chunk-aligned prefill of these tokens
   * would compute them (prompt positions; decoded ones are not), so reusing them changes no result.
   */
  exact = 0;
  /** Prompt positions found in the prefix cache at admission (not computed for it). */
  reusedPrompt = 0;
  /** KV slot while prefilling or running, else -1. */
  slot = -1;
  /** Tokens generated (sampled and not a stop token). */
  generated = 0;
  /** A sibling (same prompt) whose prefill this one waits for, to copy its slot; null when none. */
  shareFrom: Sequence | null = null;
  /** Siblings waiting on this sequence's prefill. */
  readonly followers: Sequence[] = [];
  finishReason: FinishReason | null = null;
  /** Its reader has fallen behind (too many undelivered events): it skips decode steps until caught up. */
  paused = false;
  /**
   * Its output is held to a constraint whose masks come from a grammar thread that is compiling
   * another one now: it waits, in its slot, until the compile is done, while the others step.
   */
  grammarHeld = false;
  /** When its request scores the prompt: the prompt tokens its prefill has scored so far; else null. */
  readonly promptLogprobs: PromptTokenLogprob[] | null;
  /** Tokens its output is expected to repeat, or null; and how many of them checks confirmed. */
  readonly prediction: readonly number[] | null;
  predictionAccepted = 0;
  /**
   * Steps for which its prediction is not checked while others decode, after a check that confirmed
   * less than half its draft: beside a batch, a check is a call of its own, worth it only while
   * the prediction holds.
   */
  checksHeldBeside = 0;
  /** When its request makes an embedding: the chunks pooled so far; else null. */
  readonly embedding: EmbeddingPool | null;
  /** Clock readings (ms) of the first and last generated token. */
  firstTokenAt = 0;
  lastTokenAt = 0;

  constructor(init: SequenceInit) {
    this.id = init.id;
    this.choice = init.choice;
    this.promptLength = init.promptIds.length;
    this.maxTokens = init.maxTokens;
    this.contextLength = init.contextLength;
    this.output = init.output;
    this.tokens = [...init.promptIds];
    this.promptLogprobs = init.scorePrompt ? [] : null;
    this.prediction = init.prediction ?? null;
    this.embedding = init.embed ? new EmbeddingPool(init.embed) : null;
  }

  /** Holds a slot (prefilling or running). */
  get live(): boolean {
    return this.status === "prefilling" || this.status === "running";
  }

  /** Ready to take a decode step: its next input is its last sampled token, and its reader keeps up. */
  get ready(): boolean {
    return this.status === "running" && !this.paused && !this.grammarHeld;
  }

  /** Prompt tokens still to compute; 0 while it waits for a sibling's prefill. */
  get prefillLeft(): number {
    return this.status === "prefilling" && this.shareFrom === null ? this.promptLength - this.cached : 0;
  }

  /** Its generated tokens. */
  get generatedTokens(): readonly number[] {
    return this.tokens.slice(this.promptLength);
  }

  /** The decode input: the one token not yet cached. */
  get nextInput(): number {
    return this.tokens[this.cached];
  }

  /** waiting -> prefilling, in `slot` with `reused` prompt positions already cached there. */
  admit(slot: number, reused: number, exact: number): void {
    this.expect("waiting");
    this.status = "prefilling";
    this.slot = slot;
    this.cached = reused;
    this.reusedPrompt = reused;
    this.exact = exact;
  }

  /** A prompt chunk of `count` tokens went into the cache. */
  prefilled(count: number): void {
    this.expect("prefilling");
    this.cached += count;
    if (this.exact === this.cached - count) this.exact = this.cached;
  }

  /** Took a sibling's cached prompt (all but nothing left to compute). */
  shared(from: Sequence): void {
    this.expect("prefilling");
    this.cached = from.cached;
    this.exact = from.exact;
    this.shareFrom = null;
  }

  /** A decode step cached the input token. */
  decoded(): void {
    this.expect("running");
    this.cached++;
  }

  /**
   * Records a sampled token that is not a stop token; returns "length" when the sequence can take
   * no more (max tokens or the context), else null. Moves a prefilled sequence to running.
   */
  accept(token: number, at: number): "length" | null {
    this.tokens.push(token);
    this.generated++;
    if (this.generated === 1) this.firstTokenAt = at;
    this.lastTokenAt = at;
    this.status = "running";
    return this.generated >= this.maxTokens || this.tokens.length >= this.contextLength ? "length" : null;
  }

  /** Ends the sequence (the slot is released by the caller). */
  end(reason: FinishReason): void {
    this.finishReason = reason;
    this.status = reason === "cancelled" ? "cancelled" : "finished";
  }

  private expect(status: SequenceStatus): void {
    if (this.status !== status) throw new Error(`sequence ${this.id} is ${this.status}, not ${status}`);
  }
}
