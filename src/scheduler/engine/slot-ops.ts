/**
 * The slot operations decided since the last model call, in the order they were decided: KV copies
 * (from the slot table) and sampler opens and closes. Each was decided against the slots as they
 * stood at that moment, so the worker applies them in that order, before the forward pass of the
 * step message that carries them.
 */
import { usesPromptIds } from "../../runtime/sampling/index.js";
import type { SlotOp } from "../../runtime/text-worker/protocol.js";
import type { GenerationRequest } from "../types.js";
import type { KvSlots } from "./kv-slots.js";

/** What opening a sequence's sampler reads of its request. */
type OpenedRequest = Pick<GenerationRequest, "sampling" | "constraint" | "thinkingBudget" | "promptIds">;

export class SlotOps {
  private pending: SlotOp[] = [];
  /** Slot-to-slot copies handed out so far (truncations in place are not counted). */
  copies = 0;

  constructor(private readonly kv: KvSlots) {}

  /**
   * Opens a sampler for a sequence of `request` now in `slot` with `keepCached` positions cached,
   * with the request's constraint and thinking budget. The prompt ids go along only when the
   * sampling needs them (repetition_penalty).
   */
  open(seqId: number, slot: number, request: OpenedRequest, stream: number, keepCached: number): void {
    const { sampling, constraint, thinkingBudget, promptIds } = request;
    this.push({
      op: "open",
      seqId,
      slot,
      sampling,
      stream,
      keepCached,
      ...(constraint ? { constraint } : {}),
      ...(thinkingBudget ? { thinkingBudget } : {}),
      ...(usesPromptIds(sampling) ? { promptIds: Int32Array.from(promptIds) } : {}),
    });
  }

  close(seqId: number): void {
    this.push({ op: "close", seqId });
  }

  /** Whether anything waits to be sent. */
  get empty(): boolean {
    return this.pending.length === 0 && !this.kv.hasCopies;
  }

  /** Everything pending, in order, for the next step message; the list starts afresh. */
  take(): SlotOp[] {
    this.takeCopies();
    const ops = this.pending;
    this.pending = [];
    for (const op of ops) if (op.op === "copy" && op.from !== op.to) this.copies++;
    return ops;
  }

  /** Forgets everything pending (after a failure that reset the slots). */
  clear(): void {
    this.pending = [];
    this.kv.takeCopies();
  }

  private push(op: SlotOp): void {
    this.takeCopies();
    this.pending.push(op);
  }

  /** Copies the table decided since the last operation go first. */
  private takeCopies(): void {
    for (const c of this.kv.takeCopies()) this.pending.push({ op: "copy", ...c });
  }
}
