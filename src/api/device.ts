/** The device this server's models run on, as /health and /metrics name it (`kiln serve --device` decides it). */
import type { ComputeDevice } from "../runtime/device/index.js";

export interface ServerDevice {
  /** Where the models run: onnxruntime's CPU provider, or its WebGPU provider. */
  device: ComputeDevice;
  /** The WebGPU adapter's name ("NVIDIA H100 80GB HBM3", "Mesa lavapipe"); null on the CPU. */
  adapter: string | null;
  /** The adapter is a software rasterizer on the CPU (lavapipe), not a GPU; false on the CPU device. */
  software: boolean;
}

/** What a server that was told nothing about its device runs on. */
export const CPU_DEVICE: ServerDevice = { device: "cpu", adapter: null, software: false };
