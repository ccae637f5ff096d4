import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { GraphBuilder } from "../../../../src/compiler/onnx/graph-builder.js";
import { DataType } from "../../../../src/compiler/onnx/onnx-proto.js";
import { executionProvidersFor } from "../../../../src/runtime/device/execution-providers.js";
import { nodeNamesOf } from "../../../../src/runtime/device/onnx-nodes.js";

const dir = mkdtempSync(join(tmpdir(), "kiln-providers-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Two com.microsoft Attention nodes between default-domain ones, weights in a file beside the graph. */
function attentionGraph(): string {
  const g = new GraphBuilder(join(dir, "graph.onnx.data"));
  let x = g.input("x", DataType.FLOAT, [1, "seq", 8]);
  const w = g.weight("w", DataType.FLOAT, [8, 24], new Float32Array(8 * 24));
  const b = g.weight("b", DataType.FLOAT, [24], new Float32Array(24));
  for (let layer = 0; layer < 2; layer++) {
    x = g.op("Attention", [x, w, b], { domain: "com.microsoft", attributes: { num_heads: 2 } });
    x = g.op("Add", [x, x]);
  }
  g.node("Identity", [x], { names: ["y"] });
  g.output("y", DataType.FLOAT, [1, "seq", 8]);
  const path = join(dir, "graph.onnx");
  writeFileSync(path, g.finish("graph", "0", {}));
  return path;
}

describe("execution providers by device", () => {
  it("the CPU device is the CPU provider alone", () => {
    expect(executionProvidersFor("cpu", attentionGraph())).toEqual(["cpu"]);
  });

  it("WebGPU sends the graph's com.microsoft Attention nodes to the CPU provider listed after it", () => {
    const path = attentionGraph();
    const [webgpu, cpu] = executionProvidersFor("webgpu", path);
    expect(cpu).toBe("cpu");
    const names = (webgpu as unknown as { forceCpuNodeNames: string[] }).forceCpuNodeNames;
    expect(names).toHaveLength(2);
    expect(webgpu).toEqual({ name: "webgpu", forceCpuNodeNames: names });
    expect(nodeNamesOf(readFileSync(path), "Add")).toHaveLength(2);
    // Without the graph, nothing is moved.
    expect(executionProvidersFor("webgpu")).toEqual([{ name: "webgpu" }, "cpu"]);
  });
});
