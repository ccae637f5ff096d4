import { fileURLToPath } from "node:url";
import { Piscina } from "piscina";
import type { LoadResult, StepRequest, StepResult } from "./step-protocol.js";
import type { SessionOptions } from "./worker/model-session.js";

/**
 * The worker entry: run from TypeScript sources (tsx) in development and tests, which the worker
 * thread must be told about explicitly because it does not inherit a test runner's loader.
 */
function workerEntry(): { filename: string; execArgv: string[] } {
  const url = new URL("./worker/text-worker" + (import.meta.url.endsWith(".ts") ? ".ts" : ".js"), import.meta.url);
  const filename = fileURLToPath(url);
  return { filename, execArgv: filename.endsWith(".ts") ? ["--import", "tsx"] : [] };
}

/**
 * The model worker: the main thread's handle on the thread that owns one model session. The ONNX
 * run blocks its thread, so it never runs on the event loop; one thread per model because its KV
 * pool is the thread's own memory. Each model call is one {@link StepRequest} message.
 */
export class ModelWorker {
  private constructor(
    private readonly pool: Piscina,
    readonly info: LoadResult,
  ) {}

  static async start(artifactDir: string, options: SessionOptions = {}): Promise<ModelWorker> {
    const { filename, execArgv } = workerEntry();
    const pool = new Piscina({ filename, execArgv, minThreads: 1, maxThreads: 1, idleTimeout: Number.POSITIVE_INFINITY });
    try {
      const info = (await pool.run({ op: "load", artifactDir, options })) as LoadResult;
      return new ModelWorker(pool, info);
    } catch (err) {
      await pool.destroy();
      throw err;
    }
  }

  /** KV slots of the session (the most sequences cached at once). */
  get slots(): number {
    return this.info.slots;
  }

  /** One model call: slot operations, then the forward pass and sampling. */
  step(request: Omit<StepRequest, "op">): Promise<StepResult> {
    return this.pool.run({ op: "step", ...request }) as Promise<StepResult>;
  }

  async stop(): Promise<void> {
    await this.pool.destroy();
  }
}
