/** What one chunk contributes to an embedding: the worker's side of {@link StepRequest.embed}. */
import type { Pooling } from "./protocol.js";

/**
 * Row `row`'s part of an embedding from one forward pass's final hidden states
 * ([rows, tokensPerRow, width]): the sum of its positions' vectors for "mean" (summed in float64,
 * so a long prompt's chunks add up without float32 drift), its last position's for "last".
 */
export function poolChunk(hidden: Float32Array, row: number, tokensPerRow: number, width: number, pooling: Pooling): Float32Array {
  const first = row * tokensPerRow * width;
  if (pooling === "last") return hidden.slice(first + (tokensPerRow - 1) * width, first + tokensPerRow * width);
  const sum = new Float64Array(width);
  for (let p = 0; p < tokensPerRow; p++) {
    const at = first + p * width;
    for (let i = 0; i < width; i++) sum[i] += hidden[at + i];
  }
  return Float32Array.from(sum);
}
