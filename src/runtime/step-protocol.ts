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
}

export interface CloseRequest {
  op: "close";
  seqId: number;
}

export type WorkerRequest = LoadRequest | OpenRequest | StepRequest | CloseRequest;

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
  /** Milliseconds spent in the ONNX run, and in sampling. */
  runMs: number;
  sampleMs: number;
}
