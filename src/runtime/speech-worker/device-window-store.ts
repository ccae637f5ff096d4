/**
 * The windows on a GPU: the encoder's outputs stay device tensors (`gpu-buffer`), fed to the decoder
 * as they are and never read by JavaScript. Sending them from JavaScript instead would upload every
 * layer's keys and values at every decoder step (for large-v3, about 490 MB a step). A call whose
 * rows read several windows gets them joined on the device by a small Concat graph (cached per
 * window count), freed after the call.
 */
import * as ort from "onnxruntime-node";
import { SPEECH_GRAPH, type WhisperShape } from "../artifact/index.js";
import type { ZerosType } from "../device/device-zeros.js";
import { executionProvidersFor, SESSION_LOG_SEVERITY } from "../device/execution-providers.js";
import type { ComputeDevice } from "../device/index.js";
import { ElementType, smallGraphBytes } from "../onnx/small-graph.js";
import { windowDims, type WindowFeeds, type WindowStore } from "./window-store.js";

const D = SPEECH_GRAPH.decoder;
const E = SPEECH_GRAPH.encoder;

interface DeviceWindow {
  keys: ort.Tensor[];
  values: ort.Tensor[];
}

export class DeviceWindowStore implements WindowStore {
  readonly encoderOutputs = "gpu-buffer";
  private readonly windows: Array<DeviceWindow | undefined>;
  private readonly joins = new Map<number, Promise<ort.InferenceSession>>();
  /** Stands in for a window never encoded (its rows are only gap fillers): zeros, uploaded when used. */
  private blank: DeviceWindow | undefined;

  constructor(
    private readonly shape: WhisperShape,
    windows: number,
    private readonly device: ComputeDevice,
    /** The encoder's keys and values' type: float16 on a half-precision artifact. */
    private readonly type: ZerosType = "float32",
  ) {
    this.windows = new Array<DeviceWindow | undefined>(windows);
  }

  keep(window: number, outputs: ort.InferenceSession.ReturnType): void {
    const layers = Array.from({ length: this.shape.decoderLayers }, (_, l) => l);
    this.release(this.windows[window]);
    this.windows[window] = { keys: layers.map((l) => outputs[E.crossKey(l)]), values: layers.map((l) => outputs[E.crossValue(l)]) };
  }

  async feeds(first: number, groups: number): Promise<WindowFeeds> {
    const windows = Array.from({ length: groups }, (_, g) => this.windows[first + g] ?? this.blankWindow());
    const tensors: Record<string, ort.Tensor> = {};
    if (groups === 1) {
      windows[0].keys.forEach((t, l) => (tensors[D.crossKey(l)] = t));
      windows[0].values.forEach((t, l) => (tensors[D.crossValue(l)] = t));
      return { tensors, release: () => {} };
    }
    const join = await this.joinSession(groups);
    const inputs: Record<string, ort.Tensor> = {};
    windows.forEach((w, g) => {
      w.keys.forEach((t, l) => (inputs[joinInput("key", l, g)] = t));
      w.values.forEach((t, l) => (inputs[joinInput("value", l, g)] = t));
    });
    const joined = await join.run(inputs);
    for (let l = 0; l < this.shape.decoderLayers; l++) {
      tensors[D.crossKey(l)] = joined[joinOutput("key", l)];
      tensors[D.crossValue(l)] = joined[joinOutput("value", l)];
    }
    return { tensors, release: () => Object.values(joined).forEach(disposeOnDevice) };
  }

  async dispose(): Promise<void> {
    this.windows.forEach((w) => this.release(w));
    this.windows.fill(undefined);
    for (const join of this.joins.values()) await (await join).release();
    this.joins.clear();
  }

  private release(window: DeviceWindow | undefined): void {
    if (!window) return;
    window.keys.forEach(disposeOnDevice);
    window.values.forEach(disposeOnDevice);
  }

  private blankWindow(): DeviceWindow {
    const dims = windowDims(this.shape, 1);
    const count = (d: number[]) => d.reduce((a, b) => a * b, 1);
    const zeros = (d: number[]) =>
      this.type === "float16" ? new ort.Tensor("float16", new Uint16Array(count(d)), d) : new ort.Tensor("float32", new Float32Array(count(d)), d);
    this.blank ??= {
      keys: Array.from({ length: this.shape.decoderLayers }, () => zeros(dims.key)),
      values: Array.from({ length: this.shape.decoderLayers }, () => zeros(dims.value)),
    };
    return this.blank;
  }

  /** The graph joining `groups` windows along the first axis, every layer's keys and values, its outputs left on the device. */
  private joinSession(groups: number): Promise<ort.InferenceSession> {
    let session = this.joins.get(groups);
    if (!session) {
      const bytes = joinGraphBytes(this.shape, groups, this.type === "float16" ? ElementType.float16 : ElementType.float);
      const outputs = Array.from({ length: this.shape.decoderLayers }, (_, l) => [joinOutput("key", l), joinOutput("value", l)]).flat();
      session = ort.InferenceSession.create(bytes, {
        executionProviders: executionProvidersFor(this.device),
        logSeverityLevel: SESSION_LOG_SEVERITY,
        preferredOutputLocation: Object.fromEntries(outputs.map((name) => [name, "gpu-buffer" as const])),
      });
      this.joins.set(groups, session);
    }
    return session;
  }
}

const joinInput = (kind: "key" | "value", layer: number, group: number) => `${kind}.${layer}.${group}`;
const joinOutput = (kind: "key" | "value", layer: number) => `${kind}.${layer}`;

function joinGraphBytes(shape: WhisperShape, groups: number, element: typeof ElementType.float | typeof ElementType.float16): Uint8Array {
  const one = windowDims(shape, 1);
  const all = windowDims(shape, groups);
  const layers = Array.from({ length: shape.decoderLayers }, (_, l) => l);
  const kinds = ["key", "value"] as const;
  const groupList = Array.from({ length: groups }, (_, g) => g);
  return smallGraphBytes({
    name: `join_${groups}_windows`,
    nodes: layers.flatMap((l) =>
      kinds.map((kind) => ({ op: "Concat", inputs: groupList.map((g) => joinInput(kind, l, g)), outputs: [joinOutput(kind, l)], attributes: { axis: 0 } })),
    ),
    inputs: layers.flatMap((l) => kinds.flatMap((kind) => groupList.map((g) => ({ name: joinInput(kind, l, g), type: element, dims: one[kind] })))),
    outputs: layers.flatMap((l) => kinds.map((kind) => ({ name: joinOutput(kind, l), type: element, dims: all[kind] }))),
  });
}

function disposeOnDevice(t: ort.Tensor): void {
  if (t.location === "gpu-buffer") t.dispose();
}
