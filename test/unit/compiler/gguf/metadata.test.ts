import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import {
  GgufMetadataTypeError,
  GgufMissingKeyError,
  GgufValueType,
  findMetadata,
  getArray,
  getBoolean,
  getInteger,
  getMetadata,
  getNumber,
  getNumberArray,
  getString,
  getStringArray,
  readGguf,
  type GgufFile,
} from "../../../../src/compiler/gguf/index.js";
import { meta, writeGguf } from "../../../fixtures/gguf/write-gguf.js";
import { tempDir } from "./helpers.js";

const dir = tempDir();
let file: GgufFile;

beforeAll(async () => {
  const path = join(dir, "meta.gguf");
  await writeGguf(path, {
    metadata: [
      ["general.architecture", meta.str("llama")],
      ["llama.block_count", meta.u32(30)],
      ["llama.rope.freq_base", meta.f32(100000)],
      ["llama.attention.layer_norm_rms_epsilon", meta.f32(1e-5)],
      ["big", meta.u64(2n ** 60n)],
      ["tokenizer.ggml.add_bos_token", meta.bool(false)],
      ["tokenizer.ggml.tokens", meta.arr(GgufValueType.STRING, ["<s>", "a"])],
      ["tokenizer.ggml.token_type", meta.arr(GgufValueType.INT32, [3, 1])],
    ],
  });
  file = await readGguf(path);
});

describe("metadata getters", () => {
  it("return typed values", () => {
    expect(getString(file, "general.architecture")).toBe("llama");
    expect(getInteger(file, "llama.block_count")).toBe(30);
    expect(getNumber(file, "llama.rope.freq_base")).toBe(100000);
    expect(getNumber(file, "llama.attention.layer_norm_rms_epsilon")).toBe(Math.fround(1e-5));
    expect(getBoolean(file, "tokenizer.ggml.add_bos_token")).toBe(false);
    expect(getStringArray(file, "tokenizer.ggml.tokens")).toEqual(["<s>", "a"]);
    expect(getNumberArray(file, "tokenizer.ggml.token_type")).toEqual([3, 1]);
    expect(getArray(file, "tokenizer.ggml.tokens")).toHaveLength(2);
    expect(getMetadata<bigint>(file, "big")).toBe(2n ** 60n);
    expect(findMetadata(file, "absent")).toBeUndefined();
  });

  it("use the fallback only when the key is missing", () => {
    expect(getInteger(file, "llama.context_length", 2048)).toBe(2048);
    expect(getBoolean(file, "tokenizer.ggml.add_eos_token", false)).toBe(false);
    expect(getInteger(file, "llama.block_count", 1)).toBe(30);
  });

  it("name the file and key when a key is missing", () => {
    expect(() => getMetadata(file, "llama.context_length")).toThrow(GgufMissingKeyError);
    expect(() => getInteger(file, "llama.context_length")).toThrow(/meta\.gguf: required metadata key "llama.context_length" is missing/);
  });

  it("reject values of the wrong type", () => {
    expect(() => getString(file, "llama.block_count")).toThrow(GgufMetadataTypeError);
    expect(() => getInteger(file, "llama.attention.layer_norm_rms_epsilon")).toThrow(/should be an integer/);
    expect(() => getNumber(file, "big")).toThrow(/64-bit integer/);
    expect(() => getNumberArray(file, "tokenizer.ggml.tokens")).toThrow(/an array of numbers, found an array of 2/);
    expect(() => getStringArray(file, "general.architecture", [])).toThrow(GgufMetadataTypeError);
  });
});
