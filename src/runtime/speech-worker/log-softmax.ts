/**
 * Log-softmax of a decoder call's rule-filtered logits rows, run by ONNX Runtime (its vectorized
 * kernel is several times faster than a JavaScript exp loop over Whisper's 51k-token vocabulary,
 * which otherwise costs as much as a third of a beam-search step). Float32, as CTranslate2 computes it.
 */
import * as ort from "onnxruntime-node";

/** A one-node ONNX model, `y = LogSoftmax(x)` over the last axis of float32 `x` [rows, vocab], encoded by hand. */
function logSoftmaxModel(): Uint8Array {
  const bytes = (...parts: Array<number[] | Uint8Array>) => parts.flatMap((p) => [...p]);
  const varint = (n: number) => {
    const out: number[] = [];
    while (n > 127) {
      out.push((n & 127) | 128);
      n = Math.floor(n / 128);
    }
    out.push(n);
    return out;
  };
  const str = (s: string) => [...new TextEncoder().encode(s)];
  const field = (num: number, payload: number[]) => bytes(varint((num << 3) | 2), varint(payload.length), payload);
  const int = (num: number, value: number) => bytes(varint(num << 3), varint(value));
  const dim = (name: string) => field(1, field(2, str(name)));
  const tensorType = field(2, field(1, bytes(int(1, 1), field(2, bytes(dim("rows"), dim("vocab"))))));
  const valueInfo = (name: string) => bytes(field(1, str(name)), tensorType);
  const node = bytes(field(1, str("x")), field(2, str("y")), field(4, str("LogSoftmax")));
  const graph = bytes(field(1, node), field(2, str("log_softmax")), field(11, valueInfo("x")), field(12, valueInfo("y")));
  return new Uint8Array(bytes(int(1, 8), field(8, int(2, 13)), field(7, graph)));
}

export class LogSoftmax {
  private constructor(private readonly session: ort.InferenceSession) {}

  static async create(threads: number): Promise<LogSoftmax> {
    const session = await ort.InferenceSession.create(logSoftmaxModel(), {
      executionProviders: ["cpu"],
      intraOpNumThreads: threads,
      interOpNumThreads: 1,
      extra: { session: { intra_op: { allow_spinning: "0" } } },
    });
    return new LogSoftmax(session);
  }

  /** Log-probabilities of `logits` [rows, vocab]. */
  async run(logits: Float32Array, rows: number, vocab: number): Promise<Float32Array> {
    const out = await this.session.run({ x: new ort.Tensor("float32", logits, [rows, vocab]) });
    return out.y.data as Float32Array;
  }

  async release(): Promise<void> {
    await this.session.release();
  }
}
