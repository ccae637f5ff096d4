/**
 * A text model's grammar threads, its "lanes": each compiles constraints and holds the matchers of
 * the sequences opened with them (a compiled grammar cannot move between threads). A compile blocks
 * its thread, so the masks of that thread's sequences wait behind it; a new constraint therefore
 * compiles on a lane where no sequence is waiting for masks when there is one, starting a second
 * thread for it if need be, so that one client's slow schema does not stall every other
 * constrained stream of the model.
 */
import { ConstraintError, type ConstraintSpec, type GrammarThread } from "../constrain/index.js";

/** Grammar threads a text model may have. Each holds its own engine: about 95 MB of the process's memory beside SmolLM2's vocabulary. */
export const MAX_GRAMMAR_LANES = 2;

interface Lane {
  thread: Promise<GrammarThread>;
  /** The thread once started and connected to the text worker. */
  ready: GrammarThread | null;
  /** Compiles sent to it and not answered yet. */
  compiling: number;
  /** Sequences whose matchers live there. */
  open: Set<number>;
}

export class GrammarLanes {
  private readonly lanes: Array<Lane | undefined> = [];
  private readonly laneOfSeq = new Map<number, number>();

  /**
   * @param start starts a grammar thread and connects it to the text worker as lane `lane`.
   * @param max the most lanes (threads) at once; default {@link MAX_GRAMMAR_LANES}.
   */
  constructor(
    private readonly start: (lane: number) => Promise<GrammarThread>,
    private readonly max = MAX_GRAMMAR_LANES,
  ) {}

  /**
   * Whether sequences with `spec` can open without a compile (a yes counts as a use of the compiled
   * grammar): a lane holds it, and it is not compiling another, or no other lane could compile it
   * sooner. Where every lane holding it is busy compiling and another is free, no: compiling it
   * again there beats waiting behind a compile of seconds.
   */
  prepared(spec: ConstraintSpec): boolean {
    const holders = this.holdingLanes(spec, true);
    if (holders.length === 0) return false;
    return holders.some((index) => this.lanes[index]!.compiling === 0) || !this.freeForCompile();
  }

  /**
   * Compiles `spec` on a lane: one with nothing to do when there is one, else a new one while there
   * are fewer than the most, else the least busy. Rejects with a ConstraintError when the engine
   * refuses it; a thread that failed otherwise (it died, or did not start) is dropped, and its lane
   * starts a new thread at a later compile.
   */
  async prepare(spec: ConstraintSpec): Promise<void> {
    if (this.prepared(spec)) return;
    const index = this.laneForCompile();
    const lane = this.lanes[index]!;
    lane.compiling++;
    try {
      await (await lane.thread).prepare(spec);
    } catch (err) {
      if (!(err instanceof ConstraintError) && this.lanes[index] === lane) this.drop(index);
      throw err;
    } finally {
      lane.compiling--;
    }
  }

  /** A sequence opens with `spec`: the lane its matcher is to live on (one holding the compiled grammar, not compiling where it can). */
  opened(seqId: number, spec: ConstraintSpec): number {
    const index = this.holding(spec) ?? this.readyLanes()[0] ?? 0;
    this.laneOfSeq.set(seqId, index);
    this.lanes[index]?.open.add(seqId);
    return index;
  }

  /** A sequence closed: its matcher is gone from its lane. */
  closed(seqId: number): void {
    const index = this.laneOfSeq.get(seqId);
    if (index === undefined) return;
    this.laneOfSeq.delete(seqId);
    this.lanes[index]?.open.delete(seqId);
  }

  /**
   * Whether the masks of sequence `seqId` (held to `spec`) wait behind a compile now: its lane's, or
   * for one not opened yet the lane holding `spec`; any compile where no lane holds it.
   */
  waits(seqId: number, spec: ConstraintSpec): boolean {
    const index = this.laneOfSeq.get(seqId) ?? this.holding(spec);
    if (index === undefined) return this.lanes.some((l) => l !== undefined && l.compiling > 0);
    return (this.lanes[index]?.compiling ?? 0) > 0;
  }

  /** Threads started (for tests and memory accounting). */
  get started(): number {
    return this.lanes.filter((l) => l !== undefined).length;
  }

  async stop(): Promise<void> {
    await Promise.all(this.lanes.map((lane) => lane?.thread.then((t) => t.stop()).catch(() => {})));
  }

  /** The live lanes holding `spec` compiled; `use` counts the answer as a use of it there. */
  private holdingLanes(spec: ConstraintSpec, use: boolean): number[] {
    return this.readyLanes().filter((index) => {
      const thread = this.lanes[index]!.ready!;
      return use ? thread.prepared(spec) : thread.holds(spec);
    });
  }

  /** The live lane a sequence with `spec` opens on: one holding it and compiling nothing, else any holding it. */
  private holding(spec: ConstraintSpec): number | undefined {
    const holders = this.holdingLanes(spec, false);
    return holders.find((index) => this.lanes[index]!.compiling === 0) ?? holders[0];
  }

  /** Whether a compile could start now without waiting behind another: a lane compiling nothing, or room for a new one. */
  private freeForCompile(): boolean {
    const live = this.lanes.filter((lane) => lane !== undefined && !lane.ready?.gone);
    return live.some((lane) => lane!.compiling === 0) || live.length < this.max;
  }

  /** Indices of lanes whose thread is started and not gone. */
  private readyLanes(): number[] {
    return this.lanes.flatMap((lane, index) => (lane?.ready && !lane.ready.gone ? [index] : []));
  }

  private laneForCompile(): number {
    this.lanes.forEach((lane, index) => lane?.ready?.gone && this.drop(index));
    const live = this.lanes.flatMap((lane, index) => (lane ? [index] : []));
    const idle = live.find((index) => this.lanes[index]!.compiling === 0 && this.lanes[index]!.open.size === 0);
    if (idle !== undefined) return idle;
    const free = Array.from({ length: this.max }, (_, i) => i).find((i) => this.lanes[i] === undefined);
    if (free !== undefined) return this.startLane(free);
    const busy = (index: number) => this.lanes[index]!.compiling * 1_000_000 + this.lanes[index]!.open.size;
    return live.reduce((best, index) => (busy(index) < busy(best) ? index : best));
  }

  private startLane(index: number): number {
    const lane: Lane = { thread: this.start(index), ready: null, compiling: 0, open: new Set() };
    lane.thread.then(
      (thread) => void (lane.ready = thread),
      () => {},
    );
    this.lanes[index] = lane;
    return index;
  }

  /** Drops a lane (stopping what is left of its thread): a later compile starts another there. */
  private drop(index: number): void {
    const lane = this.lanes[index];
    this.lanes[index] = undefined;
    for (const seqId of lane?.open ?? []) this.laneOfSeq.delete(seqId);
    void lane?.thread.then((t) => t.stop()).catch(() => {});
  }
}
