import { join } from "node:path";
import * as ort from "onnxruntime-node";
import {
  checkSpeechGraphIo,
  KV_GROWTH_POSITIONS,
  readSpeechManifest,
  SPEECH_FILES,
  SPEECH_GRAPH,
  type SpeechArtifactManifest,
  WINDOW_FRAMES,
} from "../artifact/index.js";
import { executionProvidersFor } from "../device/execution-providers.js";
import { KvPool } from "../kv-pool.js";
import type { SpeechSessionOptions } from "./protocol.js";

const NEG_INF = -Infinity;
const D = SPEECH_GRAPH.decoder;
const E = SPEECH_GRAPH.encoder;

/** What one decoder call returns: the last position's logits per row, and the alignment heads' weights when asked. */
export interface DecoderOutput {
  /** [rows, vocab]. */
  logits: Float32Array;
  /** [rows, alignment heads, tokensPerRow, audio context], when `alignment` was asked. */
  alignment?: Float32Array;
}

/**
 * The speech session on the worker thread: the compiled encoder and decoder, the decoder's
 * self-attention KV pool, and each slot's cross-attention keys and values (one 30 s window's worth).
 * It runs what it is told for the slots it is told; it never decides who runs.
 */
export class SpeechSession {
  private constructor(
    readonly manifest: SpeechArtifactManifest,
    private readonly encoder: ort.InferenceSession,
    private readonly decoder: ort.InferenceSession,
    readonly kv: KvPool,
    /** Per decoder layer: [slots, heads, head_dim, audio_ctx]. */
    private readonly crossKeys: Float32Array[],
    /** Per decoder layer: [slots, heads, audio_ctx, head_dim]. */
    private readonly crossValues: Float32Array[],
    /** Per slot, which encoded window its cross-attention keys and values hold (-1: none yet). */
    private readonly windowOf: Int32Array,
  ) {}

  /** Counts encoded windows, so that slots filled by one encode call are known to share theirs. */
  private windows = 0;

  static async load(artifactDir: string, options: SpeechSessionOptions = {}): Promise<SpeechSession> {
    const manifest = readSpeechManifest(artifactDir);
    const shape = manifest.speech;
    checkSpeechGraphIo(manifest.speechIo, shape, `the artifact ${manifest.id}`);
    // Inputs and outputs stay on the CPU on either device: the decoder's graph takes its whole
    // self-attention cache as an input and returns only the new positions, so the cache lives in the
    // KV pool in JavaScript, and an output left on the device could not be read back (getData() on a
    // gpu-buffer tensor aborts the process).
    const device = options.device ?? "cpu";
    const sessionOptions: ort.InferenceSession.SessionOptions = {
      intraOpNumThreads: options.threads ?? 2,
      interOpNumThreads: 1,
      graphOptimizationLevel: "all",
      executionMode: "sequential",
      // Idle pool threads sleep instead of spinning, so a text model's worker beside this one keeps its cores.
      extra: { session: { intra_op: { allow_spinning: "0" } } },
    };
    const graphSession = (file: string) => ort.InferenceSession.create(file, { ...sessionOptions, executionProviders: executionProvidersFor(device, file) });
    const encoder = await graphSession(join(artifactDir, SPEECH_FILES.encoder));
    const decoder = await graphSession(join(artifactDir, SPEECH_FILES.decoder));
    checkSpeechGraphIo(
      {
        encoder: { inputs: [...encoder.inputNames], outputs: [...encoder.outputNames] },
        decoder: { inputs: [...decoder.inputNames], outputs: [...decoder.outputNames] },
      },
      shape,
      `the graphs of ${manifest.id}`,
    );
    const slots = options.slots ?? 4;
    const kv = new KvPool(manifest.shape, slots, KV_GROWTH_POSITIONS);
    const perSlot = shape.heads * shape.headDim * shape.audioContext;
    const crossKeys = Array.from({ length: shape.decoderLayers }, () => new Float32Array(slots * perSlot));
    const crossValues = Array.from({ length: shape.decoderLayers }, () => new Float32Array(slots * perSlot));
    return new SpeechSession(manifest, encoder, decoder, kv, crossKeys, crossValues, new Int32Array(slots).fill(-1));
  }

  get slots(): number {
    return this.kv.slots;
  }

  /** Encodes one window [melBins, 3000] and keeps its cross-attention keys and values in slots `slot .. slot + copies - 1`. */
  async encode(slot: number, mel: Float32Array, copies = 1): Promise<void> {
    const shape = this.manifest.speech;
    if (mel.length !== shape.melBins * WINDOW_FRAMES) throw new RangeError(`a window has ${shape.melBins}x${WINDOW_FRAMES} features, not ${mel.length}`);
    const out = await this.encoder.run({ [E.mel]: new ort.Tensor("float32", mel, [1, shape.melBins, WINDOW_FRAMES]) });
    const perSlot = shape.heads * shape.headDim * shape.audioContext;
    if (slot < 0 || copies < 1 || slot + copies > this.slots) throw new RangeError(`slots ${slot}..${slot + copies - 1} are not all among the ${this.slots}`);
    for (let l = 0; l < shape.decoderLayers; l++) {
      for (let c = 0; c < copies; c++) {
        this.crossKeys[l].set(out[E.crossKey(l)].data as Float32Array, (slot + c) * perSlot);
        this.crossValues[l].set(out[E.crossValue(l)].data as Float32Array, (slot + c) * perSlot);
      }
    }
    this.windowOf.fill(this.windows++, slot, slot + copies);
  }

  /**
   * The slot whose window every kept row of a call reads, when they all read the same one (a
   * transcription's beams or candidates), else -1. Gap fillers' outputs are dropped, so any window serves them.
   */
  private sharedWindowSlot(firstSlot: number, keep: readonly boolean[]): number {
    const kept = keep.flatMap((k, r) => (k ? [firstSlot + r] : []));
    if (kept.length === 0) return firstSlot;
    const window = this.windowOf[kept[0]];
    return window >= 0 && kept.every((slot) => this.windowOf[slot] === window) ? kept[0] : -1;
  }

  /**
   * Runs the decoder for consecutive slots `firstSlot ..`, each row taking `tokensPerRow` new tokens after
   * the first `past[r]` cached positions of slot `from[r]` (default its own; all taken as they were
   * before this call). Rows with `keep[r]` false (gap fillers) end with the cache they had.
   */
  async decode(
    firstSlot: number,
    past: readonly number[],
    keep: readonly boolean[],
    tokensPerRow: number,
    tokens: ArrayLike<number>,
    alignment = false,
    from?: readonly number[],
  ): Promise<DecoderOutput> {
    const { kv } = this;
    const shape = this.manifest.speech;
    const rows = past.length;
    const before = Array.from({ length: rows }, (_, r) => kv.lengths[firstSlot + r]);
    const moves: Array<{ from: number; to: number; length: number }> = [];
    for (let r = 0; r < rows; r++) if (keep[r]) moves.push({ from: from?.[r] ?? firstSlot + r, to: firstSlot + r, length: past[r] });
    kv.copyPrefixes(moves);
    let longest = 0;
    for (let r = 0; r < rows; r++) longest = Math.max(longest, kv.lengths[firstSlot + r] + tokensPerRow);
    if (longest > shape.textContext) throw new RangeError(`a window's tokens would reach ${longest} positions, past the decoder's ${shape.textContext}`);
    kv.ensure(longest);
    const cap = kv.capacity;
    const ids = new BigInt64Array(rows * tokensPerRow);
    const positions = new BigInt64Array(rows * tokensPerRow);
    const pastMask = new Float32Array(rows * cap).fill(NEG_INF);
    for (let r = 0; r < rows; r++) {
      const at = kv.lengths[firstSlot + r];
      pastMask.fill(0, r * cap, r * cap + at);
      for (let s = 0; s < tokensPerRow; s++) {
        ids[r * tokensPerRow + s] = BigInt(tokens[r * tokensPerRow + s]);
        positions[r * tokensPerRow + s] = BigInt(Math.min(at + s, shape.textContext - 1));
      }
    }
    const feeds: Record<string, ort.Tensor> = {
      [D.inputIds]: new ort.Tensor("int64", ids, [rows, tokensPerRow]),
      [D.positionIds]: new ort.Tensor("int64", positions, [rows, tokensPerRow]),
      [D.pastMask]: new ort.Tensor("float32", pastMask, [rows, 1, 1, cap]),
      [D.newMask]: new ort.Tensor("float32", causalMask(tokensPerRow), [1, 1, tokensPerRow, tokensPerRow]),
    };
    const stride = kv.slotStride;
    const perSlot = shape.heads * shape.headDim * shape.audioContext;
    // One group of rows when all read one window (its keys and values read once per step), else a group per row.
    const shared = this.sharedWindowSlot(firstSlot, keep);
    const [crossFrom, groups] = shared >= 0 ? [shared, 1] : [firstSlot, rows];
    for (let l = 0; l < shape.decoderLayers; l++) {
      feeds[D.pastKey(l)] = new ort.Tensor("float32", kv.keys[l].subarray(firstSlot * stride, (firstSlot + rows) * stride), [
        rows,
        shape.heads,
        shape.headDim,
        cap,
      ]);
      feeds[D.pastValue(l)] = new ort.Tensor("float32", kv.values[l].subarray(firstSlot * stride, (firstSlot + rows) * stride), [
        rows,
        shape.heads,
        cap,
        shape.headDim,
      ]);
      feeds[D.crossKey(l)] = new ort.Tensor("float32", this.crossKeys[l].subarray(crossFrom * perSlot, (crossFrom + groups) * perSlot), [
        groups,
        shape.heads,
        shape.headDim,
        shape.audioContext,
      ]);
      feeds[D.crossValue(l)] = new ort.Tensor("float32", this.crossValues[l].subarray(crossFrom * perSlot, (crossFrom + groups) * perSlot), [
        groups,
        shape.heads,
        shape.audioContext,
        shape.headDim,
      ]);
    }
    const fetches: string[] = [D.logits];
    for (let l = 0; l < shape.decoderLayers; l++) fetches.push(D.presentKey(l), D.presentValue(l));
    if (alignment) fetches.push(D.alignment);
    const out = await this.decoder.run(feeds, fetches);
    for (let l = 0; l < shape.decoderLayers; l++) {
      kv.append(l, firstSlot, rows, tokensPerRow, out[D.presentKey(l)].data as Float32Array, out[D.presentValue(l)].data as Float32Array);
    }
    kv.advance(firstSlot, rows, tokensPerRow);
    for (let r = 0; r < rows; r++) if (!keep[r]) kv.truncate(firstSlot + r, before[r]);
    return { logits: out[D.logits].data as Float32Array, ...(alignment ? { alignment: out[D.alignment].data as Float32Array } : {}) };
  }

  async release(): Promise<void> {
    await this.encoder.release();
    await this.decoder.release();
  }
}

/** [S, S] additive mask: new token s sees new tokens 0..s. */
function causalMask(tokensPerRow: number): Float32Array {
  const mask = new Float32Array(tokensPerRow * tokensPerRow);
  for (let s = 0; s < tokensPerRow; s++) for (let t = s + 1; t < tokensPerRow; t++) mask[s * tokensPerRow + t] = NEG_INF;
  return mask;
}
