import { fileURLToPath } from "node:url";
import { Piscina } from "piscina";
import type { AlignRequest, AlignResult, DecodeRequest, DecodeResult, EncodeRequest, EncodeResult, SpeechLoadResult, SpeechSessionOptions } from "./speech-protocol.js";

function workerEntry(): { filename: string; execArgv: string[] } {
  const url = new URL("../worker/speech-worker" + (import.meta.url.endsWith(".ts") ? ".ts" : ".js"), import.meta.url);
  const filename = fileURLToPath(url);
  return { filename, execArgv: filename.endsWith(".ts") ? ["--import", "tsx"] : [] };
}

/**
 * The speech worker: the main thread's handle on the thread that owns one speech session (as
 * `ModelWorker` is for text). Each model call is one message; the mel window moves, not copies.
 */
export class SpeechWorker {
  private constructor(
    private readonly pool: Piscina,
    readonly info: SpeechLoadResult,
  ) {}

  static async start(artifactDir: string, options: SpeechSessionOptions = {}): Promise<SpeechWorker> {
    const { filename, execArgv } = workerEntry();
    const pool = new Piscina({ filename, execArgv, minThreads: 1, maxThreads: 1, idleTimeout: Number.POSITIVE_INFINITY });
    try {
      const info = (await pool.run({ op: "load", artifactDir, options })) as SpeechLoadResult;
      return new SpeechWorker(pool, info);
    } catch (err) {
      await pool.destroy();
      throw err;
    }
  }

  get slots(): number {
    return this.info.slots;
  }

  encode(request: Omit<EncodeRequest, "op">): Promise<EncodeResult> {
    // Moved, not copied; a view into a larger buffer is copied first so the owner keeps its buffer.
    const whole = request.mel.byteOffset === 0 && request.mel.byteLength === request.mel.buffer.byteLength;
    const mel = whole ? request.mel : request.mel.slice();
    const transferList = [mel.buffer] as unknown as NonNullable<Parameters<Piscina["run"]>[1]>["transferList"];
    return this.pool.run({ op: "encode", ...request, mel }, { transferList }) as Promise<EncodeResult>;
  }

  decode(request: Omit<DecodeRequest, "op">): Promise<DecodeResult> {
    return this.pool.run({ op: "decode", ...request }) as Promise<DecodeResult>;
  }

  align(request: Omit<AlignRequest, "op">): Promise<AlignResult> {
    return this.pool.run({ op: "align", ...request }) as Promise<AlignResult>;
  }

  async stop(): Promise<void> {
    await this.pool.destroy();
  }
}
