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
 * onnxruntime's execution providers for a session on `device`. On WebGPU the CPU provider stays
 * listed after it: nodes the WebGPU provider does not implement (shape arithmetic, say) fall back to
 * it rather than failing the load; and when `graphPath` (the .onnx file, its weights kept apart) is
 * given, its nodes of {@link WRONG_ON_WEBGPU} are sent to it.
 */
export function executionProvidersFor(device: ComputeDevice, graphPath?: string): InferenceSession.ExecutionProviderConfig[] {
  if (device === "cpu") return ["cpu"];
  const graph = graphPath === undefined ? null : readFileSync(graphPath);
  const forceCpuNodeNames = graph ? WRONG_ON_WEBGPU.flatMap(([domain, op]) => nodeNamesOf(graph, op, domain)) : [];
  // onnxruntime-node takes the provider's options beside its name; its typings know only some providers'.
  const webgpu = { name: "webgpu", ...(forceCpuNodeNames.length > 0 ? { forceCpuNodeNames } : {}) } as InferenceSession.ExecutionProviderConfig;
  return [webgpu, "cpu"];
}
