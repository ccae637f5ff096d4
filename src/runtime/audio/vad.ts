/**
 * Silero VAD (the `silero_vad.onnx` of the silero-vad package) over 16 kHz audio: one speech
 * probability per window of {@link VAD_WINDOW} samples, run in order with the model's recurrent
 * state carried from window to window, and each window preceded by the last {@link VAD_CONTEXT}
 * samples of the one before, as the package's own ONNX wrapper feeds it.
 */
import * as ort from "onnxruntime-node";

/** Samples per window at 16 kHz (32 ms), the only window the 16 kHz model takes. */
export const VAD_WINDOW = 512;
/** Samples of the previous window given before each window. */
export const VAD_CONTEXT = 64;
const SAMPLE_RATE = 16_000;
/** The recurrent state: [2, batch 1, 128]. */
const STATE_SIZE = 2 * 128;

/** The model's graph names, checked at load. */
const IO = { input: "input", state: "state", sampleRate: "sr", output: "output", nextState: "stateN" } as const;

export class VadModelError extends Error {}

export class SileroVad {
  private constructor(private readonly session: ort.InferenceSession) {}

  /** Loads the model; one intra-op thread, since each window is a tiny graph run in sequence. */
  static async load(path: string): Promise<SileroVad> {
    const session = await ort.InferenceSession.create(path, {
      intraOpNumThreads: 1,
      interOpNumThreads: 1,
      graphOptimizationLevel: "all",
      executionMode: "sequential",
      extra: { session: { intra_op: { allow_spinning: "0" } } },
    });
    const missing = [IO.input, IO.state, IO.sampleRate].filter((n) => !session.inputNames.includes(n));
    if (missing.length > 0 || !session.outputNames.includes(IO.output) || !session.outputNames.includes(IO.nextState)) {
      await session.release();
      throw new VadModelError(`${path} is not a Silero VAD model (inputs ${session.inputNames.join(", ")}; outputs ${session.outputNames.join(", ")})`);
    }
    return new SileroVad(session);
  }

  /**
   * The speech probability of each window of `samples` (16 kHz mono). The audio is padded with
   * zeros to whole windows the way faster-whisper pads it (always at least one sample more, so a
   * length already a multiple of the window gains a silent window).
   */
  async speechProbabilities(samples: Float32Array, signal?: AbortSignal): Promise<Float32Array> {
    const windows = Math.floor(samples.length / VAD_WINDOW) + 1;
    const probabilities = new Float32Array(windows);
    let state: Float32Array = new Float32Array(STATE_SIZE);
    const input = new Float32Array(VAD_CONTEXT + VAD_WINDOW);
    const sampleRate = new ort.Tensor("int64", BigInt64Array.of(BigInt(SAMPLE_RATE)), []);
    for (let w = 0; w < windows; w++) {
      if (w % 256 === 0) signal?.throwIfAborted();
      // The context is the last samples of the previous window as fed (zeros before the first).
      input.copyWithin(0, VAD_WINDOW, VAD_WINDOW + VAD_CONTEXT);
      if (w === 0) input.fill(0, 0, VAD_CONTEXT);
      const from = w * VAD_WINDOW;
      const chunk = samples.subarray(from, Math.min(samples.length, from + VAD_WINDOW));
      input.set(chunk, VAD_CONTEXT);
      input.fill(0, VAD_CONTEXT + chunk.length);
      const out = await this.session.run({
        [IO.input]: new ort.Tensor("float32", input.slice(), [1, VAD_CONTEXT + VAD_WINDOW]),
        [IO.state]: new ort.Tensor("float32", state, [2, 1, 128]),
        [IO.sampleRate]: sampleRate,
      });
      probabilities[w] = (out[IO.output].data as Float32Array)[0];
      state = out[IO.nextState].data as Float32Array;
    }
    return probabilities;
  }

  async release(): Promise<void> {
    await this.session.release();
  }
}
