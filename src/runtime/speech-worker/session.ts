import { join } from "node:path";
import * as ort from "onnxruntime-node";
import { checkSpeechGraphIo, readSpeechManifest, SPEECH_FILES, SPEECH_GRAPH, type SpeechArtifactManifest, WINDOW_FRAMES } from "../artifact/index.js";
import type { ZerosType } from "../device/device-zeros.js";
import { executionProvidersFor, SESSION_LOG_SEVERITY } from "../device/execution-providers.js";
import { type DecoderCache, HostDecoderCache } from "./decoder-cache.js";
import { DeviceDecoderCache } from "./device-decoder-cache.js";
import { checkAdapterRoom, speechDeviceBytes } from "./device-room.js";
import { DeviceWindowStore } from "./device-window-store.js";
import type { SpeechSessionOptions } from "./protocol.js";
import { HostWindowStore, type WindowStore } from "./window-store.js";

const NEG_INF = -Infinity;
const D = SPEECH_GRAPH.decoder;
const E = SPEECH_GRAPH.encoder;

/** One row of a decoder run: the cached positions it continues from (of slot `from`), whether it keeps its new ones, and its new tokens. */
interface DecoderRow {
  past: number;
  keep: boolean;
  from: number;
  tokens: number[];
}

/** What a decoder call fetches. */
export interface DecodeOutputs {
  /** Each row's logits [rows, vocab]. Default true. */
  logits?: boolean;
  /** The alignment heads' cross-attention weights. Default false. */
  alignment?: boolean;
  /** Each row's `k` likeliest tokens under its rules: `mask` [rows, vocab] is added to the logits (0 or -inf). Default: none. */
  top?: { mask: Float32Array; k: number };
}

/** What one decoder call returns, as {@link DecodeOutputs} asked. */
export interface DecoderOutput {
  /** [rows, vocab]. */
  logits?: Float32Array;
  /** [rows, alignment heads, tokensPerRow, audio context]. */
  alignment?: Float32Array;
  /** [rows, k] token ids and their log-probabilities, likeliest first; an entry at -inf is no token (its id may be -1). */
  top?: { k: number; tokens: Int32Array; logprobs: Float32Array };
}

/**
 * The speech session on the worker thread: the compiled encoder and decoder, the decoder's
 * self-attention KV cache, and the cross-attention keys and values of one 30 s window per run of
 * `rowsPerWindow` consecutive slots (a transcription's rows: its beams or candidates read one window).
 * It runs what it is told for the slots it is told; it never decides who runs.
 */
export class SpeechSession {
  private constructor(
    readonly manifest: SpeechArtifactManifest,
    private readonly encoder: ort.InferenceSession,
    private readonly decoder: ort.InferenceSession,
    readonly kv: DecoderCache,
    /** Consecutive slots that read one window. */
    readonly rowsPerWindow: number,
    private readonly windows: WindowStore,
  ) {}

  static async load(artifactDir: string, options: SpeechSessionOptions = {}): Promise<SpeechSession> {
    const manifest = readSpeechManifest(artifactDir);
    const shape = manifest.speech;
    checkSpeechGraphIo(manifest.speechIo, shape, `the artifact ${manifest.id}`);
    const slots = options.slots ?? 4;
    const rowsPerWindow = options.rowsPerWindow ?? 1;
    if (!Number.isInteger(rowsPerWindow) || rowsPerWindow < 1 || slots % rowsPerWindow !== 0)
      throw new RangeError(`${slots} slots cannot be grouped in runs of ${rowsPerWindow} rows per window`);
    const device = options.device ?? "cpu";
    const sessionOptions: ort.InferenceSession.SessionOptions = {
      intraOpNumThreads: options.threads ?? 2,
      interOpNumThreads: 1,
      graphOptimizationLevel: "all",
      executionMode: "sequential",
      // Idle pool threads sleep instead of spinning, so a text model's worker beside this one keeps its cores.
      extra: { session: { intra_op: { allow_spinning: "0" } } },
    };
    const profiled = (graph: string): ort.InferenceSession.SessionOptions =>
      options.profileFilePrefix ? { enableProfiling: true, profileFilePrefix: `${options.profileFilePrefix}-${graph}` } : {};
    const graphSession = (file: string, graph: string, extra: ort.InferenceSession.SessionOptions = {}) =>
      ort.InferenceSession.create(file, {
        ...sessionOptions,
        ...profiled(graph),
        ...extra,
        executionProviders: executionProvidersFor(device, file),
        logSeverityLevel: SESSION_LOG_SEVERITY,
      });
    // The decoder's outputs all come back to the CPU, its presents being only the call's new positions
    // (see DeviceDecoderCache for why).
    const decoder = await graphSession(join(artifactDir, SPEECH_FILES.decoder), "decoder");
    const type = cacheType(decoder);
    if (device === "cpu" && type !== "float32") {
      await decoder.release();
      throw new RangeError(`the artifact ${manifest.id} computes in ${type}, for a GPU: load it with a GPU device, or compile the CPU artifact`);
    }
    if (device !== "cpu" && options.adapterFreeBytes !== undefined) {
      try {
        checkAdapterRoom(manifest.id, speechDeviceBytes(manifest, slots, rowsPerWindow, type), options.adapterFreeBytes, slots, rowsPerWindow, type);
      } catch (err) {
        await decoder.release();
        throw err;
      }
    }
    const windows = device === "cpu" ? new HostWindowStore(shape, slots / rowsPerWindow) : new DeviceWindowStore(shape, slots / rowsPerWindow, device, type);
    const kv: DecoderCache =
      device === "cpu" ? new HostDecoderCache(manifest.shape, slots) : await DeviceDecoderCache.create(manifest.shape, slots, shape.textContext, device, type);
    // The encoder's outputs go where the windows are kept.
    const encoderOutputs = [...Array(shape.decoderLayers).keys()].flatMap((l) => [E.crossKey(l), E.crossValue(l)]);
    const encoder = await graphSession(join(artifactDir, SPEECH_FILES.encoder), "encoder", {
      preferredOutputLocation: Object.fromEntries(encoderOutputs.map((name) => [name, windows.encoderOutputs])),
    });
    checkSpeechGraphIo(
      {
        encoder: { inputs: [...encoder.inputNames], outputs: [...encoder.outputNames] },
        decoder: { inputs: [...decoder.inputNames], outputs: [...decoder.outputNames] },
      },
      shape,
      `the graphs of ${manifest.id}`,
    );
    return new SpeechSession(manifest, encoder, decoder, kv, rowsPerWindow, windows);
  }

  get slots(): number {
    return this.kv.slots;
  }

  /** Encodes one window [melBins, 3000] and keeps its cross-attention keys and values for every slot of `slot`'s run. */
  async encode(slot: number, mel: Float32Array): Promise<void> {
    const shape = this.manifest.speech;
    if (mel.length !== shape.melBins * WINDOW_FRAMES) throw new RangeError(`a window has ${shape.melBins}x${WINDOW_FRAMES} features, not ${mel.length}`);
    if (!Number.isInteger(slot) || slot < 0 || slot >= this.slots) throw new RangeError(`slot ${slot} is not among the ${this.slots}`);
    const out = await this.encoder.run({ [E.mel]: new ort.Tensor("float32", mel, [1, shape.melBins, WINDOW_FRAMES]) });
    this.windows.keep(Math.floor(slot / this.rowsPerWindow), out);
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
    outputs: DecodeOutputs = {},
    from?: readonly number[],
  ): Promise<DecoderOutput> {
    const rows = past.length;
    const runLength = this.rowsPerWindow;
    const firstWindow = Math.floor(firstSlot / runLength);
    const lastWindow = Math.floor((firstSlot + rows - 1) / runLength);
    const rowsOf = (r: number) => ({
      past: past[r],
      keep: keep[r],
      from: from?.[r] ?? firstSlot + r,
      tokens: Array.from({ length: tokensPerRow }, (_, s) => tokens[r * tokensPerRow + s]),
    });
    if (firstWindow === lastWindow)
      return this.run(
        firstSlot,
        Array.from({ length: rows }, (_, r) => rowsOf(r)),
        tokensPerRow,
        outputs,
        firstWindow,
        1,
      );
    // Rows of several windows: the call widens to their whole runs, the added rows as gap fillers, so
    // that each window's rows form one group of the decoder's cross-attention.
    const start = firstWindow * runLength;
    const widened = Array.from({ length: (lastWindow + 1) * runLength - start }, (_, i) => {
      const r = start + i - firstSlot;
      if (r >= 0 && r < rows) return rowsOf(r);
      return { past: this.kv.lengths[start + i], keep: false, from: start + i, tokens: new Array<number>(tokensPerRow).fill(0) };
    });
    const offset = firstSlot - start;
    const vocab = this.manifest.speech.vocab;
    let widenedOutputs = outputs;
    if (outputs.top) {
      const mask = new Float32Array(widened.length * vocab);
      mask.set(outputs.top.mask.subarray(0, rows * vocab), offset * vocab);
      widenedOutputs = { ...outputs, top: { mask, k: outputs.top.k } };
    }
    const out = await this.run(start, widened, tokensPerRow, widenedOutputs, firstWindow, lastWindow - firstWindow + 1);
    const ours = <T extends Float32Array | Int32Array>(data: T): T => {
      const perRow = data.length / widened.length;
      return data.subarray(offset * perRow, (offset + rows) * perRow) as T;
    };
    return {
      ...(out.logits ? { logits: ours(out.logits) } : {}),
      ...(out.alignment ? { alignment: ours(out.alignment) } : {}),
      ...(out.top ? { top: { k: out.top.k, tokens: ours(out.top.tokens), logprobs: ours(out.top.logprobs) } } : {}),
    };
  }

  /** One decoder run over consecutive slots from `firstSlot`, whose rows read windows `firstWindow ..` in `groups` equal runs. */
  private async run(
    firstSlot: number,
    rowList: readonly DecoderRow[],
    tokensPerRow: number,
    outputs: DecodeOutputs,
    firstWindow: number,
    groups: number,
  ): Promise<DecoderOutput> {
    const { kv } = this;
    const shape = this.manifest.speech;
    const rows = rowList.length;
    await kv.copyPrefixes(rowList.flatMap((row, r) => (row.keep ? [{ from: row.from, to: firstSlot + r, length: row.past }] : [])));
    let longest = 0;
    let furthest = 0;
    for (let r = 0; r < rows; r++) {
      const reach = kv.lengths[firstSlot + r] + tokensPerRow;
      furthest = Math.max(furthest, reach);
      if (rowList[r].keep) longest = Math.max(longest, reach);
    }
    if (longest > shape.textContext) throw new RangeError(`a window's tokens would reach ${longest} positions, past the decoder's ${shape.textContext}`);
    // A gap filler's positions are dropped again, so it may pass the context for this one call.
    const past = await kv.pastFeeds(firstSlot, rows, furthest);
    let out: ort.InferenceSession.ReturnType;
    try {
      const feeds = { ...this.stepFeeds(firstSlot, rowList, tokensPerRow, past.positions, outputs), ...past.tensors };
      const windows = await this.windows.feeds(firstWindow, groups);
      try {
        out = await this.decoder.run({ ...feeds, ...windows.tensors }, decoderFetches(shape.decoderLayers, outputs));
      } finally {
        windows.release();
      }
    } finally {
      past.release();
    }
    await kv.write(
      firstSlot,
      rowList.map((row) => row.keep),
      tokensPerRow,
      out,
    );
    const result: DecoderOutput = {};
    if (outputs.logits ?? true) result.logits = out[D.logits].data as Float32Array;
    if (outputs.alignment) result.alignment = out[D.alignment].data as Float32Array;
    if (outputs.top) result.top = unpackTop(out[D.top]);
    return result;
  }

  /** A decoder call's inputs besides the caches: tokens, positions, masks over a past of `span` positions, and the rules' inputs. */
  private stepFeeds(firstSlot: number, rowList: readonly DecoderRow[], tokensPerRow: number, span: number, outputs: DecodeOutputs): Record<string, ort.Tensor> {
    const shape = this.manifest.speech;
    const rows = rowList.length;
    const ids = new BigInt64Array(rows * tokensPerRow);
    const positions = new BigInt64Array(rows * tokensPerRow);
    const pastMask = new Float32Array(rows * span).fill(NEG_INF);
    for (let r = 0; r < rows; r++) {
      const at = this.kv.lengths[firstSlot + r];
      pastMask.fill(0, r * span, r * span + at);
      for (let s = 0; s < tokensPerRow; s++) {
        ids[r * tokensPerRow + s] = BigInt(rowList[r].tokens[s]);
        positions[r * tokensPerRow + s] = BigInt(Math.min(at + s, shape.textContext - 1));
      }
    }
    // The rules' inputs are fed on every call; a call that asks for no top tokens gets an all-zero mask.
    const ruleMask = outputs.top?.mask.subarray(0, rows * shape.vocab) ?? this.zeroMask(rows * shape.vocab);
    return {
      [D.inputIds]: new ort.Tensor("int64", ids, [rows, tokensPerRow]),
      [D.positionIds]: new ort.Tensor("int64", positions, [rows, tokensPerRow]),
      [D.pastMask]: new ort.Tensor("float32", pastMask, [rows, 1, 1, span]),
      [D.newMask]: new ort.Tensor("float32", causalMask(tokensPerRow), [1, 1, tokensPerRow, tokensPerRow]),
      [D.ruleMask]: new ort.Tensor("float32", ruleMask, [rows, shape.vocab]),
      [D.textTokens]: new ort.Tensor("int64", BigInt64Array.of(BigInt(this.manifest.tokens.timestampBegin)), [1]),
      [D.topK]: new ort.Tensor("int64", BigInt64Array.of(BigInt(Math.min(outputs.top?.k ?? 1, shape.vocab))), [1]),
    };
  }

  /** An all-zero rule mask of `length` floats (never written: a view of one shared buffer). */
  private zeroMask(length: number): Float32Array {
    if (this.zeros.length < length) this.zeros = new Float32Array(length);
    return this.zeros.subarray(0, length);
  }

  private zeros = new Float32Array(0);

  /** Ends the profiles started with `profileFilePrefix` (the encoder's and the decoder's). */
  endProfiling(): void {
    this.encoder.endProfiling();
    this.decoder.endProfiling();
  }

  async release(): Promise<void> {
    await this.kv.dispose();
    await this.windows.dispose();
    await this.encoder.release();
    await this.decoder.release();
  }
}

/** What a decoder call fetches: the new keys and values always, the rest as `outputs` asks. */
function decoderFetches(layers: number, outputs: DecodeOutputs): string[] {
  const fetches: string[] = [];
  if (outputs.logits ?? true) fetches.push(D.logits);
  fetches.push(D.presents);
  if (outputs.alignment) fetches.push(D.alignment);
  if (outputs.top) fetches.push(D.top);
  return fetches;
}

/** The decoder's `top` [rows, 2, k] read apart: each row's k log-probabilities, then their ids. */
function unpackTop(top: ort.Tensor): NonNullable<DecoderOutput["top"]> {
  const [rows, , k] = top.dims;
  const packed = top.data as Float32Array;
  const tokens = new Int32Array(rows * k);
  const logprobs = new Float32Array(rows * k);
  for (let r = 0; r < rows; r++) {
    logprobs.set(packed.subarray(2 * r * k, (2 * r + 1) * k), r * k);
    for (let i = 0; i < k; i++) tokens[r * k + i] = packed[(2 * r + 1) * k + i];
  }
  return { k, tokens, logprobs };
}

/** [S, S] additive mask: new token s sees new tokens 0..s. */
function causalMask(tokensPerRow: number): Float32Array {
  const mask = new Float32Array(tokensPerRow * tokensPerRow);
  for (let s = 0; s < tokensPerRow; s++) for (let t = s + 1; t < tokensPerRow; t++) mask[s * tokensPerRow + t] = NEG_INF;
  return mask;
}

/** The element type of the decoder's cached keys and values (and of the windows'): float16 on a half-precision GPU artifact. */
function cacheType(decoder: ort.InferenceSession): ZerosType {
  const past = decoder.inputMetadata.find((m) => m.name === D.pastKey(0));
  return past && "type" in past && past.type === "float16" ? "float16" : "float32";
}
