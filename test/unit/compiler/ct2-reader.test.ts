import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { Ct2FormatError, Ct2Model } from "../../../src/compiler/ct2/reader.js";
import { f32ToBf16, f32ToF16 } from "../../../src/compiler/gguf/fp16.js";
import { tempDir } from "./support.js";

type Dtype = "float32" | "int8" | "int16" | "float16" | "bfloat16";
const TYPE_ID: Record<Dtype, number> = { float32: 0, int8: 1, int16: 2, float16: 4, bfloat16: 5 };

/** A CTranslate2 string: u16 length counting the NUL, the bytes, the NUL. */
function str(s: string): Buffer {
  const bytes = Buffer.from(s, "utf8");
  const len = Buffer.alloc(2);
  len.writeUInt16LE(bytes.length + 1);
  return Buffer.concat([len, bytes, Buffer.from([0])]);
}

const u32 = (v: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(v);
  return b;
};

function variable(name: string, dims: number[], dtype: Dtype, data: Buffer): Buffer {
  return Buffer.concat([str(name), Buffer.from([dims.length]), ...dims.map(u32), Buffer.from([TYPE_ID[dtype]]), u32(data.length), data]);
}

function modelBin(vars: Buffer[], aliases: Array<[string, string]>, version = 6): Buffer {
  return Buffer.concat([
    u32(version),
    str("WhisperSpec"),
    u32(3),
    u32(vars.length),
    ...vars,
    u32(aliases.length),
    ...aliases.flatMap(([a, t]) => [str(a), str(t)]),
  ]);
}

const f32 = (xs: number[]) => Buffer.from(new Float32Array(xs).buffer);
const f16 = (xs: number[]) => Buffer.from(new Uint16Array(xs.map(f32ToF16)).buffer);
const bf16 = (xs: number[]) => Buffer.from(new Uint16Array(xs.map(f32ToBf16)).buffer);

describe("CTranslate2 model.bin reader", () => {
  const dir = tempDir("kiln-ct2-");

  function write(name: string, bytes: Buffer): string {
    const path = join(dir, name);
    writeFileSync(path, bytes);
    return path;
  }

  it("reads float32, float16, bfloat16, int8 with per-row scales, scalars and aliases", () => {
    const path = write(
      "model.bin",
      modelBin(
        [
          variable("a/weight", [2, 3], "float32", f32([1, -2, 3.5, 4, 5, -6])),
          variable("b/weight", [4], "float16", f16([0.5, -1.25, 2048, 0])),
          variable("c/weight", [2], "bfloat16", bf16([1.5, -3])),
          // int8 rows with scales 127/amax: row 0 amax 2, row 1 amax 0.5.
          variable("d/weight", [2, 2], "int8", Buffer.from(new Int8Array([127, -64, 127, 0]).buffer)),
          variable("d/weight_scale", [2], "float32", f32([127 / 2, 127 / 0.5])),
          variable("num_heads", [], "int16", Buffer.from(new Int16Array([6]).buffer)),
        ],
        [["proj/weight", "a/weight"]],
      ),
    );
    const model = Ct2Model.open(path);
    try {
      expect(model.specName).toBe("WhisperSpec");
      expect(model.specRevision).toBe(3);
      expect(model.names()).toHaveLength(6);
      expect(Array.from(model.floats("a/weight"))).toEqual([1, -2, 3.5, 4, 5, -6]);
      expect(Array.from(model.floats("b/weight"))).toEqual([0.5, -1.25, 2048, 0]);
      expect(Array.from(model.floats("c/weight"))).toEqual([1.5, -3]);
      const d = model.floats("d/weight");
      expect(d[0]).toBeCloseTo(2, 5);
      expect(d[1]).toBeCloseTo((-64 * 2) / 127, 5);
      expect(d[2]).toBeCloseTo(0.5, 5);
      expect(d[3]).toBe(0);
      expect(model.scalar("num_heads")).toBe(6);
      expect(model.dims("proj/weight")).toEqual([2, 3]);
      expect(Array.from(model.floats("proj/weight"))).toEqual([1, -2, 3.5, 4, 5, -6]);
      expect(model.variable("b/weight").dtype).toBe("float16");
      expect(model.weightDtype("d/weight", "a/weight")).toBe("int8");
      expect(model.weightDtype("d/weight", "b/weight")).toBe("int8_float16");
    } finally {
      model.close();
    }
  });

  it("refuses an int8 weight without its scale", () => {
    const path = write("noscale.bin", modelBin([variable("w", [1, 2], "int8", Buffer.from([1, 2]))], []));
    const model = Ct2Model.open(path);
    try {
      expect(() => model.floats("w")).toThrow(/no w_scale/);
    } finally {
      model.close();
    }
  });

  it("names what is wrong with a bad file", () => {
    const good = modelBin([variable("w", [2], "float32", f32([1, 2]))], []);
    expect(() => Ct2Model.open(write("truncated.bin", good.subarray(0, good.length - 10)))).toThrow(Ct2FormatError);
    expect(() => Ct2Model.open(write("version.bin", modelBin([], [], 99)))).toThrow(/binary version 99/);
    const wrongBytes = Buffer.concat([u32(6), str("WhisperSpec"), u32(3), u32(1), str("w"), Buffer.from([1]), u32(2), Buffer.from([0]), u32(4), f32([1])]);
    expect(() => Ct2Model.open(write("bytes.bin", wrongBytes))).toThrow(/declares 4 bytes, expected 8/);
    const dtype = Buffer.concat([u32(6), str("WhisperSpec"), u32(3), u32(1), str("w"), Buffer.from([1]), u32(1), Buffer.from([9]), u32(4), f32([1])]);
    expect(() => Ct2Model.open(write("dtype.bin", dtype))).toThrow(/unknown dtype id 9/);
    expect(() => Ct2Model.open(write("alias.bin", modelBin([], [["x", "missing"]])))).toThrow(/missing variable missing/);
  });
});
