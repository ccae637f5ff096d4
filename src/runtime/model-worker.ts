import { fileURLToPath } from "node:url";
import { Piscina } from "piscina";
import type { CopyRequest, LoadResult, OpenRequest, StepRequest, StepResult } from "./step-protocol.js";
import type { TextModelOptions } from "./text-model.js";

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
 * A model owned by one worker thread. The ONNX run blocks its thread, so it never runs on the event
 * loop; one thread per model because its KV pool is the thread's own memory.
 */
export class ModelWorker {
  private constructor(
    private readonly pool: Piscina,
    readonly info: LoadResult,
  ) {}

  static async start(artifactDir: string, options: TextModelOptions = {}): Promise<ModelWorker> {
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

  open(req: Omit<OpenRequest, "op">): Promise<void> {
    return this.pool.run({ op: "open", ...req }) as Promise<void>;
  }

  copy(req: Omit<CopyRequest, "op">): Promise<void> {
    return this.pool.run({ op: "copy", ...req }) as Promise<void>;
  }

  step(req: Omit<StepRequest, "op">): Promise<StepResult> {
    return this.pool.run({ op: "step", ...req }) as Promise<StepResult>;
  }

  close(seqId: number): Promise<void> {
    return this.pool.run({ op: "close", seqId }) as Promise<void>;
  }

  async stop(): Promise<void> {
    await this.pool.destroy();
  }
}
