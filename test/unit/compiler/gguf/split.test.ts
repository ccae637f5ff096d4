import { describe, expect, it } from "vitest";
import { GgufSplitError } from "../../../../src/compiler/gguf/errors.js";
import { isFirstOrOnlyGguf, isShardName, shardPath, shardPaths } from "../../../../src/compiler/gguf/split.js";

describe("split GGUF names", () => {
  it("names shards as llama.cpp's llama_split_path does, 1-based and zero-padded", () => {
    expect(shardPath("/m/Mixtral.Q4_K_M", 0, 2)).toBe("/m/Mixtral.Q4_K_M-00001-of-00002.gguf");
    expect(shardPaths("/m/x-00001-of-00003.gguf", 3)).toEqual(["/m/x-00001-of-00003.gguf", "/m/x-00002-of-00003.gguf", "/m/x-00003-of-00003.gguf"]);
  });

  it("tells the file to open (first shard or a single file) from the others", () => {
    expect(isFirstOrOnlyGguf("model.Q4_K_M.gguf")).toBe(true);
    expect(isFirstOrOnlyGguf("Mixtral-8x22B-Instruct-v0.1.Q4_K_M-00001-of-00002.gguf")).toBe(true);
    expect(isFirstOrOnlyGguf("Mixtral-8x22B-Instruct-v0.1.Q4_K_M-00002-of-00002.gguf")).toBe(false);
    expect(isFirstOrOnlyGguf("config.json")).toBe(false);
    expect(isShardName("a-00002-of-00002.gguf")).toBe(true);
    expect(isShardName("a.gguf")).toBe(false);
  });

  it("refuses a first shard whose name does not match the count it declares", () => {
    expect(() => shardPaths("/m/x-00001-of-00002.gguf", 3)).toThrow(GgufSplitError);
    expect(() => shardPaths("/m/x.gguf", 2)).toThrow(/does not end in -00001-of-00002\.gguf/);
  });
});
