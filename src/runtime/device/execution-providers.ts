import type { InferenceSession } from "onnxruntime-node";
import type { ComputeDevice } from "./index.js";

/**
 * onnxruntime's execution providers for a session on `device`. On WebGPU the CPU provider stays
 * listed after it: nodes the WebGPU provider does not implement (shape arithmetic, say) fall back
 * to it rather than failing the load.
 */
export function executionProvidersFor(device: ComputeDevice): InferenceSession.ExecutionProviderConfig[] {
  return device === "webgpu" ? ["webgpu", "cpu"] : ["cpu"];
}
