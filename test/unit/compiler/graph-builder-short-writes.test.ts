// fs.writeSync may write fewer bytes than asked (Linux caps one write at 0x7ffff000 bytes, and
// Node refuses lengths over 2^31-1 outright): a float32 token embedding of Qwen2.5-7B is 2.18 GB.
// Here every write is cut short, so GraphBuilder must keep writing until all bytes are out.

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it, vi } from "vitest";
import { GraphBuilder } from "../../../src/compiler/onnx/graph-builder.js";
import { DataType } from "../../../src/compiler/onnx/onnx-proto.js";
import { tempDir } from "./support.js";

const MAX_PER_CALL = 5;
const calls: number[] = [];

vi.mock("node:fs", async (importOriginal) => {
  const fs = await importOriginal<typeof import("node:fs")>();
  const writeSync = (fd: number, buffer: NodeJS.ArrayBufferView, offset = 0, length?: number): number => {
    const len = length ?? buffer.byteLength - offset;
    if (len > 2 ** 31 - 1) throw new RangeError("length over 2^31-1");
    calls.push(len);
    return fs.writeSync(fd, buffer, offset, Math.min(len, MAX_PER_CALL));
  };
  return { ...fs, default: { ...fs, writeSync }, writeSync };
});

describe("GraphBuilder with short writes", () => {
  it("writes every byte of every weight and padding", () => {
    const dataPath = join(tempDir("kiln-short-writes-"), "model.onnx.data");
    const g = new GraphBuilder(dataPath);
    const a = new Uint8Array(23).map((_, i) => i + 1);
    const b = new Float32Array([1.5, -2, 3.25]);
    g.weight("a", DataType.UINT8, [23], a);
    g.weight("b", DataType.FLOAT, [3], b);
    g.finish("short", "test", {});

    expect(calls.length).toBeGreaterThan(0); // the mock is in place
    const expected = new Uint8Array(64 + 12);
    expected.set(a, 0);
    expected.set(new Uint8Array(b.buffer), 64);
    expect(new Uint8Array(readFileSync(dataPath))).toEqual(expected);
  });
});
