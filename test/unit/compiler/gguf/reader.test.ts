import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  GgmlType,
  GgufValueType,
  SUPPORTED_GGML_TYPES,
  dequantize,
  ggmlByteLength,
  ggmlTypeTraits,
  readGguf,
  readTensorBytes,
  readTensorF32,
  getTensor,
  type GgufValue,
} from "../../../../src/compiler/gguf/index.js";
import { GgufWeights } from "../../../../src/compiler/gguf-weights.js";
import { meta, writeGguf, type TensorSpec } from "../../../fixtures/gguf/write-gguf.js";
import { FIXTURES, bitMismatches, fixtureJson, pseudoRandomBytes, tempDir } from "./helpers.js";

const dir = tempDir();
let fileNo = 0;
const nextPath = () => join(dir, `f${fileNo++}.gguf`);

/** A tensor of `type` with valid random data: fp16 scale bytes are kept finite. */
function tensorOf(type: GgmlType, name: string, dims: number[], seed: number): TensorSpec {
  const elements = dims.reduce((a, b) => a * b, 1);
  const data = pseudoRandomBytes(ggmlByteLength(type, elements), seed);
  return { name, dims, type, data };
}

const ALL_TYPES_TENSORS: TensorSpec[] = [
  tensorOf(GgmlType.F32, "a.f32", [3, 5], 1),
  tensorOf(GgmlType.F16, "b.f16", [7], 2),
  tensorOf(GgmlType.BF16, "c.bf16", [2, 2, 2, 2], 3),
  tensorOf(GgmlType.Q4_0, "d.q4_0", [64, 3], 4),
  tensorOf(GgmlType.Q4_1, "e.q4_1", [32, 1, 2], 5),
  tensorOf(GgmlType.Q8_0, "f.q8_0", [96, 2], 6),
  tensorOf(GgmlType.Q4_K, "g.q4_k", [256, 2], 7),
  tensorOf(GgmlType.Q6_K, "h.q6_k", [512], 8),
  tensorOf(GgmlType.Q5_0, "i.q5_0", [32, 2], 9),
  tensorOf(GgmlType.Q5_K, "j.q5_k", [256], 10),
];

describe("readGguf round trip", () => {
  it("reads every metadata value type, nested arrays and 64-bit edge cases", async () => {
    const path = nextPath();
    await writeGguf(path, {
      metadata: [
        ["general.architecture", meta.str("llama")],
        ["u8", meta.u8(255)],
        ["i8", meta.i8(-128)],
        ["u16", meta.u16(65535)],
        ["i16", meta.i16(-32768)],
        ["u32", meta.u32(4294967295)],
        ["i32", meta.i32(-2147483648)],
        ["f32", meta.f32(1e-5)],
        ["bool.true", meta.bool(true)],
        ["bool.false", meta.bool(false)],
        ["string", meta.str("héllo ✓ \u0000 \n")],
        ["string.empty", meta.str("")],
        ["u64.safe", meta.u64(Number.MAX_SAFE_INTEGER)],
        ["u64.big", meta.u64(2n ** 64n - 1n)],
        ["i64.neg", meta.i64(-(2 ** 40))],
        ["i64.min", meta.i64(-(2n ** 63n))],
        ["i64.unsafe", meta.i64(2n ** 53n)],
        ["f64", meta.f64(Math.PI)],
        ["arr.u8", meta.arr(GgufValueType.UINT8, [0, 1, 255])],
        ["arr.f32", meta.arr(GgufValueType.FLOAT32, [0.5, -2])],
        ["arr.str", meta.arr(GgufValueType.STRING, ["a", "", "Ġthe"])],
        ["arr.bool", meta.arr(GgufValueType.BOOL, [true, false])],
        ["arr.u64", meta.arr(GgufValueType.UINT64, [1, 2n ** 60n])],
        ["arr.empty", meta.arr(GgufValueType.INT32, [])],
        [
          "arr.nested",
          meta.arr(GgufValueType.ARRAY, [
            meta.sub(GgufValueType.INT16, [-1, 2]),
            meta.sub(GgufValueType.STRING, ["x"]),
            meta.sub(GgufValueType.ARRAY, [meta.sub(GgufValueType.BOOL, [true])]),
            meta.sub(GgufValueType.FLOAT64, []),
          ]),
        ],
        ["__proto__", meta.str("just a key")],
      ],
    });
    const file = await readGguf(path);
    expect({ ...file.metadata }).toEqual({
      "general.architecture": "llama",
      u8: 255,
      i8: -128,
      u16: 65535,
      i16: -32768,
      u32: 4294967295,
      i32: -2147483648,
      f32: Math.fround(1e-5),
      "bool.true": true,
      "bool.false": false,
      string: "héllo ✓ \u0000 \n",
      "string.empty": "",
      "u64.safe": Number.MAX_SAFE_INTEGER,
      "u64.big": 2n ** 64n - 1n,
      "i64.neg": -(2 ** 40),
      "i64.min": -(2n ** 63n),
      "i64.unsafe": 2n ** 53n,
      f64: Math.PI,
      "arr.u8": [0, 1, 255],
      "arr.f32": [0.5, -2],
      "arr.str": ["a", "", "Ġthe"],
      "arr.bool": [true, false],
      "arr.u64": [1, 2n ** 60n],
      "arr.empty": [],
      "arr.nested": [[-1, 2], ["x"], [[true]], []],
      ["__proto__"]: "just a key",
    });
    expect(Object.keys(file.metadata)).toContain("__proto__");
    expect(file.tensors).toEqual([]);
  });

  it("lays out tensors of every supported type and reads back their bytes", async () => {
    expect(new Set(ALL_TYPES_TENSORS.map((t) => t.type))).toEqual(SUPPORTED_GGML_TYPES);
    const path = nextPath();
    const written = await writeGguf(path, { metadata: [["general.architecture", meta.str("llama")]], tensors: ALL_TYPES_TENSORS });
    const file = await readGguf(path);
    expect(file).toMatchObject({ path, version: 3, alignment: 32, fileSize: written.length });
    expect(file.dataOffset % 32).toBe(0);
    expect(file.tensors.map(({ name, dims, type }) => ({ name, dims, type }))).toEqual(ALL_TYPES_TENSORS.map(({ name, dims, type }) => ({ name, dims, type })));
    for (const [i, t] of file.tensors.entries()) {
      const spec = ALL_TYPES_TENSORS[i];
      expect(t.offset % 32).toBe(0);
      expect(t.elementCount).toBe(spec.dims.reduce((a, b) => a * b, 1));
      expect(t.byteLength).toBe(spec.data.length);
      expect(await readTensorBytes(file, t)).toEqual(spec.data);
    }
  });

  it("dequantizes a tensor straight from the file", async () => {
    const path = nextPath();
    await writeGguf(path, { tensors: ALL_TYPES_TENSORS });
    const file = await readGguf(path);
    const spec = ALL_TYPES_TENSORS.find((t) => t.type === GgmlType.Q4_K)!;
    const values = await readTensorF32(file, getTensor(file, spec.name));
    expect(bitMismatches(values, dequantize(spec.type, spec.data, 512))).toEqual([]);
  });

  it("reads a tensor a run of rows at a time, with the same values as whole", async () => {
    const path = nextPath();
    await writeGguf(path, { tensors: ALL_TYPES_TENSORS });
    const weights = new GgufWeights(await readGguf(path));
    for (const spec of ALL_TYPES_TENSORS) {
      const whole = await weights.floats(spec.name);
      // A chunk of one row's float32 bytes: every row its own piece.
      const pieces: Float32Array[] = [];
      for await (const piece of weights.floatRows(spec.name, spec.dims[0] * 4)) pieces.push(piece);
      expect(pieces.length, spec.name).toBe(whole.length / spec.dims[0]);
      const joined = new Float32Array(whole.length);
      let at = 0;
      for (const p of pieces) {
        joined.set(p, at);
        at += p.length;
      }
      expect(bitMismatches(joined, whole), spec.name).toEqual([]);
    }
  });

  for (const alignment of [1, 8, 64, 256]) {
    it(`honours general.alignment = ${alignment}`, async () => {
      const path = nextPath();
      await writeGguf(path, { alignment, tensors: ALL_TYPES_TENSORS });
      const file = await readGguf(path);
      expect(file.alignment).toBe(alignment);
      expect(file.dataOffset % alignment).toBe(0);
      for (const [i, t] of file.tensors.entries()) {
        expect((t.offset - file.dataOffset) % alignment).toBe(0);
        expect(await readTensorBytes(file, t)).toEqual(ALL_TYPES_TENSORS[i].data);
      }
    });
  }

  it("reads version 2 files", async () => {
    const path = nextPath();
    await writeGguf(path, { version: 2, metadata: [["k", meta.u32(7)]], tensors: ALL_TYPES_TENSORS.slice(0, 2) });
    const file = await readGguf(path);
    expect(file.version).toBe(2);
    expect(file.metadata.k).toBe(7);
    expect(file.tensors).toHaveLength(2);
  });

  it("reads a large vocabulary across many read chunks", async () => {
    const tokens = Array.from({ length: 60_000 }, (_, i) => `tok${i}_${"x".repeat(i % 37)}`);
    const longString = "ü".repeat(700_000); // 1.4 MB: larger than one read chunk
    const path = nextPath();
    await writeGguf(path, {
      metadata: [
        ["tokenizer.ggml.tokens", meta.arr(GgufValueType.STRING, tokens)],
        [
          "tokenizer.ggml.token_type",
          meta.arr(
            GgufValueType.INT32,
            tokens.map((_, i) => i % 6),
          ),
        ],
        ["long", meta.str(longString)],
        ["after", meta.u8(9)],
      ],
      tensors: ALL_TYPES_TENSORS,
    });
    const file = await readGguf(path);
    expect(file.metadata["tokenizer.ggml.tokens"]).toEqual(tokens);
    expect((file.metadata["tokenizer.ggml.token_type"] as number[])[59_999]).toBe(59_999 % 6);
    expect(file.metadata.long).toBe(longString);
    expect(file.metadata.after).toBe(9);
    expect(await readTensorBytes(file, file.tensors[7])).toEqual(ALL_TYPES_TENSORS[7].data);
  });
});

interface PythonExpectation {
  version: number;
  alignment: number;
  metadata: Record<string, unknown>;
  tensors: Array<{ name: string; type: GgmlType; dims: number[]; values: number[] }>;
}

/** JSON cannot hold bigints; the fixture spells them {"bigint": "..."}. */
function revive(value: unknown): GgufValue {
  if (Array.isArray(value)) return value.map(revive);
  if (value && typeof value === "object" && "bigint" in value) return BigInt((value as { bigint: string }).bigint);
  return value as GgufValue;
}

describe("a file written by gguf-py", () => {
  const expected = fixtureJson<PythonExpectation>("python-written.json");
  const path = join(FIXTURES, "python-written.gguf");

  it("has the metadata gguf-py wrote", async () => {
    const file = await readGguf(path);
    expect(file.version).toBe(expected.version);
    expect(file.alignment).toBe(expected.alignment);
    const want = Object.fromEntries(Object.entries(expected.metadata).map(([k, v]) => [k, revive(v)]));
    expect({ ...file.metadata }).toEqual(want);
  });

  it("has the tensors gguf-py wrote, with the values gguf-py dequantizes", async () => {
    const file = await readGguf(path);
    expect(file.tensors.map(({ name, type, dims }) => ({ name, type, dims }))).toEqual(expected.tensors.map(({ name, type, dims }) => ({ name, type, dims })));
    for (const want of expected.tensors) {
      const values = await readTensorF32(file, getTensor(file, want.name));
      expect(bitMismatches(values, Float32Array.from(want.values)), want.name).toEqual([]);
    }
  });
});

describe("type sizes", () => {
  it("byte length follows block size", () => {
    expect(ggmlByteLength(GgmlType.Q8_0, 576 * 49152)).toBe(30081024);
    expect(ggmlByteLength(GgmlType.Q4_1, 576 * 576)).toBe((576 * 576 * 20) / 32);
    expect(ggmlTypeTraits(GgmlType.Q6_K)).toEqual({ blockSize: 256, bytesPerBlock: 210 });
    expect(() => ggmlByteLength(GgmlType.Q4_0, 33)).toThrow(RangeError);
  });
});
