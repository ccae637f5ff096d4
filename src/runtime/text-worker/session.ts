import { join } from "node:path";
import * as ort from "onnxruntime-node";
import { ARTIFACT_FILES, type ArtifactManifest, checkTextGraphIo, KV_GROWTH_POSITIONS, readManifest, TEXT_GRAPH } from "../artifact/index.js";
import { KvPool } from "../kv-pool.js";
import type { TextSessionOptions } from "./protocol.js";

/** Where the last `forward` spent its time, in milliseconds. */
export interface StepTimings {
  /** Building input tensors and masks. */
  feedMs: number;
  /** Growing KV capacity (rare). */
  growMs: number;
  /** onnxruntime's session.run. */
  runMs: number;
  /** Writing the new keys and values into the cache. */
  appendMs: number;
}

const NEG_INF = -Infinity;

/**
 * The text session: one compiled text graph on the worker thread, i.e. an ONNX Runtime session
 * plus the KV pool it reads. `forward` runs one step for `rows` consecutive slots, each taking `tokensPerRow`
 * new tokens, and returns the last position's logits per row (or every position's, for prompt
 * scoring). It never decides who runs.
 */
export class TextSession {
  /** Timings of the most recent `forward`. */
  readonly lastStep: StepTimings = { feedMs: 0, growMs: 0, runMs: 0, appendMs: 0 };
  /** The final norm's output of the most recent `forward`, [rows, tokensPerRow, hidden]: what embeddings pool. */
  lastHidden: Float32Array = new Float32Array(0);

  private constructor(
    readonly manifest: ArtifactManifest,
    private readonly session: ort.InferenceSession,
    readonly kv: KvPool,
  ) {}

  static async load(artifactDir: string, options: TextSessionOptions = {}): Promise<TextSession> {
    const manifest = readManifest(artifactDir);
    const sliding = manifest.shape.slidingWindow !== undefined;
    checkTextGraphIo(manifest.io, manifest.shape.layers, `the artifact ${manifest.id}`, sliding);
    const session = await ort.InferenceSession.create(join(artifactDir, ARTIFACT_FILES.graph), {
      executionProviders: ["cpu"],
      intraOpNumThreads: options.threads ?? 2,
      interOpNumThreads: 1,
      graphOptimizationLevel: options.graphOptimizationLevel ?? "all",
      executionMode: "sequential",
      enableCpuMemArena: options.memoryArena ?? false,
      enableMemPattern: options.memoryArena ?? false,
      ...(options.profileFilePrefix ? { enableProfiling: true, profileFilePrefix: options.profileFilePrefix } : {}),
    });
    checkTextGraphIo({ inputs: [...session.inputNames], outputs: [...session.outputNames] }, manifest.shape.layers, `the graph of ${manifest.id}`, sliding);
    const kv = new KvPool(manifest.shape, options.slots ?? 1, options.kvChunk ?? KV_GROWTH_POSITIONS);
    return new TextSession(manifest, session, kv);
  }

  get vocab(): number {
    return this.manifest.shape.vocab;
  }

  /** Cached positions of a slot. */
  length(slot: number): number {
    return this.kv.lengths[slot];
  }

  /**
   * One step; returns logits [rows, vocab] of each row's last position, or [rows, tokensPerRow, vocab] of
   * every position with `allPositions`.
   */
  async forward(firstSlot: number, rows: number, tokensPerRow: number, tokens: ArrayLike<number>, allPositions = false): Promise<Float32Array> {
    const { shape } = this.manifest;
    const { kv } = this;
    let longest = 0;
    for (let r = 0; r < rows; r++) longest = Math.max(longest, kv.lengths[firstSlot + r] + tokensPerRow);
    if (longest > shape.contextLength) throw new RangeError(`step would reach ${longest} positions, past the context of ${shape.contextLength}`);
    const t0 = performance.now();
    kv.ensure(longest);
    const t1 = performance.now();
    // A step whose rows all start empty (a fresh prompt's first chunk) reads no cache at all: its
    // past is fed as zero positions, sparing the matmuls over a capacity that is all masked.
    let anyPast = false;
    for (let r = 0; r < rows && !anyPast; r++) anyPast = kv.lengths[firstSlot + r] > 0;
    const cap = anyPast ? kv.capacity : 0;

    const ids = new BigInt64Array(rows * tokensPerRow);
    const positions = new BigInt64Array(rows * tokensPerRow);
    const pastMask = new Float32Array(rows * cap).fill(NEG_INF);
    for (let r = 0; r < rows; r++) {
      const past = kv.lengths[firstSlot + r];
      pastMask.fill(0, r * cap, r * cap + past);
      for (let s = 0; s < tokensPerRow; s++) {
        ids[r * tokensPerRow + s] = BigInt(tokens[r * tokensPerRow + s]);
        positions[r * tokensPerRow + s] = BigInt(past + s);
      }
    }
    const feeds: Record<string, ort.Tensor> = {
      [TEXT_GRAPH.inputIds]: new ort.Tensor("int64", ids, [rows, tokensPerRow]),
      [TEXT_GRAPH.positionIds]: new ort.Tensor("int64", positions, [rows, tokensPerRow]),
      [TEXT_GRAPH.pastMask]: new ort.Tensor("float32", pastMask, [rows, 1, 1, cap]),
      [TEXT_GRAPH.newMask]: new ort.Tensor("float32", causalMask(shape.heads / shape.kvHeads, tokensPerRow), [
        1,
        1,
        (shape.heads / shape.kvHeads) * tokensPerRow,
        tokensPerRow,
      ]),
      [TEXT_GRAPH.logitsFrom]: new ort.Tensor("int64", BigInt64Array.of(allPositions ? 0n : -1n), [1]),
    };
    const ringCapacity = anyPast ? kv.ringCapacity : 0;
    if (shape.slidingWindow) {
      const ring = new BigInt64Array(rows * ringCapacity);
      if (anyPast) kv.ringPositions(firstSlot, rows, ring);
      feeds[TEXT_GRAPH.ringPositions] = new ort.Tensor("int64", ring, [rows, ringCapacity]);
    }
    for (let l = 0; l < shape.layers; l++) {
      const stride = anyPast ? kv.layerStride(l) : 0;
      const past = anyPast ? kv.layerCapacity(l) : 0;
      const keys = kv.keys[l].subarray(firstSlot * stride, (firstSlot + rows) * stride);
      const values = kv.values[l].subarray(firstSlot * stride, (firstSlot + rows) * stride);
      feeds[TEXT_GRAPH.pastKey(l)] = new ort.Tensor("float32", keys, [rows, shape.kvHeads, shape.headDim, past]);
      feeds[TEXT_GRAPH.pastValue(l)] = new ort.Tensor("float32", values, [rows, shape.kvHeads, past, shape.headDim]);
    }
    const t2 = performance.now();
    const out = await this.session.run(feeds);
    const t3 = performance.now();
    for (let l = 0; l < shape.layers; l++) {
      kv.append(l, firstSlot, rows, tokensPerRow, out[TEXT_GRAPH.presentKey(l)].data as Float32Array, out[TEXT_GRAPH.presentValue(l)].data as Float32Array);
    }
    kv.advance(firstSlot, rows, tokensPerRow);
    const t4 = performance.now();
    Object.assign(this.lastStep, { growMs: t1 - t0, feedMs: t2 - t1, runMs: t3 - t2, appendMs: t4 - t3 });
    this.lastHidden = out[TEXT_GRAPH.hidden].data as Float32Array;
    return out[TEXT_GRAPH.logits].data as Float32Array;
  }

  /** Ends a profile started with `profileFilePrefix`; the file lands next to that prefix. */
  endProfiling(): void {
    this.session.endProfiling();
  }

  async release(): Promise<void> {
    await this.session.release();
  }
}

/** [group*S, S] additive mask: query row (g, s) sees new keys 0..s. */
function causalMask(group: number, tokensPerRow: number): Float32Array {
  const mask = new Float32Array(group * tokensPerRow * tokensPerRow);
  for (let g = 0; g < group; g++) {
    for (let s = 0; s < tokensPerRow; s++) {
      const row = (g * tokensPerRow + s) * tokensPerRow;
      for (let t = s + 1; t < tokensPerRow; t++) mask[row + t] = NEG_INF;
    }
  }
  return mask;
}
