import { describe, expect, it } from "vitest";
import { GgmlType, dequantize, q4Blocks, q8Blocks, unpackQ4, unpackQ8_0, type Q4Type } from "../../../../src/compiler/gguf/index.js";
import { fixtureBytes, fixtureJson } from "./helpers.js";

interface Manifest {
  dequant: Array<{ name: string; type: GgmlType; elementCount: number; raw: string }>;
}

const manifest = fixtureJson<Manifest>("dequant", "manifest.json");

function fixture(type: GgmlType): { bytes: Uint8Array; elementCount: number } {
  const c = manifest.dequant.find((x) => x.type === type)!;
  return { bytes: fixtureBytes("dequant", c.raw), elementCount: c.elementCount };
}

/** The documented formulas, evaluated in float32 like ggml (Q4_0 adds no m, keeping -0). */
const q4Value = (q: number, zero: number, d: number, m: number) => (zero ? Math.fround((q - zero) * d) : Math.fround(Math.fround(q * d) + m));
const q8Value = (q: number, d: number) => Math.fround(q * d);

describe.each([GgmlType.Q4_0, GgmlType.Q4_1] as Q4Type[])("4-bit blocks of type %i", (type) => {
  const { bytes, elementCount } = fixture(type);
  const reference = dequantize(type, bytes, elementCount);

  it("q4Blocks yields d, m and element-ordered nibbles that rebuild the dequantized values", () => {
    const rebuilt = new Float32Array(elementCount);
    let blocks = 0;
    for (const { index, d, m, zero, q } of q4Blocks(type, bytes)) {
      expect(index).toBe(blocks++);
      expect(zero).toBe(type === GgmlType.Q4_0 ? 8 : 0);
      if (type === GgmlType.Q4_0) expect(m).toBe(0);
      for (let i = 0; i < 32; i++) rebuilt[index * 32 + i] = q4Value(q[i], zero, d, m);
    }
    expect(blocks).toBe(elementCount / 32);
    expect(rebuilt).toEqual(reference);
  });

  it("unpackQ4 gives the same blocks in bulk", () => {
    const views = Array.from(q4Blocks(type, bytes), (b) => ({ d: b.d, m: b.m, q: Array.from(b.q) }));
    const bulk = unpackQ4(type, bytes);
    expect(bulk.blockCount).toBe(views.length);
    expect(bulk.zero).toBe(type === GgmlType.Q4_0 ? 8 : 0);
    views.forEach((v, b) => {
      expect(bulk.d[b]).toBe(v.d);
      expect(bulk.m[b]).toBe(v.m);
      expect(Array.from(bulk.q.subarray(b * 32, b * 32 + 32))).toEqual(v.q);
    });
    expect(bulk.q.every((v) => v < 16)).toBe(true);
  });

  it("puts byte j's low nibble at element j and its high nibble at element j + 16", () => {
    const block = new Uint8Array(type === GgmlType.Q4_0 ? 18 : 20);
    block[block.length - 16] = 0xa5; // qs[0]
    const { q } = unpackQ4(type, block);
    expect(q[0]).toBe(0x5);
    expect(q[16]).toBe(0xa);
  });
});

describe("8-bit blocks", () => {
  const { bytes, elementCount } = fixture(GgmlType.Q8_0);
  const reference = dequantize(GgmlType.Q8_0, bytes, elementCount);

  it("q8Blocks rebuilds the dequantized values", () => {
    const rebuilt = new Float32Array(elementCount);
    for (const { index, d, q } of q8Blocks(bytes)) {
      for (let i = 0; i < 32; i++) rebuilt[index * 32 + i] = q8Value(q[i], d);
    }
    expect(rebuilt).toEqual(reference);
  });

  it("unpackQ8_0 gives per-block scales and one int8 per element", () => {
    const bulk = unpackQ8_0(bytes);
    expect(bulk.blockCount).toBe(elementCount / 32);
    expect(Float32Array.from(bulk.q, (q, i) => q8Value(q, bulk.d[i >> 5]))).toEqual(reference);
  });
});

describe("block accessor input checks", () => {
  it("rejects partial blocks and non-4-bit types", () => {
    expect(() => unpackQ4(GgmlType.Q4_0, new Uint8Array(19))).toThrow(/whole number of Q4_0 blocks/);
    expect(() => unpackQ8_0(new Uint8Array(33))).toThrow(/whole number of Q8_0 blocks/);
    expect(() => unpackQ4(GgmlType.Q8_0 as Q4Type, new Uint8Array(34))).toThrow(/not a 4-bit block type/);
    expect(() => q4Blocks(GgmlType.Q4_K as Q4Type, new Uint8Array(0)).next()).toThrow(/not a 4-bit block type/);
  });
});
