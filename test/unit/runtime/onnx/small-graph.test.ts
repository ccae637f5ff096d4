import * as ort from "onnxruntime-node";
import { describe, expect, it } from "vitest";
import { ElementType, smallGraphBytes } from "../../../../src/runtime/onnx/small-graph.js";

describe("smallGraphBytes", () => {
  it("writes a model onnxruntime loads and runs: named and fixed dimensions, integer attributes", async () => {
    const bytes = smallGraphBytes({
      name: "join",
      nodes: [{ op: "Concat", inputs: ["a", "b"], outputs: ["c"], attributes: { axis: 0 } }],
      inputs: [
        { name: "a", type: ElementType.float, dims: ["rows", 2] },
        { name: "b", type: ElementType.float, dims: ["more", 2] },
      ],
      outputs: [{ name: "c", type: ElementType.float, dims: ["all", 2] }],
    });
    const session = await ort.InferenceSession.create(bytes);
    expect(session.inputNames).toEqual(["a", "b"]);
    const out = await session.run({
      a: new ort.Tensor("float32", Float32Array.of(1, 2), [1, 2]),
      b: new ort.Tensor("float32", Float32Array.of(3, 4, 5, 6), [2, 2]),
    });
    expect(out.c.dims).toEqual([3, 2]);
    expect(Array.from(out.c.data as Float32Array)).toEqual([1, 2, 3, 4, 5, 6]);
    await session.release();
  });

  it("writes integer-list attributes", async () => {
    const bytes = smallGraphBytes({
      name: "turn",
      nodes: [{ op: "Transpose", inputs: ["a"], outputs: ["b"], attributes: { perm: [1, 0] } }],
      inputs: [{ name: "a", type: ElementType.float, dims: [2, 3] }],
      outputs: [{ name: "b", type: ElementType.float, dims: [3, 2] }],
    });
    const session = await ort.InferenceSession.create(bytes);
    const out = await session.run({ a: new ort.Tensor("float32", Float32Array.of(1, 2, 3, 4, 5, 6), [2, 3]) });
    expect(out.b.dims).toEqual([3, 2]);
    expect(Array.from(out.b.data as Float32Array)).toEqual([1, 4, 2, 5, 3, 6]);
    await session.release();
  });

  it("refuses an attribute it cannot write", () => {
    expect(() =>
      smallGraphBytes({
        name: "bad",
        nodes: [{ op: "Concat", inputs: ["a"], outputs: ["c"], attributes: { axis: -1 } }],
        inputs: [{ name: "a", type: ElementType.float, dims: [1] }],
        outputs: [{ name: "c", type: ElementType.float, dims: [1] }],
      }),
    ).toThrow(/non-negative/);
  });
});
