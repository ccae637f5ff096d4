/**
 * Proves onnxruntime's WebGPU provider computes on this machine: a four-float graph run on it, in
 * memory, about 0.1 s. onnxruntime-node says nothing about the adapter it got, only whether it got one.
 */
import type { InferenceSession } from "onnxruntime-node";
import { SESSION_LOG_SEVERITY } from "./execution-providers.js";
import { PROBE_GRAPH, probeGraphBytes } from "./probe-graph.js";

/** null when the WebGPU provider ran the probe graph right; else why not, in one line. */
export async function confirmWebGpu(): Promise<string | null> {
  // onnxruntime loads when a device is probed, not with every command that declares --device.
  const ort = await import("onnxruntime-node");
  let session: InferenceSession | null = null;
  try {
    session = await ort.InferenceSession.create(probeGraphBytes(), { executionProviders: ["webgpu"], logSeverityLevel: SESSION_LOG_SEVERITY });
    const x = Float32Array.from({ length: PROBE_GRAPH.length }, (_, i) => i + 1);
    const out = await session.run({ [PROBE_GRAPH.input]: new ort.Tensor("float32", x, [PROBE_GRAPH.length]) });
    const y = out[PROBE_GRAPH.output].data as Float32Array;
    return y.every((v, i) => v === 2 * x[i]) ? null : `the probe graph computed ${Array.from(y).join(", ")}, not ${Array.from(x, (v) => 2 * v).join(", ")}`;
  } catch (err) {
    return providerProblem(err);
  } finally {
    await session?.release();
  }
}

/** onnxruntime's message without its source location and failed assertion ("... was false. Failed to get a WebGPU adapter: ..."). */
function providerProblem(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return message
    .replace(/^[\s\S]*? was false\.\s*/, "")
    .split("\n")[0]
    .trim();
}
