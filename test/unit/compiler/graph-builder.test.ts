import { readFileSync } from "node:fs";
import * as ort from "onnxruntime-node";
import { describe, expect, it } from "vitest";
import { GraphBuilder } from "../../../src/compiler/onnx/graph-builder.js";
import { DataType } from "../../../src/compiler/onnx/onnx-proto.js";
import { buildAndRun, decodeMessage, floatTensor, messages, tempDir, text } from "./support.js";

const dir = tempDir("kiln-graph-builder-");

const f32 = (...v: number[]) => new Float32Array(v);
const values = (t: ort.Tensor) => [...(t.data as Float32Array)];

describe("GraphBuilder graphs run in onnxruntime-node", () => {
  it("adds an external weight and multiplies by an external matrix", async () => {
    const x = f32(1, 2, 3, 4, 5, 6); // [2, 3]
    const bias = f32(0.5, -1, 10);
    // W [3, 4], row-major
    const w = f32(1, 0, 0, 1, 0, 1, 0, 2, 0, 0, 1, 3);
    const { outputs } = await buildAndRun(
      dir,
      "add-matmul",
      (g) => {
        const input = g.input("x", DataType.FLOAT, [2, 3]);
        const sum = g.op("Add", [input, g.weight("bias", DataType.FLOAT, [3], bias)], { names: ["sum"] });
        g.op("MatMul", [sum, g.weight("w", DataType.FLOAT, [3, 4], w)], { names: ["prod"] });
        g.output("sum", DataType.FLOAT, [2, 3]);
        g.output("prod", DataType.FLOAT, [2, 4]);
      },
      { x: floatTensor(x, [2, 3]) },
    );
    expect(values(outputs.sum)).toEqual([1.5, 1, 13, 4.5, 4, 16]);
    // row 0 = [1.5, 1, 13]: [1.5, 1, 13, 1.5 + 2 + 39]
    // row 1 = [4.5, 4, 16]: [4.5, 4, 16, 4.5 + 8 + 48]
    expect(outputs.prod.dims).toEqual([2, 4]);
    expect(values(outputs.prod)).toEqual([1.5, 1, 13, 42.5, 4.5, 4, 16, 60.5]);
  });

  it("feeds an inline int64 constant (Reshape's shape) and accepts symbolic dims", async () => {
    const x = f32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11);
    const { outputs } = await buildAndRun(
      dir,
      "reshape",
      (g) => {
        const input = g.input("x", DataType.FLOAT, ["batch", 6]);
        g.op("Reshape", [input, g.int64s([-1, 3])], { names: ["y"] });
        g.output("y", DataType.FLOAT, ["rows", 3]);
      },
      { x: floatTensor(x, [2, 6]) },
    );
    expect(outputs.y.dims).toEqual([4, 3]);
    expect(values(outputs.y)).toEqual([...x]);
  });

  it("names every output of a multi-output node", async () => {
    const x = f32(1, 2, 3, 4, 5, 6); // [2, 3]
    let generated: string[] = [];
    const { outputs } = await buildAndRun(
      dir,
      "split",
      (g) => {
        const input = g.input("x", DataType.FLOAT, [2, 3]);
        g.node("Split", [input, g.int64s([1, 2])], { attributes: { axis: 1 }, names: ["left", "right"] });
        // Default names for a 2-output node, then routed to graph outputs.
        generated = g.node("TopK", [input, g.int64s([1])], { attributes: { axis: -1 }, outputs: 2 });
        g.op("Identity", [generated[0]], { names: ["top"] });
        g.op("Identity", [generated[1]], { names: ["arg"] });
        for (const [name, shape] of [
          ["left", [2, 1]],
          ["right", [2, 2]],
          ["top", [2, 1]],
        ] as const)
          g.output(name, DataType.FLOAT, [...shape]);
        g.output("arg", DataType.INT64, [2, 1]);
      },
      { x: floatTensor(x, [2, 3]) },
    );
    expect(generated).toHaveLength(2);
    expect(new Set(generated).size).toBe(2);
    expect(values(outputs.left)).toEqual([1, 4]);
    expect(values(outputs.right)).toEqual([2, 3, 5, 6]);
    expect(values(outputs.top)).toEqual([3, 6]);
    expect([...(outputs.arg.data as BigInt64Array)]).toEqual([2n, 2n]);
  });

  it("encodes every attribute kind (int, negative int, ints, float, floats, string)", async () => {
    const x = f32(-2, 4, 1, 3); // [1, 4]
    const { outputs } = await buildAndRun(
      dir,
      "attributes",
      (g) => {
        const input = g.input("x", DataType.FLOAT, [1, 4]);
        g.op("LeakyRelu", [input], { attributes: { alpha: { float: 0.25 } }, names: ["leaky"] });
        g.op("Constant", [], { attributes: { value_floats: { floats: [1.5, -0.125] } }, names: ["floats"] });
        g.op("Constant", [], { attributes: { value_float: { float: 3.25 } }, names: ["float"] });
        g.op("Constant", [], { attributes: { value_ints: [-1, 0, 2 ** 40] }, names: ["ints"] });
        g.op("Constant", [], { attributes: { value_int: -7 }, names: ["int"] });
        // string attribute: reflect padding of 2 on the left of the last axis
        g.op("Pad", [input, g.int64s([0, 2, 0, 0])], { attributes: { mode: "reflect" }, names: ["padded"] });
        // negative axis attribute
        g.op("Concat", [input, input], { attributes: { axis: -1 }, names: ["twice"] });
        g.output("leaky", DataType.FLOAT, [1, 4]);
        g.output("floats", DataType.FLOAT, [2]);
        g.output("float", DataType.FLOAT, []);
        g.output("ints", DataType.INT64, [3]);
        g.output("int", DataType.INT64, []);
        g.output("padded", DataType.FLOAT, [1, 6]);
        g.output("twice", DataType.FLOAT, [1, 8]);
      },
      { x: floatTensor(x, [1, 4]) },
    );
    expect(values(outputs.leaky)).toEqual([-0.5, 4, 1, 3]);
    expect(values(outputs.floats)).toEqual([1.5, -0.125]);
    expect(values(outputs.float)).toEqual([3.25]);
    expect([...(outputs.ints.data as BigInt64Array)]).toEqual([-1n, 0n, 2n ** 40n]);
    expect([...(outputs.int.data as BigInt64Array)]).toEqual([-7n]);
    expect(values(outputs.padded)).toEqual([1, 4, -2, 4, 1, 3]);
    expect(values(outputs.twice)).toEqual([-2, 4, 1, 3, -2, 4, 1, 3]);
  });

  it("rejects a non-integer number attribute (must be spelled {float})", () => {
    const g = new GraphBuilder(`${dir}/reject.data`);
    g.input("x", DataType.FLOAT, [1]);
    g.op("LeakyRelu", ["x"], { attributes: { alpha: 0.5 } });
    expect(() => g.finish("reject", "test", {})).toThrow(/float/);
  });
});

describe("GraphBuilder constants", () => {
  it("shares identical constants and keeps different ones apart", () => {
    const g = new GraphBuilder(`${dir}/dedup.data`);
    const a = g.int64s([0, 0, 8, 32]);
    const b = g.int64s([0, 0, 8, 32]);
    const c = g.int64s([0, 0, 32, 8]);
    const scalar = g.constant(DataType.FLOAT, [], f32(1), "f32");
    const scalar2 = g.constant(DataType.FLOAT, [], new Float32Array([1, 2]).subarray(0, 1), "f32");
    const vector = g.constant(DataType.FLOAT, [1], f32(1), "f32"); // same bytes, other shape
    const asInt = g.constant(DataType.INT32, [], new Int32Array([0x3f800000]), "i32"); // same bytes, other type
    expect(b).toBe(a);
    expect(scalar2).toBe(scalar);
    expect(new Set([a, c, scalar, vector, asInt]).size).toBe(5);

    const graph = decodeMessage(messages(decodeMessage(g.finish("dedup", "test", {})), 7)[0]);
    const initializerNames = messages(graph, 5).map((t) => text(messages(decodeMessage(t), 8)[0]));
    expect(initializerNames.sort()).toEqual([a, c, scalar, vector, asInt].sort());
  });

  it("copies constant data, so later changes to the source array do not leak in", async () => {
    const source = f32(1, 2, 3);
    const { outputs } = await buildAndRun(
      dir,
      "const-copy",
      (g) => {
        const input = g.input("x", DataType.FLOAT, [3]);
        const k = g.constant(DataType.FLOAT, [3], source);
        source[0] = 100;
        g.op("Add", [input, k], { names: ["y"] });
        g.output("y", DataType.FLOAT, [3]);
      },
      { x: floatTensor(f32(0, 0, 0), [3]) },
    );
    expect(values(outputs.y)).toEqual([1, 2, 3]);
  });

  it("writes only the viewed bytes of a weight given as a subarray", async () => {
    const backing = f32(9, 9, 1, 2, 3, 9);
    const { outputs } = await buildAndRun(
      dir,
      "subarray-weight",
      (g) => {
        const input = g.input("x", DataType.FLOAT, [3]);
        g.op("Add", [input, g.weight("w", DataType.FLOAT, [3], backing.subarray(2, 5))], { names: ["y"] });
        g.output("y", DataType.FLOAT, [3]);
      },
      { x: floatTensor(f32(0, 0, 0), [3]) },
    );
    expect(values(outputs.y)).toEqual([1, 2, 3]);
  });
});

/** external_data entries of every external initializer: name -> {location, offset, length}. */
function externalEntries(graphBytes: Uint8Array): Map<string, Record<string, string>> {
  const graph = decodeMessage(messages(decodeMessage(graphBytes), 7)[0]);
  const out = new Map<string, Record<string, string>>();
  for (const t of messages(graph, 5)) {
    const fields = decodeMessage(t);
    const entries = messages(fields, 13);
    if (entries.length === 0) continue;
    // data_location (field 14) must be EXTERNAL (1)
    expect(fields.find((f) => f.field === 14)?.value).toBe(1n);
    const kv: Record<string, string> = {};
    for (const e of entries) {
      const ef = decodeMessage(e);
      kv[text(messages(ef, 1)[0])] = text(messages(ef, 2)[0]);
    }
    out.set(text(messages(fields, 8)[0]), kv);
  }
  return out;
}

describe("GraphBuilder external data file", () => {
  it("starts every weight on a 64-byte boundary, zero-padded, and records exact offsets", async () => {
    const a = new Uint8Array([1, 2, 3, 4, 5]);
    const b = f32(0.5, -1.5, 2.5); // 12 bytes
    const c = BigInt64Array.from([1n, -2n, 3n, -4n, 5n, -6n, 7n, -8n]); // exactly 64 bytes
    const d = new Uint8Array([200]);
    const { outputs, dataPath, graph } = await buildAndRun(
      dir,
      "alignment",
      (g) => {
        const parts = [
          g.weight("a", DataType.UINT8, [5], a),
          g.weight("b", DataType.FLOAT, [3], b),
          g.weight("c", DataType.INT64, [8], c),
          g.weight("d", DataType.UINT8, [1], d),
        ].map((w) => g.op("Cast", [w], { attributes: { to: DataType.FLOAT } }));
        g.op("Concat", parts, { attributes: { axis: 0 }, names: ["all"] });
        g.output("all", DataType.FLOAT, [17]);
      },
      {},
    );
    // ORT read each weight back from the data file at the recorded offset.
    expect(values(outputs.all)).toEqual([1, 2, 3, 4, 5, 0.5, -1.5, 2.5, 1, -2, 3, -4, 5, -6, 7, -8, 200]);

    const entries = externalEntries(graph);
    expect(Object.fromEntries(entries)).toEqual({
      a: { location: "model.onnx.data", offset: "0", length: "5" },
      b: { location: "model.onnx.data", offset: "64", length: "12" },
      c: { location: "model.onnx.data", offset: "128", length: "64" },
      d: { location: "model.onnx.data", offset: "192", length: "1" },
    });

    const file = new Uint8Array(readFileSync(dataPath));
    expect(file.length).toBe(193);
    const expected = new Uint8Array(193);
    expected.set(a, 0);
    expected.set(new Uint8Array(b.buffer), 64);
    expected.set(new Uint8Array(c.buffer), 128);
    expected.set(d, 192);
    expect(file).toEqual(expected);
  });
});

describe("GraphBuilder model proto", () => {
  it("writes ir_version, producer, opsets, unique node names and metadata", () => {
    const g = new GraphBuilder(`${dir}/proto.data`);
    const x = g.input("x", DataType.FLOAT, [1]);
    g.op("Relu", [g.op("Relu", [g.op("Relu", [x])])], { names: ["y"] });
    g.output("y", DataType.FLOAT, [1]);
    const model = decodeMessage(g.finish("tiny", "9.9.9", { kiln_artifact: "abc", other: "é" }));

    expect(model.find((f) => f.field === 1)?.value).toBe(10n);
    expect(text(messages(model, 2)[0])).toBe("kiln");
    expect(text(messages(model, 3)[0])).toBe("9.9.9");
    const opsets = messages(model, 8).map((o) => {
      const f = decodeMessage(o);
      return [text(messages(f, 1)[0] ?? new Uint8Array()), Number(f.find((x) => x.field === 2)?.value)];
    });
    expect(opsets).toEqual([
      ["", 21],
      ["com.microsoft", 1],
    ]);
    const metadata = messages(model, 14).map((m) => {
      const f = decodeMessage(m);
      return [text(messages(f, 1)[0]), text(messages(f, 2)[0])];
    });
    expect(metadata).toEqual([
      ["kiln_artifact", "abc"],
      ["other", "é"],
    ]);
    const graph = decodeMessage(messages(model, 7)[0]);
    expect(text(messages(graph, 2)[0])).toBe("tiny");
    const nodeNames = messages(graph, 1).map((n) => text(messages(decodeMessage(n), 3)[0]));
    expect(nodeNames).toHaveLength(3);
    expect(new Set(nodeNames).size).toBe(3);
  });
});
