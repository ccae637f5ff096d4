/**
 * The likeliest tokens of a decoder call's rule-filtered logits rows and their log-probabilities, in
 * one ONNX Runtime run: `TopK(LogSoftmax(x), k)`. Its vectorized kernels are several times faster
 * than JavaScript's exp loop and scan over Whisper's 51k-token vocabulary (which otherwise cost as
 * much as a third of a beam-search step), and only k values per row come back. Float32, ranked by
 * log-probability, as CTranslate2 ranks them.
 */
import * as ort from "onnxruntime-node";
import { ElementType, smallGraphBytes } from "../onnx/small-graph.js";

/** A two-node graph: `values, indices = TopK(LogSoftmax(x), k)` over each row. */
function topLogprobsModel(): Uint8Array {
  return smallGraphBytes({
    name: "top_logprobs",
    nodes: [
      { op: "LogSoftmax", inputs: ["x"], outputs: ["logprobs"], attributes: { axis: 1 } },
      // Largest first; equal values keep the lower index first (ONNX's TopK contract), as beam search breaks ties.
      { op: "TopK", inputs: ["logprobs", "k"], outputs: ["values", "indices"], attributes: { axis: 1, largest: 1, sorted: 1 } },
    ],
    inputs: [
      { name: "x", type: ElementType.float, dims: ["rows", "vocab"] },
      { name: "k", type: ElementType.int64, dims: [1] },
    ],
    outputs: [
      { name: "values", type: ElementType.float, dims: ["rows", "k"] },
      { name: "indices", type: ElementType.int64, dims: ["rows", "k"] },
    ],
  });
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
