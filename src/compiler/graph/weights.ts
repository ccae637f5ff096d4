import type { LinearWeight } from "../quant/linear-weight.js";

/** What a graph builder asks of a weights file, independent of its format. */
export interface WeightSource {
  has(name: string): boolean;
  /** A matrix stored as N rows of K (GGUF dims [K, N]) mapped for a matmul. */
  linear(name: string): Promise<LinearWeight>;
  /**
   * Rows [start, start + count) of what `linear(name)` gives, reading only those: one expert out of
   * a stacked expert tensor ([K, N, experts] reads as experts x N rows). A source without it is read
   * whole by `linear` and sliced.
   */
  linearRows?(name: string, start: number, count: number): Promise<LinearWeight>;
  /** Any tensor dequantized to float32, in storage order. */
  floats(name: string): Promise<Float32Array>;
  /**
   * The same values in consecutive pieces of whole rows, for a table too large to hold at once
   * (a 70B model's embedding is 4 GiB of float32); a source without it is read whole by `floats`.
   */
  floatRows?(name: string): AsyncIterable<Float32Array>;
  dims(name: string): number[];
}

/** One recorded compiler decision for the manifest. */
export interface Choice {
  what: string;
  choice: string;
  exact: boolean;
  why: string;
}
