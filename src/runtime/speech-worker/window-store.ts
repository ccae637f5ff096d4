/**
 * Where a speech session keeps its encoded windows (each decoder layer's cross-attention keys and
 * values, one window per transcription's run of slots) and how a decoder call gets the windows its
 * rows read, as `[groups, ...]` inputs. On the CPU they live in JavaScript memory and a call's
 * windows are a view; on a GPU they stay on the device ({@link DeviceWindowStore}).
 */
import * as ort from "onnxruntime-node";
import { SPEECH_GRAPH, type WhisperShape } from "../artifact/index.js";

const D = SPEECH_GRAPH.decoder;
const E = SPEECH_GRAPH.encoder;

/** A decoder call's cross-attention inputs, and what to free once the call has run. */
export interface WindowFeeds {
  tensors: Record<string, ort.Tensor>;
  release(): void;
}

export interface WindowStore {
  /** Where the encoder leaves the outputs {@link keep} takes. */
  readonly encoderOutputs: "cpu" | "gpu-buffer";
  /** Keeps the encoder's outputs as window `window`, in place of what it held. */
  keep(window: number, outputs: ort.InferenceSession.ReturnType): void;
  /** The decoder's cross-attention inputs for windows `first .. first + groups - 1`. */
  feeds(first: number, groups: number): Promise<WindowFeeds>;
  dispose(): Promise<void>;
}

/** [heads, head_dim, audio_ctx] keys (transposed) and [heads, audio_ctx, head_dim] values of one window, per layer. */
export function windowDims(shape: WhisperShape, groups: number): { key: number[]; value: number[] } {
  return { key: [groups, shape.heads, shape.headDim, shape.audioContext], value: [groups, shape.heads, shape.audioContext, shape.headDim] };
}

/** The windows in JavaScript memory, [windows, ...] per layer: a call's consecutive windows are one view, no copy. */
export class HostWindowStore implements WindowStore {
  readonly encoderOutputs = "cpu";
  private readonly keys: Float32Array[];
  private readonly values: Float32Array[];
  private readonly perWindow: number;

  constructor(
    private readonly shape: WhisperShape,
    windows: number,
  ) {
    this.perWindow = shape.heads * shape.headDim * shape.audioContext;
    this.keys = Array.from({ length: shape.decoderLayers }, () => new Float32Array(windows * this.perWindow));
    this.values = Array.from({ length: shape.decoderLayers }, () => new Float32Array(windows * this.perWindow));
  }

  keep(window: number, outputs: ort.InferenceSession.ReturnType): void {
    for (let l = 0; l < this.shape.decoderLayers; l++) {
      this.keys[l].set(outputs[E.crossKey(l)].data as Float32Array, window * this.perWindow);
      this.values[l].set(outputs[E.crossValue(l)].data as Float32Array, window * this.perWindow);
    }
  }

  async feeds(first: number, groups: number): Promise<WindowFeeds> {
    const dims = windowDims(this.shape, groups);
    const view = (data: Float32Array) => data.subarray(first * this.perWindow, (first + groups) * this.perWindow);
    const tensors: Record<string, ort.Tensor> = {};
    for (let l = 0; l < this.shape.decoderLayers; l++) {
      tensors[D.crossKey(l)] = new ort.Tensor("float32", view(this.keys[l]), dims.key);
      tensors[D.crossValue(l)] = new ort.Tensor("float32", view(this.values[l]), dims.value);
    }
    return { tensors, release: () => {} };
  }

  async dispose(): Promise<void> {}
}
