import { ConstraintError, GrammarThread, type ConstraintSpec } from "../constrain/index.js";
import { WorkerThread } from "../worker-thread.js";
import type { StepRequest, StepResult, TextLoadResult, TextSessionOptions } from "./protocol.js";

/**
 * The text worker: the main thread's handle on the thread that owns one text session. The ONNX
 * run blocks its thread, so it never runs on the event loop; one thread per model because its KV
 * pool is the thread's own memory. Each model call is one {@link StepRequest} message.
 */
export class TextWorker {
  /** The model's grammar thread, started with its first constraint. */
  private grammar: Promise<GrammarThread> | null = null;

  private constructor(
    private readonly thread: WorkerThread,
    readonly info: TextLoadResult,
    private readonly artifactDir: string,
  ) {}

  static async start(artifactDir: string, options: TextSessionOptions = {}): Promise<TextWorker> {
    const { thread, info } = await WorkerThread.start<TextLoadResult>("./thread", import.meta.url, { op: "load", artifactDir, options });
    return new TextWorker(thread, info, artifactDir);
  }

  /** Whether sequences with `spec` can open now, without a compile on the grammar thread (never once the thread is gone). */
  constraintPrepared(spec: ConstraintSpec): boolean {
    return this.ready !== null && !this.ready.gone && this.ready.prepared(spec);
  }

  /**
   * Compiles `spec` on the model's grammar thread (started, and connected to the worker, the first
   * time), away from the worker, which goes on stepping meanwhile. Rejects with a ConstraintError
   * when the engine refuses it. A thread that failed otherwise (it died) is replaced by the next
   * call: the sequences whose matchers it held fail, later ones are served.
   */
  async prepareConstraint(spec: ConstraintSpec): Promise<void> {
    if (this.ready?.gone) this.forgetGrammar();
    const starting = (this.grammar ??= this.startGrammar());
    try {
      await (await starting).prepare(spec);
    } catch (err) {
      if (!(err instanceof ConstraintError) && this.grammar === starting) this.forgetGrammar();
      throw err;
    }
  }

  /** Drops the grammar thread (stopping what is left of it): the next compile starts another. */
  private forgetGrammar(): void {
    const old = this.grammar;
    this.grammar = null;
    this.ready = null;
    void old?.then((g) => g.stop()).catch(() => {});
  }

  private ready: GrammarThread | null = null;

  private async startGrammar(): Promise<GrammarThread> {
    const grammar = await GrammarThread.start({ artifactDir: this.artifactDir, logitsWidth: this.info.shape.vocab, stopTokenIds: this.info.stopTokenIds });
    const port = await grammar.connect();
    await this.thread.run({ op: "grammar", port }, [port]);
    this.ready = grammar;
    return grammar;
  }

  /** KV slots of the session (the most sequences cached at once). */
  get slots(): number {
    return this.info.slots;
  }

  /** One model call: slot operations, then the forward pass and sampling. */
  step(request: Omit<StepRequest, "op">): Promise<StepResult> {
    return this.thread.run<StepResult>({ op: "step", ...request });
  }

  async stop(): Promise<void> {
    await this.thread.stop();
    await this.ready?.stop();
  }
}
