import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  GgmlType,
  GgufBadAlignmentError,
  GgufBadMagicError,
  GgufBadOffsetError,
  GgufBadShapeError,
  GgufBadValueTypeError,
  GgufDuplicateKeyError,
  GgufDuplicateTensorError,
  GgufError,
  GgufMissingTensorError,
  GgufTruncatedError,
  GgufUnsupportedTensorTypeError,
  GgufUnsupportedVersionError,
  GgufValueType,
  getTensor,
  readGguf,
} from "../../../../src/compiler/gguf/index.js";
import { buildGguf, meta, writeGguf, type GgufSpec, type TensorSpec } from "../../../fixtures/gguf/write-gguf.js";
import { tempDir } from "./helpers.js";

const dir = tempDir();
let fileNo = 0;
const nextPath = () => join(dir, `bad${fileNo++}.gguf`);

const q8 = (name: string, blocks = 2): TensorSpec => ({
  name,
  dims: [32, blocks],
  type: GgmlType.Q8_0,
  data: new Uint8Array(34 * blocks),
});

const GOOD: GgufSpec = {
  metadata: [
    ["general.architecture", meta.str("llama")],
    ["tokenizer.ggml.tokens", meta.arr(GgufValueType.STRING, ["a", "b", "c"])],
  ],
  tensors: [q8("one"), q8("two")],
};

/** Expects reading to fail with `cls`, a GgufError whose message names the file. */
async function expectFailure(bytesOrSpec: Uint8Array | GgufSpec, cls: new (...args: never[]) => GgufError, message?: RegExp) {
  const path = nextPath();
  if (bytesOrSpec instanceof Uint8Array) await writeFile(path, bytesOrSpec);
  else await writeGguf(path, bytesOrSpec);
  const error = await readGguf(path).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(cls);
  expect(error).toBeInstanceOf(GgufError);
  const { message: text, file } = error as GgufError;
  expect(file).toBe(path);
  expect(text).toContain(path);
  if (message) expect(text).toMatch(message);
}

describe("readGguf rejects malformed files with a specific error", () => {
  it("bad magic", async () => {
    await expectFailure({ ...GOOD, magic: "GGML" }, GgufBadMagicError, /found 47 47 4d 4c/);
    await expectFailure(new TextEncoder().encode('{"not": "gguf"}'), GgufBadMagicError);
    await expectFailure(new Uint8Array([0x47, 0x00]), GgufBadMagicError);
  });

  it("unsupported version", async () => {
    await expectFailure({ ...GOOD, version: 1 }, GgufUnsupportedVersionError, /version 1\b/);
    await expectFailure({ ...GOOD, version: 0x03000000 }, GgufUnsupportedVersionError, /big-endian/);
  });

  it("a file cut anywhere is truncated", async () => {
    const full = buildGguf(GOOD);
    // Header, metadata, tensor table, padding, then data; the file ends in 28 bytes of padding.
    for (const cut of [0, 2, 4, 7, 12, 23, 30, 60, 100, 150, 200, 240, full.length - 29]) {
      await expectFailure(full.subarray(0, cut), GgufTruncatedError);
    }
  });

  it("tensor data past the end of the file is truncated, naming the tensor", async () => {
    const full = buildGguf(GOOD);
    await expectFailure(full.subarray(0, full.length - 40), GgufTruncatedError, /tensor "two"/);
  });

  it("counts too large for the file are truncated, not allocated", async () => {
    const bytes = buildGguf(GOOD);
    new DataView(bytes.buffer).setBigUint64(16, 2n ** 40n, true); // kv count
    await expectFailure(bytes, GgufTruncatedError, /metadata count/);
    const arr = buildGguf({ metadata: [["a", meta.arr(GgufValueType.UINT32, [1])]] });
    // key: 8 + 1 bytes, then type u32, item type u32, then the count
    new DataView(arr.buffer).setBigUint64(24 + 9 + 4 + 4, 2n ** 50n, true);
    await expectFailure(arr, GgufTruncatedError, /array length of "a"/);
  });

  it("unsupported tensor type", async () => {
    const q3k: TensorSpec = { name: "blk.0.ffn_down.weight", dims: [256], type: GgmlType.Q3_K, data: new Uint8Array(110) };
    await expectFailure({ tensors: [q8("ok"), q3k] }, GgufUnsupportedTensorTypeError, /"blk.0.ffn_down.weight" has type Q3_K/);
    const unknown: TensorSpec = { name: "x", dims: [4], type: 99, data: new Uint8Array(16) };
    await expectFailure({ tensors: [unknown] }, GgufUnsupportedTensorTypeError, /type 99/);
  });

  it("bad alignment", async () => {
    await expectFailure({ ...GOOD, metadata: [["general.alignment", meta.u32(48)]] }, GgufBadAlignmentError, /48/);
    await expectFailure({ ...GOOD, metadata: [["general.alignment", meta.u32(0)]] }, GgufBadAlignmentError);
    await expectFailure({ ...GOOD, metadata: [["general.alignment", meta.str("32")]] }, GgufBadAlignmentError);
  });

  it("misaligned or overlapping tensor offsets", async () => {
    await expectFailure({ tensors: [q8("one"), { ...q8("two"), offset: 72 }] }, GgufBadOffsetError, /"two".*alignment 32/);
    await expectFailure({ tensors: [q8("one"), { ...q8("two"), offset: 64 }] }, GgufBadOffsetError, /overlaps tensor "one"/);
  });

  it("bad shapes", async () => {
    await expectFailure({ tensors: [{ ...q8("odd"), dims: [16, 4] }] }, GgufBadShapeError, /ne\[0\] = 16/);
    await expectFailure({ tensors: [{ ...q8("deep"), dims: [32, 1, 1, 1, 2] }] }, GgufBadShapeError, /5 dimensions/);
  });

  it("duplicates", async () => {
    await expectFailure(
      {
        metadata: [
          ["k", meta.u8(1)],
          ["k", meta.u8(2)],
        ],
      },
      GgufDuplicateKeyError,
      /"k"/,
    );
    await expectFailure({ tensors: [q8("same"), q8("same")] }, GgufDuplicateTensorError, /"same"/);
  });

  it("unknown metadata value type", async () => {
    const bytes = buildGguf({ metadata: [["k", meta.u32(5)]] });
    new DataView(bytes.buffer).setUint32(24 + 9, 13, true);
    await expectFailure(bytes, GgufBadValueTypeError, /"k" has unknown value type 13/);
  });

  it("a missing tensor is named", async () => {
    const path = nextPath();
    await writeGguf(path, GOOD);
    const file = await readGguf(path);
    expect(() => getTensor(file, "nope")).toThrow(GgufMissingTensorError);
    expect(getTensor(file, "two").name).toBe("two");
  });
});
