import { join } from "node:path";
import * as ort from "onnxruntime-node";
import {
  ARTIFACT_FILES,
  type ArtifactManifest,
  checkDeviceGraphIo,
  DEVICE_GRAPH as D,
  deviceGraphIo,
  type DeviceResults,
  KV_GROWTH_POSITIONS,
  kvBytesPerSlot,
  maskWords,
  type ModelShape,
  readManifest,
  servedContextLength,
  slotCopyGraphIo,
  unpackDeviceResults,
} from "../artifact/index.js";
import { executionProvidersFor, SESSION_LOG_SEVERITY } from "../device/execution-providers.js";
import type { AdapterMemory } from "../device/gpu-memory.js";
import { DeviceKvPool, type DevicePoolWrites } from "./device-kv-pool.js";
import type { TextSessionOptions } from "./protocol.js";

/** Positions each slot of a device KV pool holds when the options do not say: the model's context, at most this. */
export const DEFAULT_DEVICE_KV_POSITIONS = 1024;

/**
 * Share of an adapter's free memory, less the model's weights, that the device KV pools take when
 * no KV budget is given; the rest is left to activations, the rows' copies of their past span, and
 * the provider's buffer cache.
 */
export const DEVICE_KV_FREE_SHARE = 0.25;

/**
 * The most positions per slot an adapter's free memory alone gives the device KV pool: a large GPU
 * would otherwise get pools of the model's whole context (131,072 positions for Llama-3.2-1B), each
 * one buffer, beyond what one storage binding of the adapter may hold (Llama-3.1-8B at 64 slots
 * already takes 1 GiB a pool at 4096 positions), and beyond what "fresh" pool writes copy each step
 * in reasonable time. A longer context is served by asking for it with `--kv-memory-mb`.
 */
export const MAX_ADAPTER_KV_POSITIONS = 4096;

/** The adapter's memory as read at load, and the bytes of weights the model is about to add to it. */
export interface AdapterRoom {
  memory: AdapterMemory;
  weightsBytes: number;
}

/** The device KV budget an adapter's memory gives, in bytes: (total - used - weights) x `share` (default {@link DEVICE_KV_FREE_SHARE}), at least 0. */
export function adapterKvMemoryBytes(room: AdapterRoom, share = DEVICE_KV_FREE_SHARE): number {
  return Math.max(0, Math.floor((room.memory.totalBytes - room.memory.usedBytes - room.weightsBytes) * share));
}

/**
 * Positions per slot of a device KV pool: those a KV budget of `kvMemoryBytes` gives every one of
 * `slots` slots (as on the CPU, `servedContextLength`); without a budget, those the adapter's free
 * memory gives ({@link adapterKvMemoryBytes}, at most {@link MAX_ADAPTER_KV_POSITIONS}) when `room`
 * says it and it holds a growth step for every slot; else the model's context, at most {@link DEFAULT_DEVICE_KV_POSITIONS}. Positions
 * are counted at float32's 4 bytes, as on the CPU: a float16 artifact's pool takes half the budget.
 */
export function deviceKvPositions(shape: ModelShape, slots: number, kvMemoryBytes?: number, room?: AdapterRoom): number {
  if (kvMemoryBytes !== undefined) return servedContextLength(shape, slots, kvMemoryBytes);
  const fromAdapter = room === undefined ? 0 : adapterKvMemoryBytes(room);
  if (fromAdapter >= slots * kvBytesPerSlot(shape, KV_GROWTH_POSITIONS))
    return Math.min(servedContextLength(shape, slots, fromAdapter), MAX_ADAPTER_KV_POSITIONS);
  return Math.min(shape.contextLength, DEFAULT_DEVICE_KV_POSITIONS);
}

/** What a device step takes beside the tokens: per row, the constraint bits and logit adjustments; per position, a scored token. */
export interface DeviceStepInputs {
  /** Return every position's results (prompt scoring), not only the last one's. */
  allPositions: boolean;
  /** [rows, maskWords(vocab)] allowed-token bits. */
  tokenMask: Int32Array;
  /** [rows, n] adjustment entries (see DEVICE_GRAPH.adjustIds), n >= 1. */
  adjustIds: BigInt64Array;
  adjustBias: Float32Array;
  adjustRepetition: Float32Array;
  adjustSubtract: Float32Array;
  /** [rows, positions] tokens whose masked logit is returned per position (positions: tokensPerRow with allPositions, else 1). */
  scoreTargets: BigInt64Array;
  /** Bring back the computed positions' final hidden states too (an embedding). Default false: they stay on the device. */
  hidden?: boolean;
}

/** A device step's results, [rows, positions, ...] row-major (see DEVICE_GRAPH.results), and the hidden states where asked for. */
export type DeviceStepOutputs = DeviceResults & {
  /** [rows, positions, hidden] final normalized hidden states (only with `DeviceStepInputs.hidden`). */
  hidden?: Float32Array;
};

/**
 * The text session of a GPU artifact: its step graph and slot-copy graph on onnxruntime's WebGPU
 * provider, and the device KV pool they update. `forward` runs one step for `rows` consecutive slots
 * and returns only each row's candidates, alternatives and log-normalizer; the cache stays on the
 * device and JavaScript never reads a device tensor.
 */
export class WebGpuTextSession {
  /** Milliseconds of the most recent `forward`'s session.run. */
  lastRunMs = 0;

  private constructor(
    readonly manifest: ArtifactManifest,
    private readonly session: ort.InferenceSession,
    private readonly slotCopy: ort.InferenceSession,
    readonly kv: DeviceKvPool,
    /** The attention masks' type: the model's activations' (float16 on a half-precision artifact). */
    private readonly maskType: "float32" | "float16",
  ) {}

  static async load(artifactDir: string, options: TextSessionOptions = {}): Promise<WebGpuTextSession> {
    const manifest = readManifest(artifactDir);
    if (manifest.device !== "webgpu") throw new Error(`the artifact ${manifest.id} was not built for webgpu (its device: ${manifest.device ?? "cpu"})`);
    const { layers } = manifest.shape;
    checkDeviceGraphIo(manifest.io, deviceGraphIo(layers), `the artifact ${manifest.id}`);
    const writes = options.devicePoolWrites ?? "inplace";
    const session = await createDeviceSession(join(artifactDir, ARTIFACT_FILES.graph), deviceGraphIo(layers).outputs, writes, options);
    const slotCopy = await createDeviceSession(join(artifactDir, ARTIFACT_FILES.slotCopyGraph), slotCopyGraphIo(layers).outputs, writes, options);
    checkDeviceGraphIo({ inputs: [...session.inputNames], outputs: [...session.outputNames] }, deviceGraphIo(layers), `the graph of ${manifest.id}`);
    checkDeviceGraphIo(
      { inputs: [...slotCopy.inputNames], outputs: [...slotCopy.outputNames] },
      slotCopyGraphIo(layers),
      `the slot-copy graph of ${manifest.id}`,
    );
    const capacity = options.deviceKvPositions ?? deviceKvPositions(manifest.shape, options.slots ?? 1);
    const pastMask = session.inputMetadata.find((m) => m.name === D.pastMask);
    const maskType = pastMask && "type" in pastMask && pastMask.type === "float16" ? "float16" : "float32";
    // The pools are in the activations' type, as the masks are.
    const kv = await DeviceKvPool.create(manifest.shape, options.slots ?? 1, capacity, slotCopy, options.device ?? "webgpu", maskType, writes);
    return new WebGpuTextSession(manifest, session, slotCopy, kv, maskType);
  }

  get vocab(): number {
    return this.manifest.shape.vocab;
  }

  /** Words of one row's constraint mask. */
  get maskWords(): number {
    return maskWords(this.vocab);
  }

  /** One step over slots [firstSlot, firstSlot + rows), each taking `tokensPerRow` of `tokens`. */
  async forward(firstSlot: number, rows: number, tokensPerRow: number, tokens: ArrayLike<number>, inputs: DeviceStepInputs): Promise<DeviceStepOutputs> {
    const { shape } = this.manifest;
    const { kv } = this;
    // Checked here: out of range on the device is no error but a wrong write or a crash of the process.
    if (rows < 1 || tokensPerRow < 1) throw new RangeError(`a device step needs at least one row and one token (asked ${rows} x ${tokensPerRow})`);
    if (firstSlot < 0 || firstSlot + rows > kv.slots)
      throw new RangeError(`slots ${firstSlot}..${firstSlot + rows - 1} are not all among the pool's ${kv.slots}`);
    for (let i = 0; i < rows * tokensPerRow; i++) {
      if (!(tokens[i] >= 0 && tokens[i] < shape.vocab)) throw new RangeError(`token id ${tokens[i]} is outside the vocabulary (0..${shape.vocab - 1})`);
    }
    let longest = 0;
    for (let r = 0; r < rows; r++) longest = Math.max(longest, kv.lengths[firstSlot + r] + tokensPerRow);
    if (longest > shape.contextLength) throw new RangeError(`step would reach ${longest} positions, past the context of ${shape.contextLength}`);
    if (!kv.fits(longest)) throw new RangeError(`step would reach ${longest} positions, past the device KV pool's ${kv.capacity} per slot`);
    // The past span covers every row's positions after the step (never a zero-length past): what a row has not cached is masked.
    const span = kv.pastSpan(longest);
    const ids = new BigInt64Array(rows * tokensPerRow);
    const positions = new BigInt64Array(rows * tokensPerRow);
    const pastMask = new Float32Array(rows * span).fill(-Infinity);
    for (let r = 0; r < rows; r++) {
      const past = kv.lengths[firstSlot + r];
      pastMask.fill(0, r * span, r * span + past);
      for (let s = 0; s < tokensPerRow; s++) {
        ids[r * tokensPerRow + s] = BigInt(tokens[r * tokensPerRow + s]);
        positions[r * tokensPerRow + s] = BigInt(past + s);
      }
    }
    const group = shape.heads / shape.kvHeads;
    const adjustments = inputs.adjustIds.length / rows;
    const scored = inputs.allPositions ? tokensPerRow : 1;
    const feeds: Record<string, ort.Tensor> = {
      [D.inputIds]: new ort.Tensor("int64", ids, [rows, tokensPerRow]),
      [D.positionIds]: new ort.Tensor("int64", positions, [rows, tokensPerRow]),
      [D.pastMask]: this.mask(pastMask, [rows, 1, 1, span]),
      [D.newMask]: this.mask(causalMask(group, tokensPerRow), [1, 1, group * tokensPerRow, tokensPerRow]),
      [D.logitsFrom]: new ort.Tensor("int64", BigInt64Array.of(inputs.allPositions ? 0n : -1n), [1]),
      [D.firstSlot]: new ort.Tensor("int64", BigInt64Array.of(BigInt(firstSlot)), [1]),
      [D.tokenMask]: new ort.Tensor("int32", inputs.tokenMask, [rows, this.maskWords]),
      [D.adjustIds]: new ort.Tensor("int64", inputs.adjustIds, [rows, adjustments]),
      [D.adjustBias]: new ort.Tensor("float32", inputs.adjustBias, [rows, adjustments]),
      [D.adjustRepetition]: new ort.Tensor("float32", inputs.adjustRepetition, [rows, adjustments]),
      [D.adjustSubtract]: new ort.Tensor("float32", inputs.adjustSubtract, [rows, adjustments]),
      [D.scoreTargets]: new ort.Tensor("int64", inputs.scoreTargets, [rows, scored]),
    };
    // The hidden states leave the device only for a step that embeds.
    const wanted = this.session.outputNames.filter((name) => name !== D.hidden || inputs.hidden === true);
    const fetches: Record<string, ort.Tensor | null> = Object.fromEntries(wanted.map((name) => [name, null]));
    kv.bindPools(feeds, fetches);
    const t0 = performance.now();
    const out = await this.session.run(feeds, fetches);
    this.lastRunMs = performance.now() - t0;
    kv.replacePools(out);
    kv.advance(firstSlot, rows, tokensPerRow);
    // The outputs that live on the CPU (see createDeviceSession).
    const results = unpackDeviceResults(out[D.results].data as Float32Array, rows, scored, shape.vocab);
    return inputs.hidden ? { ...results, hidden: out[D.hidden].data as Float32Array } : results;
  }

  /** An additive mask (0 or -inf) as a tensor of the graph's mask type. */
  private mask(values: Float32Array, dims: number[]): ort.Tensor {
    if (this.maskType === "float32") return new ort.Tensor("float32", values, dims);
    const halves = new Uint16Array(values.length);
    for (let i = 0; i < values.length; i++) halves[i] = values[i] === 0 ? 0 : HALF_NEGATIVE_INFINITY;
    return new ort.Tensor("float16", halves, dims);
  }

  /** Ends a profile started with `profileFilePrefix` (the step graph's; the slot-copy graph's too). */
  endProfiling(): void {
    this.session.endProfiling();
    this.slotCopy.endProfiling();
  }

  async release(): Promise<void> {
    await this.kv.dispose();
    await this.session.release();
    await this.slotCopy.release();
  }
}

/** -Infinity as an IEEE half's bits. */
const HALF_NEGATIVE_INFINITY = 0xfc00;

/**
 * A WebGPU session whose KV pool outputs stay on the device and whose other outputs come to the CPU.
 * Pools written in place are given to each run as its fetches; onnxruntime-node writes a device tensor
 * given so only where the output's preferred location is not "gpu-buffer" (there it allocates anew).
 */
async function createDeviceSession(path: string, outputs: string[], writes: DevicePoolWrites, options: TextSessionOptions): Promise<ort.InferenceSession> {
  const location: Record<string, ort.Tensor.DataLocation> = {};
  for (const name of outputs) location[name] = name.startsWith("kv_") && writes === "fresh" ? "gpu-buffer" : "cpu";
  return ort.InferenceSession.create(path, {
    executionProviders: executionProvidersFor("webgpu", path, options.webgpuBufferCache),
    logSeverityLevel: SESSION_LOG_SEVERITY,
    intraOpNumThreads: options.threads ?? 2,
    interOpNumThreads: 1,
    graphOptimizationLevel: options.graphOptimizationLevel ?? "all",
    executionMode: "sequential",
    preferredOutputLocation: location,
    ...(options.profileFilePrefix ? { enableProfiling: true, profileFilePrefix: options.profileFilePrefix } : {}),
  });
}

/** [group*S, S] additive mask: query row (g, s) sees new keys 0..s. */
function causalMask(group: number, tokensPerRow: number): Float32Array {
  const mask = new Float32Array(group * tokensPerRow * tokensPerRow);
  for (let g = 0; g < group; g++) {
    for (let s = 0; s < tokensPerRow; s++) {
      const row = (g * tokensPerRow + s) * tokensPerRow;
      for (let t = s + 1; t < tokensPerRow; t++) mask[row + t] = -Infinity;
    }
  }
  return mask;
}
