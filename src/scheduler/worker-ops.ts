/**
 * The worker operations a step needs before its model call, in the order they were decided: KV
 * copies (from the slot table) and sampler opens and closes. Each was decided against the slots as
 * they stood at that moment, so sending them in that order keeps the worker's cache in step with
 * the table.
 */
import type { KvSlots } from "./kv-slots.js";
import type { StepBackend } from "./step-backend.js";
import type { SamplingParams } from "./types.js";

type WorkerOp =
  | { op: "copy"; from: number; to: number; length: number }
  | { op: "open"; seqId: number; slot: number; sampling: SamplingParams; stream: number; keepCached: number }
  | { op: "close"; seqId: number };

export class WorkerOps {
  private pending: WorkerOp[] = [];
  /** Slot-to-slot copies sent so far (truncations in place are not counted). */
  copies = 0;

  constructor(
    private readonly backend: StepBackend,
    private readonly kv: KvSlots,
  ) {}

  /** Opens a sampler for a sequence now in `slot` with `keepCached` positions cached. */
  open(seqId: number, slot: number, sampling: SamplingParams, stream: number, keepCached: number): void {
    this.push({ op: "open", seqId, slot, sampling, stream, keepCached });
  }

  close(seqId: number): void {
    this.push({ op: "close", seqId });
  }

  /** Sends everything pending, in order. */
  async flush(): Promise<void> {
    this.takeCopies();
    const ops = this.pending;
    this.pending = [];
    for (const op of ops) {
      if (op.op === "copy") {
        if (op.from !== op.to) this.copies++;
        await this.backend.copy(op.from, op.to, op.length);
      } else if (op.op === "open") {
        await this.backend.open(op.seqId, op.slot, op.sampling, op.stream, op.keepCached);
      } else {
        await this.backend.close(op.seqId);
      }
    }
  }

  /** Forgets everything pending (after a failure that reset the slots). */
  clear(): void {
    this.pending = [];
    this.kv.takeCopies();
  }

  private push(op: WorkerOp): void {
    this.takeCopies();
    this.pending.push(op);
  }

  /** Copies the table decided since the last operation go first. */
  private takeCopies(): void {
    for (const c of this.kv.takeCopies()) this.pending.push({ op: "copy", ...c });
  }
}
