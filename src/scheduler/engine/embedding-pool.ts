/** A prompt's embedding as its prefill chunks come back: the engine's side of `StepRequest.embed`. */
import type { Pooling } from "../../runtime/text-worker/protocol.js";

/**
 * Gathers what each chunk's call answered ({@link StepResult.pooled}): for "mean", the sums of
 * the chunks' positions, divided by the prompt's length at the end; for "last", the last chunk's
 * vector. Numbers only: the worker pooled the tensors.
 */
export class EmbeddingPool {
  private sum: Float64Array | null = null;
  private last: Float32Array | null = null;
  private positions = 0;

  constructor(readonly pooling: Pooling) {}

  /** Whether a chunk's call must pool: every chunk for "mean", only the prompt's last for "last". */
  wants(lastChunk: boolean): boolean {
    return this.pooling === "mean" || lastChunk;
  }

  /** One chunk's answer, covering `positions` prompt positions. */
  add(pooled: Float32Array, positions: number): void {
    this.positions += positions;
    if (this.pooling === "last") {
      this.last = pooled;
      return;
    }
    this.sum ??= new Float64Array(pooled.length);
    if (pooled.length !== this.sum.length) throw new Error(`a chunk pooled ${pooled.length} values, not ${this.sum.length}`);
    for (let i = 0; i < pooled.length; i++) this.sum[i] += pooled[i];
  }

  /** The embedding, not normalized; throws when no chunk was added. */
  result(): Float32Array {
    if (this.pooling === "last") {
      if (!this.last) throw new Error("no chunk was pooled");
      return this.last;
    }
    if (!this.sum || this.positions === 0) throw new Error("no chunk was pooled");
    const out = new Float32Array(this.sum.length);
    for (let i = 0; i < out.length; i++) out[i] = this.sum[i] / this.positions;
    return out;
  }
}
