/**
 * The likeliest tokens of a decoder call's rule-filtered logits rows and their log-probabilities, in
 * one ONNX Runtime run: `TopK(LogSoftmax(x), k)`. Its vectorized kernels are several times faster
 * than JavaScript's exp loop and scan over Whisper's 51k-token vocabulary (which otherwise cost as
 * much as a third of a beam-search step), and only k values per row come back. Float32, ranked by
 * log-probability, as CTranslate2 ranks them.
 */
import * as ort from "onnxruntime-node";

const FLOAT = 1;
const INT64 = 7;

/** A two-node ONNX model, `values, indices = TopK(LogSoftmax(x), k)` over each row, encoded by hand. */
function topLogprobsModel(): Uint8Array {
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
  const fixedDim = (size: number) => field(1, int(1, size));
  const tensorType = (elem: number, dims: number[][]) => field(2, field(1, bytes(int(1, elem), field(2, bytes(...dims)))));
  const valueInfo = (name: string, elem: number, dims: number[][]) => bytes(field(1, str(name)), tensorType(elem, dims));
  const attribute = (name: string, value: number) => bytes(field(1, str(name)), int(3, value), int(20, 2 /* INT */));
  const node = (inputs: string[], outputs: string[], op: string, attributes: number[][] = []) =>
    bytes(...inputs.map((i) => field(1, str(i))), ...outputs.map((o) => field(2, str(o))), field(4, str(op)), ...attributes.map((a) => field(5, a)));
  const graph = bytes(
    field(1, node(["x"], ["logprobs"], "LogSoftmax")),
    // Largest first; equal values keep the lower index first (ONNX's TopK contract), as beam search breaks ties.
    field(1, node(["logprobs", "k"], ["values", "indices"], "TopK", [attribute("axis", 1), attribute("largest", 1), attribute("sorted", 1)])),
    field(2, str("top_logprobs")),
    field(11, valueInfo("x", FLOAT, [dim("rows"), dim("vocab")])),
    field(11, valueInfo("k", INT64, [fixedDim(1)])),
    field(12, valueInfo("values", FLOAT, [dim("rows"), dim("k")])),
    field(12, valueInfo("indices", INT64, [dim("rows"), dim("k")])),
  );
  return new Uint8Array(bytes(int(1, 8), field(8, int(2, 13)), field(7, graph)));
}

/** Each row's `k` likeliest tokens, likeliest first, with their log-probabilities. */
export interface TopLogprobsRows {
  k: number;
  /** [rows, k] token ids. */
  tokens: Int32Array;
  /** [rows, k] log-probabilities. */
  logprobs: Float32Array;
}

export class TopLogprobs {
  private constructor(private readonly session: ort.InferenceSession) {}

  static async create(threads: number): Promise<TopLogprobs> {
    const session = await ort.InferenceSession.create(topLogprobsModel(), {
      executionProviders: ["cpu"],
      intraOpNumThreads: threads,
      interOpNumThreads: 1,
      extra: { session: { intra_op: { allow_spinning: "0" } } },
    });
    return new TopLogprobs(session);
  }

  /** The `k` likeliest tokens of each row of `logits` [rows, vocab] (k at most vocab). */
  async run(logits: Float32Array, rows: number, vocab: number, k: number): Promise<TopLogprobsRows> {
    const out = await this.session.run({
      x: new ort.Tensor("float32", logits, [rows, vocab]),
      k: new ort.Tensor("int64", BigInt64Array.of(BigInt(Math.min(k, vocab))), [1]),
    });
    const indices = out.indices.data as BigInt64Array;
    return { k: out.values.dims[1], tokens: Int32Array.from(indices, Number), logprobs: out.values.data as Float32Array };
  }

  async release(): Promise<void> {
    await this.session.release();
  }
}
