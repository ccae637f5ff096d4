import { readFileSync } from "node:fs";
import type { InferenceSession } from "onnxruntime-node";
import type { ComputeDevice } from "./index.js";
import { nodeNamesOf } from "./onnx-nodes.js";

/**
 * Operators the WebGPU provider (onnxruntime-node 1.30) computes wrongly, run on the CPU provider
 * instead, as [domain, op type]. com.microsoft Attention: over 16 positions its outputs differ from
 * the CPU provider's by up to 20% of their range (measured on lavapipe at 64 to 1500 positions with
 * whisper-tiny's shape; exact at 16), which turned Whisper's transcripts into other words.
 */
const WRONG_ON_WEBGPU: ReadonlyArray<readonly [string, string]> = [["com.microsoft", "Attention"]];

/**
 * onnxruntime's log threshold for kiln's sessions on a device: errors only. At onnxruntime's default
 * (warnings) every GPU session says that "some nodes were not assigned to the preferred execution
 * providers": the shape arithmetic that the CPU provider takes on purpose (see
 * {@link executionProvidersFor}), which reads as a fault to whoever starts kiln.
 */
export const SESSION_LOG_SEVERITY = 3;

/**
 * onnxruntime's execution providers for a session on `device`. On WebGPU the CPU provider stays
 * listed after it: nodes the WebGPU provider does not implement (shape arithmetic, say) fall back to
 * it rather than failing the load; and when `graphPath` (the .onnx file, its weights kept apart) is
 * given, its nodes of {@link WRONG_ON_WEBGPU} are sent to it.
 */
export function executionProvidersFor(device: ComputeDevice, graphPath?: string, bufferCache?: WebGpuBufferCache): InferenceSession.ExecutionProviderConfig[] {
  if (device === "cpu") return ["cpu"];
  const graph = graphPath === undefined ? null : readFileSync(graphPath);
  const forceCpuNodeNames = graph ? WRONG_ON_WEBGPU.flatMap(([domain, op]) => nodeNamesOf(graph, op, domain)) : [];
  // onnxruntime-node takes the provider's options beside its name; its typings know only some providers'.
  const webgpu = {
    name: "webgpu",
    ...(forceCpuNodeNames.length > 0 ? { forceCpuNodeNames } : {}),
    ...(bufferCache ? { storageBufferCacheMode: bufferCache } : {}),
  } as InferenceSession.ExecutionProviderConfig;
  return [webgpu, "cpu"];
}

/**
 * How the WebGPU provider keeps the storage buffers its kernels release: "bucket" (onnxruntime's
 * default) keeps a few of each of its size buckets up to 160 MB and gives the rest back to the
 * device, so a step that writes KV pools of tens of MB per layer creates them anew every step;
 * "simple" keeps every released buffer for reuse at its exact size, which holds memory for every
 * shape a session has run. One mode per process: the provider's device context takes the first
 * session's.
 */
export type WebGpuBufferCache = "bucket" | "simple";
