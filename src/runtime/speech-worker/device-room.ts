/**
 * What a speech session keeps on a GPU, counted before it allocates: an adapter that cannot hold it
 * refuses the model with the figures, instead of failing an allocation halfway through loading (or
 * later, at the first long transcription) with the driver's out-of-memory error.
 */
import type { SpeechArtifactManifest } from "../artifact/index.js";
import type { ZerosType } from "../device/device-zeros.js";

/** Bytes a speech session holds on its device, by part. */
export interface SpeechDeviceBytes {
  /** The artifact's weights (its files, as the manifest lists them). */
  weights: number;
  /** Keys and values of every decoder layer for every slot at the whole text context (the decoder cache). */
  decoderCache: number;
  /** Every window's cross-attention keys and values, one window per run of slots. */
  windows: number;
  /** The encoder's largest transient: one layer's attention scores and probabilities over a window. */
  encoderWork: number;
}

/** The parts' sum. */
export const totalBytes = (b: SpeechDeviceBytes): number => b.weights + b.decoderCache + b.windows + b.encoderWork;

/** {@link SpeechDeviceBytes} of `manifest` at `slots` slots in runs of `rowsPerWindow`, its caches in `type`. */
export function speechDeviceBytes(manifest: SpeechArtifactManifest, slots: number, rowsPerWindow: number, type: ZerosType): SpeechDeviceBytes {
  const s = manifest.speech;
  const element = type === "float16" ? 2 : 4;
  // A slot holds the text context plus the position where rows not kept write theirs (DeviceDecoderCache).
  const decoderCache = 2 * s.decoderLayers * slots * (s.textContext + 1) * s.heads * s.headDim * element;
  const windows = 2 * s.decoderLayers * (slots / rowsPerWindow) * s.audioContext * s.heads * s.headDim * element;
  const encoderWork = 2 * s.heads * s.audioContext * s.audioContext * element;
  return { weights: manifest.files.reduce((n, f) => n + f.bytes, 0), decoderCache, windows, encoderWork };
}

const gib = (bytes: number) => `${(bytes / 2 ** 30).toFixed(bytes < 2 ** 30 ? 2 : 1)} GiB`;

/** A speech session that the adapter's free memory cannot hold. */
export class AdapterMemoryError extends Error {
  constructor(
    readonly artifactId: string,
    readonly needed: SpeechDeviceBytes,
    readonly freeBytes: number,
    slots: number,
    rowsPerWindow: number,
    type: ZerosType,
  ) {
    super(
      `${artifactId} needs about ${gib(totalBytes(needed))} of the adapter's memory (weights ${gib(needed.weights)}, decoder cache ${gib(needed.decoderCache)} for ${slots} rows, ` +
        `windows ${gib(needed.windows)} for ${slots / rowsPerWindow} transcriptions, encoder ${gib(needed.encoderWork)}) and ${gib(freeBytes)} are free: ` +
        `decode fewer transcriptions or beams at once${type === "float32" ? ", or load the float16 GPU artifact (half of every part)" : ""}`,
    );
    this.name = "AdapterMemoryError";
  }
}

/** Throws {@link AdapterMemoryError} when `needed` (with caches of `type`) is more than `freeBytes`. */
export function checkAdapterRoom(
  artifactId: string,
  needed: SpeechDeviceBytes,
  freeBytes: number,
  slots: number,
  rowsPerWindow: number,
  type: ZerosType,
): void {
  if (totalBytes(needed) > freeBytes) throw new AdapterMemoryError(artifactId, needed, freeBytes, slots, rowsPerWindow, type);
}
