/**
 * The devices the track measures on. The CPU lane is the track as it always was; the GPU lane
 * measures GPU candidates (weight bits and block size, static or dynamic shapes, graph capture)
 * against a WebGPU incumbent, only where a hardware WebGPU adapter is present: a software adapter
 * (lavapipe) runs the graphs ~100x slower than the CPU provider, so nothing measured there says
 * anything about a GPU. Where none is present, the GPU candidates are recorded as skipped, with why.
 */
import type { ComputeDevice } from "../runtime/device/index.js";
import { resolveDevice } from "../runtime/device/choose.js";
import { DEFAULT_SETTINGS, type TrackSettings } from "./settings.js";

/** Whether a hardware WebGPU adapter is here: its name, or why not. */
export type GpuPresence = { present: true; adapter: string } | { present: false; reason: string };

/** Asks whether the GPU lane can be measured here (the real one: {@link probeHardwareGpu}; tests pass fakes). */
export type GpuProbe = () => Promise<GpuPresence>;

/** The device probe of the runtime, as the track asks it: a GPU adapter that runs the WebGPU provider, never a software one. */
export const probeHardwareGpu: GpuProbe = async () => {
  try {
    const decision = await resolveDevice("auto");
    if (decision.device === "webgpu" && decision.adapter && !decision.adapter.software) return { present: true, adapter: decision.adapter.name };
    return { present: false, reason: decision.note ?? "no hardware WebGPU adapter" };
  } catch (err) {
    return { present: false, reason: `the device probe failed: ${(err as Error).message.split("\n")[0]}` };
  }
};

/** The GPU lane's starting incumbent: the default compile built for WebGPU, with the serving defaults. */
export const GPU_DEFAULT_SETTINGS: Readonly<TrackSettings> = { ...DEFAULT_SETTINGS, device: "webgpu" };

/** A candidate judged against an incumbent of another device: never, whatever the figures say. */
export class CrossDeviceComparisonError extends Error {
  constructor(incumbent: ComputeDevice, candidate: ComputeDevice) {
    super(`a ${candidate} candidate is never judged against the ${incumbent} incumbent: each device is compared with its own`);
    this.name = "CrossDeviceComparisonError";
  }
}

/** Throws {@link CrossDeviceComparisonError} unless both run on one device. */
export function assertSameDevice(incumbent: Pick<TrackSettings, "device">, candidate: Pick<TrackSettings, "device">): void {
  if (incumbent.device !== candidate.device) throw new CrossDeviceComparisonError(incumbent.device, candidate.device);
}

/** The reason recorded for a GPU candidate not measured because no hardware adapter is here. */
export function skippedReason(presence: Extract<GpuPresence, { present: false }>): string {
  return `skipped: not measured, no hardware WebGPU adapter here (${presence.reason})`;
}

/** Whether a record's reason says it was skipped rather than measured. */
export function wasSkipped(reason: string): boolean {
  return reason.startsWith("skipped:");
}
