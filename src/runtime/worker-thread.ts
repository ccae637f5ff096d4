import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";
import type { MessagePort } from "node:worker_threads";
import { Piscina } from "piscina";

type Transfer = NonNullable<Parameters<Piscina["run"]>[1]>["transferList"];

/**
 * Where a worker thread starts: its entry file beside the calling module, and, when kiln runs from
 * its TypeScript sources, tsx's loader. A worker thread does not inherit the main thread's loader
 * (bin/kiln.mjs registers tsx; vitest has its own), so it must be told; and `--import tsx` would be
 * resolved from the working directory, which fails when kiln is started from elsewhere or installed
 * as a package, so the loader is named by its absolute file URL, found from kiln's own location.
 */
export function threadEntry(entry: string, moduleUrl: string): { filename: string; execArgv: string[] } {
  const fromSources = moduleUrl.endsWith(".ts");
  const filename = fileURLToPath(new URL(entry + (fromSources ? ".ts" : ".js"), moduleUrl));
  if (!fromSources) return { filename, execArgv: [] };
  const loader = pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href;
  return { filename, execArgv: ["--import", loader] };
}

export interface WorkerThreadOptions {
  /**
   * The thread takes messages on ports of its own between its tasks. Piscina's idle thread waits
   * for its next task blocked in Atomics.wait, where no other message is heard; this thread waits
   * in its event loop instead. Default false.
   */
  hearsPorts?: boolean;
}

/**
 * One worker thread that owns one session (text or speech): a one-thread pool whose first message
 * loads the model. One thread per model because the session (and its KV cache) is that thread's own
 * memory; the ONNX run blocks its thread, so it never runs on the event loop.
 */
export class WorkerThread {
  private constructor(private readonly pool: Piscina) {}

  /**
   * Starts the thread at `entry` (a path without extension, relative to `moduleUrl`) and sends it
   * `load`; the thread is gone again if the load fails.
   */
  static async start<Info>(entry: string, moduleUrl: string, load: object, options: WorkerThreadOptions = {}): Promise<{ thread: WorkerThread; info: Info }> {
    const { filename, execArgv } = threadEntry(entry, moduleUrl);
    const atomics = options.hearsPorts ? ("disabled" as const) : undefined;
    const pool = new Piscina({ filename, execArgv, minThreads: 1, maxThreads: 1, idleTimeout: Number.POSITIVE_INFINITY, ...(atomics ? { atomics } : {}) });
    try {
      const info = (await pool.run(load)) as Info;
      return { thread: new WorkerThread(pool), info };
    } catch (err) {
      await pool.destroy();
      throw err;
    }
  }

  /** Calls `lost` once the thread is gone: stopped, or dead (piscina then starts a bare one in its place). */
  onLost(lost: () => void): void {
    this.pool.once("workerDestroy", lost);
  }

  /** One message to the thread; buffers and ports in `transfer` move to it instead of being copied. */
  run<Result>(message: object, transfer?: Array<ArrayBuffer | MessagePort>): Promise<Result> {
    const options = transfer ? { transferList: transfer as unknown as Transfer } : undefined;
    return this.pool.run(message, options) as Promise<Result>;
  }

  async stop(): Promise<void> {
    await this.pool.destroy();
  }
}
