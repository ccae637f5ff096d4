/** `--device auto|cpu|webgpu`, shared by the commands that run models, and its resolution on this machine. */
import type { ServerDevice } from "../api/device.js";
import { type DeviceDecision, describeDevice, DeviceUnavailableError, resolveDevice } from "../runtime/device/choose.js";
import { DEVICE_CHOICES, type DeviceChoice } from "../runtime/device/index.js";
import type { CommandIO } from "./command.js";
import { option } from "./options.js";

export const deviceOption = option.choice(DEVICE_CHOICES, {
  env: "KILN_DEVICE",
  default: "auto",
  description:
    "where the models run: webgpu (onnxruntime's WebGPU provider, Dawn over Vulkan, on any adapter that works, a software one such as Mesa's lavapipe included), cpu, or auto: webgpu on a GPU, else the CPU (saying why on stderr)",
});

/** `--activations float32|float16`: the precision of the GPU artifacts a command loads or builds. */
export const activationsOption = option.choice(["float32", "float16"], {
  env: "KILN_ACTIVATIONS",
  default: "float32",
  description:
    "on a GPU (--device webgpu), the precision the models' GPU artifacts compute in: float32, or float16 (half the bytes of weights, KV caches and Whisper's windows; about 0.004 nats of KL from the CPU's next-token distributions on whisper tiny.en). A text model whose track promoted a GPU artifact serves that one. Ignored on the CPU",
});

/**
 * Resolves `--device` for command `command`: auto's fallback to the CPU is said in one line on
 * stderr; webgpu with no working adapter throws an Error whose message is that one line.
 */
export async function chooseDevice(command: string, choice: DeviceChoice, io: CommandIO): Promise<DeviceDecision> {
  try {
    const decision = await resolveDevice(choice);
    if (decision.note) io.stderr.write(`kiln ${command}: ${decision.note}\n`);
    return decision;
  } catch (err) {
    if (err instanceof DeviceUnavailableError) throw new Error(err.message);
    throw err;
  }
}

/** How the HTTP layer names a decision (/health, /metrics). */
export function serverDevice(decision: DeviceDecision): ServerDevice {
  return { device: decision.device, adapter: decision.adapter?.name ?? null, software: decision.adapter?.software ?? false };
}

export { describeDevice };
