/**
 * What the batch engine drives: a model's KV slots and samplers behind small step messages (see
 * `runtime/step-protocol.ts`). `workerStepBackend` is the real one over a loaded runtime's worker
 * thread; unit tests give a fake that keeps token lists instead of tensors.
 */
import type { SamplingParams } from "../runtime/sampling/index.js";
import type { StepRequest, StepResult } from "../runtime/step-protocol.js";
import type { TextRuntime } from "../runtime/text-runtime.js";
import type { TokenDecoder } from "./types.js";

export type StepCall = Omit<StepRequest, "op">;

export interface StepBackend {
  /** KV slots of the model (the most sequences cached at once). */
  readonly slots: number;
  /** Context length in tokens. */
  readonly contextLength: number;
  /** Token ids that end a sequence (never emitted). */
  readonly stopTokenIds: readonly number[];
  /** Registers a sequence's sampler (seeded RNG sub-stream `stream`, penalty counts). */
  open(seqId: number, slot: number, sampling: SamplingParams, stream: number, keepCached: number): Promise<void>;
  /** Slot `to` gets the first `length` cached positions of slot `from` (`from === to` truncates). */
  copy(from: number, to: number, length: number): Promise<void>;
  /** One model call over consecutive slots; returns one sample per sampled row (and per fork). */
  step(call: StepCall): Promise<StepResult>;
  /** Drops a sequence's sampler. */
  close(seqId: number): Promise<void>;
  createDecoder(): TokenDecoder;
  /** The bytes a token decodes to (for logprobs). */
  tokenBytes(id: number): Uint8Array;
}

/**
 * The real backend: the runtime's worker thread (its KV pool must have been loaded with `slots`).
 * `contextLength` may be lower than the model's, to bound KV memory. Default: the model's.
 */
export function workerStepBackend(runtime: TextRuntime, contextLength = runtime.worker.info.shape.contextLength): StepBackend {
  const worker = runtime.worker;
  return {
    slots: worker.info.slots,
    contextLength,
    stopTokenIds: worker.info.stopTokenIds,
    open: (seqId, slot, sampling, stream, keepCached) => worker.open({ seqId, slot, sampling, stream, keepCached }),
    copy: (from, to, length) => worker.copy({ from, to, length }),
    step: (call) => worker.step(call),
    close: (seqId) => worker.close(seqId),
    createDecoder: () => runtime.tokenizer.createStreamDecoder(),
    tokenBytes: (id) => runtime.tokenizer.tokenBytes(id),
  };
}
