import { WorkerThread } from "../worker-thread.js";
import type { StepRequest, StepResult, TextLoadResult, TextSessionOptions } from "./protocol.js";

/**
 * The text worker: the main thread's handle on the thread that owns one text session. The ONNX
 * run blocks its thread, so it never runs on the event loop; one thread per model because its KV
 * pool is the thread's own memory. Each model call is one {@link StepRequest} message.
 */
export class TextWorker {
  private constructor(
    private readonly thread: WorkerThread,
    readonly info: TextLoadResult,
  ) {}

  static async start(artifactDir: string, options: TextSessionOptions = {}): Promise<TextWorker> {
    const { thread, info } = await WorkerThread.start<TextLoadResult>("./thread", import.meta.url, { op: "load", artifactDir, options });
    return new TextWorker(thread, info);
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
  }
}
