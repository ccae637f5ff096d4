import type { LoadResult, StepRequest, StepResult } from "./step-protocol.js";
import type { SessionOptions } from "./worker/model-session.js";
import { WorkerThread } from "./worker-thread.js";

/**
 * The model worker: the main thread's handle on the thread that owns one model session. The ONNX
 * run blocks its thread, so it never runs on the event loop; one thread per model because its KV
 * pool is the thread's own memory. Each model call is one {@link StepRequest} message.
 */
export class ModelWorker {
  private constructor(
    private readonly thread: WorkerThread,
    readonly info: LoadResult,
  ) {}

  static async start(artifactDir: string, options: SessionOptions = {}): Promise<ModelWorker> {
    const { thread, info } = await WorkerThread.start<LoadResult>("./worker/text-worker", import.meta.url, { op: "load", artifactDir, options });
    return new ModelWorker(thread, info);
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
