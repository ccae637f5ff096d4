/**
 * Messages across the worker-thread boundary: one per model call. The scheduler sends the slot
 * operations it decided since its last call (in order) and which slots run with their new tokens
 * (deltas, never whole histories); the worker applies the operations, runs the forward pass and
 * answers with one sample per sampled row. Typed arrays travel by structured clone.
 */
import type { MessagePort } from "node:worker_threads";
import type { ModelShape } from "../artifact/index.js";
import type { WebGpuBufferCache } from "../device/execution-providers.js";
import type { ComputeDevice } from "../device/index.js";
import type { ConstraintSpec, ThinkingBudget } from "../constrain/index.js";
import type { PositionScores, SampleResult, SamplingParams } from "../sampling/index.js";
import type { DevicePoolWrites } from "./device-kv-pool.js";

/** Options of one text session (what `kiln serve` and the tests choose per loaded model). */
export interface TextSessionOptions {
  /** Where the graph runs; "webgpu" loads the model's GPU artifact and keeps its KV cache on the device. Default "cpu". */
  device?: ComputeDevice;
  /** ONNX Runtime intra-op threads. Default: 2. */
  threads?: number;
  /** Sequence slots in the KV pool (the most sequences that can be cached at once). Default: 1. */
  slots?: number;
  /**
   * On "webgpu": positions each slot of the device KV pool holds (a fixed capacity: the pool is
   * allocated once, slots x positions). Default: the model's context, at most 1024.
   */
  deviceKvPositions?: number;
  /** KV capacity growth step, in positions. Default: {@link KV_GROWTH_POSITIONS} (128). */
  kvChunk?: number;
  /** onnxruntime graph optimizations applied when the session loads. Default: "all". */
  graphOptimizationLevel?: "disabled" | "basic" | "extended" | "all";
  /**
   * onnxruntime's CPU memory arena and memory-pattern planning. Default: false: measured on
   * SmolLM2-135M, they held 30-34 MB more after a 512-token prompt (the arena keeps its high-water
   * mark) for no difference beyond noise at decode, prefill or 16 sequences.
   */
  memoryArena?: boolean;
  /** On "webgpu": how the provider keeps released storage buffers (see WebGpuBufferCache). Default: onnxruntime's, "bucket". */
  webgpuBufferCache?: WebGpuBufferCache;
  /** On "webgpu": how each step writes the device KV pools (see DevicePoolWrites). Default: "inplace". */
  devicePoolWrites?: DevicePoolWrites;
  /** Write an onnxruntime profile (JSON) with this path prefix; see `endProfiling`. Default: off. */
  profileFilePrefix?: string;
}

export interface TextLoadRequest {
  op: "load";
  artifactDir: string;
  options: TextSessionOptions;
}

/** Registers a sequence's sampler (its seeded RNG and penalty counts live in the worker) and keeps `keepCached` positions of its slot. */
export interface OpenSlotOp {
  op: "open";
  seqId: number;
  slot: number;
  sampling: SamplingParams;
  /** Positions of the slot's cache that hold this sequence's prefix (a reused prefix); the rest is forgotten. */
  keepCached: number;
  /**
   * Sub-stream of the sampler's seed: the n choices of one request share a seed and differ by
   * stream (the choice index), so each is reproducible yet different.
   */
  stream: number;
  /** What the sequence's output must be (JSON, a schema, a regex, a choice, a structural tag): only tokens it allows are sampled. Default none. */
  constraint?: ConstraintSpec;
  /** Which of the model's grammar threads holds the constraint's compiled grammar, so the sequence's matcher lives there (the text worker's handle sets it). Default 0. */
  grammarLane?: number;
  /** Most tokens the sequence may think before its thinking's close tag is forced. Default none. */
  thinkingBudget?: ThinkingBudget;
  /**
   * The request's prompt token ids, for samplers that need them (repetition_penalty on, see
   * `usesPromptIds`); absent otherwise. Taken from the request, not from what the slot computed:
   * a reused cached prefix is never prefilled again.
   */
  promptIds?: Int32Array;
}

/**
 * Sets slot `to` to hold the first `length` cached positions of slot `from` (moving a sequence to
 * keep running slots consecutive, or sharing a prompt prefix); `from === to` just truncates.
 * `length` must not exceed what `from` holds.
 */
export interface CopySlotOp {
  op: "copy";
  from: number;
  to: number;
  length: number;
  /** The sequence whose cache lands in `to`: it fails if the copy does. Absent for a plain truncation. */
  seqId?: number;
}

/** Drops a sequence's sampler. */
export interface CloseSlotOp {
  op: "close";
  seqId: number;
}

export type SlotOp = OpenSlotOp | CopySlotOp | CloseSlotOp;

/**
 * One model call: first `ops`, in order; then, when `rows` > 0, one forward pass over consecutive
 * slots [firstSlot, firstSlot + rows), each taking `tokensPerRow` tokens. `seqIds[r]` names the
 * sequence of row r; rows whose `sample[r]` is false (a prefill chunk that does not end the prompt)
 * produce no sample.
 */
export interface StepRequest {
  op: "step";
  ops: SlotOp[];
  firstSlot: number;
  rows: number;
  tokensPerRow: number;
  tokens: Int32Array;
  seqIds: number[];
  sample: boolean[];
  /** Also return the top-n raw logits of each sampled row (oracle checks). Default 0. */
  topLogits?: number;
  /**
   * Extra samples from a row's logits with other sequences' samplers (the other choices of an n > 1
   * request share the prefill of choice 0): each entry samples row `row` for `seqId`, in order,
   * answered in {@link StepResult.forkSamples}. Default none.
   */
  forks?: Array<{ row: number; seqId: number }>;
  /**
   * Score the prompt chunk of row `row`: at each of its positions, the log probability of the
   * prompt token that follows (the chunk's own next token, then `next` after its last position;
   * -1 when the chunk ends the prompt, whose last position is only sampled) and the `top`
   * likeliest tokens with theirs, answered in {@link StepResult.scores}, with the token's rank
   * among the vocabulary when `ranks` is set (a pass over each row, a third more scoring work).
   * The forward pass then computes every position's logits; only these numbers come back. Default none.
   */
  score?: { row: number; top: number; next: number; ranks?: boolean };
  /**
   * The call checks a draft: `rows` is 1 and the row's tokens after the first are guesses at what the
   * sequence samples next. Every position is sampled in turn, as decode steps would sample them,
   * while each sample equals the guess after it; the cache keeps the input and the guesses confirmed
   * (the first sample is the next input). Answered in `samples[0]` and {@link StepResult.confirmed}.
   * Default false.
   */
  verify?: boolean;
  /**
   * Pool row `row`'s final hidden states for an embedding (see {@link Pooling}): "mean" answers the
   * sum over the chunk's positions (the engine divides once the prompt is whole), "last" the last
   * position's vector. Answered in {@link StepResult.pooled}. Default none.
   */
  embed?: { row: number; pooling: Pooling };
}

/**
 * How an embedding is made of a prompt's final hidden states: their "mean" over every position,
 * or the "last" position's (which alone has seen the whole prompt in a causal model).
 */
export type Pooling = "mean" | "last";

/** Connects the worker to one of the model's grammar threads (see GrammarThread.connect): the port's other end is there. */
export interface GrammarConnectRequest {
  op: "grammar";
  port: MessagePort;
  /** The thread's index among the model's grammar threads (a sequence's `grammarLane`); a lane connected again replaces its gone thread. */
  lane: number;
}

export type TextWorkerRequest = TextLoadRequest | StepRequest | GrammarConnectRequest;

export interface TextLoadResult {
  shape: ModelShape;
  artifactId: string;
  stopTokenIds: number[];
  slots: number;
  /** Where the loaded session computes: what the server reports, rather than what was asked. */
  device: ComputeDevice;
}

export interface RowSample extends SampleResult {
  topLogits?: Array<{ token: number; logit: number }>;
}

/** A sequence the worker could not serve in this call, and why. */
export interface SequenceFailure {
  seqId: number;
  message: string;
}

export interface StepResult {
  /** One entry per row: null for rows not sampled, and for rows of failed sequences. */
  samples: Array<RowSample | null>;
  /** One sample per entry of {@link StepRequest.forks}, in order; null for a failed sequence (absent without forks). */
  forkSamples?: Array<RowSample | null>;
  /** Sequences whose slot operation failed, or whose sampler was missing; the others are served. */
  failed: SequenceFailure[];
  /** Set when the forward pass itself failed: no row was computed, every row's sequence fails. */
  forwardError?: string;
  /** The answer to {@link StepRequest.score} (absent without it, or when its sequence failed). */
  scores?: PositionScores;
  /**
   * The answer to {@link StepRequest.verify}: the samples after `samples[0]`, in order, each taken
   * because the one before it equalled its guess (absent otherwise; empty when the first guess failed).
   */
  confirmed?: RowSample[];
  /** The answer to {@link StepRequest.embed}, hidden-size floats (absent otherwise, or when its sequence failed). */
  pooled?: Float32Array;
  /** Milliseconds spent in the ONNX run, and in sampling. */
  runMs: number;
  sampleMs: number;
}
