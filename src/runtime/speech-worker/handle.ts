import { WorkerThread } from "../worker-thread.js";
import type {
  AlignRequest,
  AlignResult,
  DecodeRequest,
  DecodeResult,
  EncodeRequest,
  EncodeResult,
  SpeechLoadResult,
  SpeechSessionOptions,
} from "./protocol.js";

/**
 * The speech worker: the main thread's handle on the thread that owns one speech session (as
 * `TextWorker` is for text). Each model call is one message; the mel window moves, not copies.
 */
export class SpeechWorker {
  private constructor(
    private readonly thread: WorkerThread,
    readonly info: SpeechLoadResult,
  ) {}

  static async start(artifactDir: string, options: SpeechSessionOptions = {}): Promise<SpeechWorker> {
    const { thread, info } = await WorkerThread.start<SpeechLoadResult>("./thread", import.meta.url, { op: "load", artifactDir, options });
    return new SpeechWorker(thread, info);
  }

  get slots(): number {
    return this.info.slots;
  }

  encode(request: Omit<EncodeRequest, "op">): Promise<EncodeResult> {
    // Moved, not copied; a view into a larger buffer is copied first so the owner keeps its buffer.
    const whole = request.mel.byteOffset === 0 && request.mel.byteLength === request.mel.buffer.byteLength;
    const mel = whole ? request.mel : request.mel.slice();
    return this.thread.run<EncodeResult>({ op: "encode", ...request, mel }, [mel.buffer as ArrayBuffer]);
  }

  decode(request: Omit<DecodeRequest, "op">): Promise<DecodeResult> {
    return this.thread.run<DecodeResult>({ op: "decode", ...request });
  }

  align(request: Omit<AlignRequest, "op">): Promise<AlignResult> {
    return this.thread.run<AlignResult>({ op: "align", ...request });
  }

  async stop(): Promise<void> {
    await this.thread.stop();
  }
}
