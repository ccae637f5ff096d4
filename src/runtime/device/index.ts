/**
 * Devices a model's graphs run on. A device adds files under this folder (its probe, its session
 * options), not branches through the engine: the scheduler only ever sees a loaded model.
 */

/** Where a loaded model's graphs run: onnxruntime's CPU provider, or its WebGPU provider (Dawn over Vulkan). */
export type ComputeDevice = "cpu" | "webgpu";

/** What an operator asks for with `--device`: `auto` picks WebGPU on a hardware adapter, else the CPU. */
export type DeviceChoice = "auto" | ComputeDevice;

export const DEVICE_CHOICES: readonly DeviceChoice[] = ["auto", "cpu", "webgpu"];
