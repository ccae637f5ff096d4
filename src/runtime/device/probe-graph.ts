/**
 * The smallest graph that proves a provider computes: y = x + x over four floats, so a probe needs
 * no file on disk.
 */
import { ElementType, smallGraphBytes } from "../onnx/small-graph.js";

/** The graph's input and output names, and its input length. */
export const PROBE_GRAPH = { input: "x", output: "y", length: 4 } as const;

/** ModelProto bytes: one Add node. */
export function probeGraphBytes(): Uint8Array {
  const value = (name: string) => ({ name, type: ElementType.float, dims: [PROBE_GRAPH.length] });
  return smallGraphBytes({
    name: "device_probe",
    nodes: [{ op: "Add", inputs: [PROBE_GRAPH.input, PROBE_GRAPH.input], outputs: [PROBE_GRAPH.output] }],
    inputs: [value(PROBE_GRAPH.input)],
    outputs: [value(PROBE_GRAPH.output)],
  });
}
