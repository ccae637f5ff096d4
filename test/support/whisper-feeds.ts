/** The Whisper decoder's rule inputs, for tests that run the graph directly: no rules (an all-zero mask) unless a mask is given. */
import * as ort from "onnxruntime-node";
import { SPEECH_GRAPH } from "../../src/runtime/artifact/index.js";

const D = SPEECH_GRAPH.decoder;

export function ruleFeeds(rows: number, vocab: number, timestampBegin: number, k = 1, mask = new Float32Array(rows * vocab)): Record<string, ort.Tensor> {
  return {
    [D.ruleMask]: new ort.Tensor("float32", mask, [rows, vocab]),
    [D.textTokens]: new ort.Tensor("int64", BigInt64Array.of(BigInt(timestampBegin)), [1]),
    [D.topK]: new ort.Tensor("int64", BigInt64Array.of(BigInt(k)), [1]),
  };
}
