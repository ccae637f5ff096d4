/**
 * Messages across the worker-thread boundary. They are small on purpose: the scheduler sends which
 * slots run and their new tokens (deltas), never whole histories; the worker answers with one sample
 * per row. Typed arrays travel by structured clone (a few bytes per row).
 */
import type { TextModelOptions } from "./text-model.js";
import type { ModelShape } from "./artifact.js";
import type { SampleResult, SamplingParams } from "./sampling/index.js";

export interface LoadRequest {
  op: "load";
  artifactDir: string;
  options: TextModelOptions;
}

/** Registers a sequence's sampler (its seeded RNG and penalty counts live in the worker). */
export interface OpenRequest {
  op: "open";
  seqId: number;
  slot: number;
  sampling: SamplingParams;
  /** Tokens whose ids already sit in the slot's cache from a reused prefix. */
  keepCached: number;
  /**
   * Sub-stream of the sampler's seed: the n choices of one request share a seed and differ by
   * stream (the choice index), so each is reproducible yet different. Default 0.
   */
  stream?: number;
}

/**
 * Sets slot `to` to hold the first `length` cached positions of slot `from` (moving a sequence to
 * keep running slots consecutive, or sharing a prompt prefix); `from === to` just truncates. Only
 * live positions are copied. `length` must not exceed what `from` holds.
 */
export interface CopyRequest {
  op: "copy";
  from: number;
  to: number;
  length: number;
}

/**
 * One model step over consecutive slots [firstSlot, firstSlot + rows), each taking `seq` tokens.
 * `seqIds[r]` names the sequence of row r; rows whose `sample[r]` is false (a prefill chunk that does
 * not end the prompt) produce no sample.
 */
export interface StepRequest {
  op: "step";
  firstSlot: number;
  rows: number;
  seq: number;
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
}

export interface CloseRequest {
  op: "close";
  seqId: number;
}

export type WorkerRequest = LoadRequest | OpenRequest | CopyRequest | StepRequest | CloseRequest;

export interface LoadResult {
  shape: ModelShape;
  artifactId: string;
  stopTokenIds: number[];
  slots: number;
}

export interface RowSample extends SampleResult {
  topLogits?: Array<{ token: number; logit: number }>;
}

export interface StepResult {
  samples: Array<RowSample | null>;
  /** One sample per entry of {@link StepRequest.forks}, in order (absent without forks). */
  forkSamples?: RowSample[];
  /** Milliseconds spent in the ONNX run, and in sampling. */
  runMs: number;
  sampleMs: number;
}
