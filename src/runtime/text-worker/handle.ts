import { GrammarThread, type ConstraintSpec } from "../constrain/index.js";
import { GrammarLanes } from "./grammar-lanes.js";
import { WorkerThread } from "../worker-thread.js";
import type { StepRequest, StepResult, TextLoadResult, TextSessionOptions } from "./protocol.js";

/**
 * The text worker: the main thread's handle on the thread that owns one text session. The ONNX
 * run blocks its thread, so it never runs on the event loop; one thread per model because its KV
 * pool is the thread's own memory. Each model call is one {@link StepRequest} message.
 */
export class TextWorker {
  /** The model's grammar threads, the first started with its first constraint. */
  private readonly grammar = new GrammarLanes((lane) => this.startGrammar(lane));

  private constructor(
    private readonly thread: WorkerThread,
    readonly info: TextLoadResult,
    private readonly artifactDir: string,
  ) {}

  static async start(artifactDir: string, options: TextSessionOptions = {}): Promise<TextWorker> {
    const { thread, info } = await WorkerThread.start<TextLoadResult>("./thread", import.meta.url, { op: "load", artifactDir, options });
    return new TextWorker(thread, info, artifactDir);
  }

  /** Whether sequences with `spec` can open now, without a compile on a grammar thread (never on a thread that is gone). */
  constraintPrepared(spec: ConstraintSpec): boolean {
    return this.grammar.prepared(spec);
  }

  /**
   * Compiles `spec` on one of the model's grammar threads (see GrammarLanes), away from the worker,
   * which goes on stepping meanwhile. Rejects with a ConstraintError when the engine refuses it. A
   * thread that failed otherwise (it died) is replaced at a later call: the sequences whose
   * matchers it held fail, later ones are served.
   */
  prepareConstraint(spec: ConstraintSpec): Promise<void> {
    return this.grammar.prepare(spec);
  }

  /** Whether sequence `seqId`'s masks (it is held to `spec`) wait behind a compile on its grammar thread now. */
  constraintWaits(seqId: number, spec: ConstraintSpec): boolean {
    return this.grammar.waits(seqId, spec);
  }

  /** Grammar threads started (the first constraint starts one; a compile while it is busy, a second). */
  get grammarThreads(): number {
    return this.grammar.started;
  }

  private async startGrammar(lane: number): Promise<GrammarThread> {
    const grammar = await GrammarThread.start({ artifactDir: this.artifactDir, logitsWidth: this.info.shape.vocab, stopTokenIds: this.info.stopTokenIds });
    try {
      const port = await grammar.connect();
      await this.thread.run({ op: "grammar", port, lane }, [port]);
    } catch (err) {
      await grammar.stop().catch(() => {});
      throw err;
    }
    return grammar;
  }

  /** KV slots of the session (the most sequences cached at once). */
  get slots(): number {
    return this.info.slots;
  }

  /** One model call: slot operations, then the forward pass and sampling. A constrained sequence opens on the grammar thread holding its grammar. */
  step(request: Omit<StepRequest, "op">): Promise<StepResult> {
    const ops = request.ops.map((op) => {
      if (op.op === "open" && op.constraint) return { ...op, grammarLane: this.grammar.opened(op.seqId, op.constraint) };
      if (op.op === "close") this.grammar.closed(op.seqId);
      return op;
    });
    return this.thread.run<StepResult>({ op: "step", ...request, ops });
  }

  async stop(): Promise<void> {
    await this.thread.stop();
    await this.grammar.stop();
  }
}
