/**
 * From the operator's device choice to the device models run on: `auto` takes WebGPU only on a GPU
 * (a software adapter is ~100x slower than the CPU provider on the same cores), `webgpu` takes any
 * adapter that works and fails otherwise, `cpu` is the CPU.
 */
import type { ComputeDevice, DeviceChoice } from "./index.js";
import { confirmWebGpu } from "./probe.js";
import { type Adapter, type HostView, listAdapters } from "./vulkan-drivers.js";

/** The device a server's models run on, and why. */
export interface DeviceDecision {
  device: ComputeDevice;
  /** The WebGPU adapter, on webgpu; null on the CPU. */
  adapter: Adapter | null;
  /** One line for the log when the choice was not taken as asked (auto falling back to the CPU); else absent. */
  note?: string;
}

/** `--device webgpu` with no adapter that works: the server cannot run as asked. */
export class DeviceUnavailableError extends Error {
  override name = "DeviceUnavailableError";
}

/** Names the adapter when the drivers do not say (a driver kiln does not know, in a place it does not look). */
const UNNAMED_ADAPTER: Adapter = { name: "an adapter the installed Vulkan drivers do not name", software: false, manifest: "" };

/**
 * The decision on the adapters listed (GPUs first), before the provider is tried: throws
 * {@link DeviceUnavailableError} for `webgpu` when no driver gives an adapter.
 */
export function chooseDevice(choice: DeviceChoice, adapters: readonly Adapter[]): DeviceDecision {
  if (choice === "cpu") return { device: "cpu", adapter: null };
  const gpu = adapters.find((a) => !a.software);
  if (choice === "auto") {
    if (gpu) return { device: "webgpu", adapter: gpu };
    const software = adapters.find((a) => a.software);
    const why = software ? `only ${software.name}, a software adapter, which --device webgpu uses` : "no Vulkan driver for a GPU";
    return { device: "cpu", adapter: null, note: `no GPU adapter (${why}); the CPU serves` };
  }
  const adapter = gpu ?? adapters[0];
  if (!adapter) throw new DeviceUnavailableError(noAdapterMessage("no Vulkan driver manifest names a driver"));
  return { device: "webgpu", adapter };
}

/**
 * Decides the device for `choice` on this machine: lists the adapters, then proves the chosen one
 * computes through onnxruntime's WebGPU provider (a driver can be installed and still fail). On
 * `auto` a failure falls back to the CPU with a note; on `webgpu` it throws {@link DeviceUnavailableError}.
 * `confirm` is that proof (null when the provider computes, else why not); unit tests give their own.
 */
export async function resolveDevice(
  choice: DeviceChoice,
  host: HostView = { env: process.env },
  confirm: () => Promise<string | null> = confirmWebGpu,
): Promise<DeviceDecision> {
  if (choice === "cpu") return { device: "cpu", adapter: null };
  const adapters = listAdapters(host);
  let decision: DeviceDecision;
  try {
    decision = chooseDevice(choice, adapters);
  } catch (err) {
    // No driver kiln recognises: the provider may still find one (the loader looks in places kiln does not).
    if (!(err instanceof DeviceUnavailableError) || (await confirm()) !== null) throw err;
    return { device: "webgpu", adapter: UNNAMED_ADAPTER };
  }
  if (decision.device === "cpu") return decision;
  const problem = await confirm();
  if (problem === null) return decision;
  if (choice === "auto") return { device: "cpu", adapter: null, note: `the WebGPU provider failed on ${decision.adapter!.name} (${problem}); the CPU serves` };
  throw new DeviceUnavailableError(noAdapterMessage(`the WebGPU provider failed on ${decision.adapter!.name}: ${problem}`));
}

function noAdapterMessage(why: string): string {
  return `--device webgpu: no WebGPU adapter (${why}); install a Vulkan driver (scripts/setup.sh installs Mesa's lavapipe) or use --device cpu`;
}

/** How the startup line names a decision: "webgpu on NVIDIA H100 80GB HBM3", "webgpu on Mesa lavapipe (software, on the CPU)", "cpu". */
export function describeDevice(decision: Pick<DeviceDecision, "device" | "adapter">): string {
  const adapter = decision.adapter;
  return adapter ? `${decision.device} on ${adapter.name}${adapter.software ? " (software, on the CPU)" : ""}` : decision.device;
}
