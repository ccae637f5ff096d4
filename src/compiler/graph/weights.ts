import type { LinearWeight } from "../quant/linear-weight.js";

/** What a graph builder asks of a weights file, independent of its format. */
export interface WeightSource {
  has(name: string): boolean;
  /** A matrix stored as N rows of K (GGUF dims [K, N]) mapped for a matmul. */
  linear(name: string): Promise<LinearWeight>;
  /** Any tensor dequantized to float32, in storage order. */
  floats(name: string): Promise<Float32Array>;
  dims(name: string): number[];
}

/** One recorded compiler decision for the manifest. */
export interface Choice {
  what: string;
  choice: string;
  exact: boolean;
  why: string;
}
