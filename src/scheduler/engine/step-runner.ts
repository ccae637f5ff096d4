/**
 * The step runner: what the batch engine sends its model calls to, one {@link StepRequest} message
 * each. The real one is the runtime's {@link TextWorker} (the thread that owns the ONNX session and
 * the KV pool); unit tests give a fake that keeps token lists instead of tensors.
 */
import type { ConstraintSpec } from "../../runtime/constrain/index.js";
import type { StepRequest, StepResult } from "../../runtime/text-worker/protocol.js";

export type { TextWorker } from "../../runtime/text-worker/handle.js";

/** A step message as the engine builds it. */
export type StepCall = Omit<StepRequest, "op">;

export interface StepRunner {
  /** KV slots (the most sequences cached at once). */
  readonly slots: number;
  /** Applies the call's slot operations in order, then runs its forward pass and samples. */
  step(call: StepCall): Promise<StepResult>;
  /**
   * Compiles a constraint where its sequences' masks are made, away from the steps, which go on
   * meanwhile; resolves once a sequence with it can open at once, rejects when it cannot be
   * compiled. While one compiles, the masks made where it compiles wait behind it (see
   * {@link constraintWaits}), so no step asks for them. Absent: a constraint compiles when its
   * sequence opens, inside a step.
   */
  prepareConstraint?(spec: ConstraintSpec): Promise<void>;
  /** Whether a constraint was compiled lately, so that its sequences need no {@link prepareConstraint}. */
  constraintPrepared?(spec: ConstraintSpec): boolean;
  /**
   * Whether the masks of sequence `seqId`, held to `spec`, wait behind a compile now (its matcher's
   * thread is compiling), so that no step may sample it yet. Absent: every constrained sequence
   * waits while any constraint compiles.
   */
  constraintWaits?(seqId: number, spec: ConstraintSpec): boolean;
}
