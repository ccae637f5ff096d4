import { describe, expect, it } from "vitest";
import {
  GGML_TYPE_TRAITS,
  GgmlType,
  SUPPORTED_GGML_TYPES,
  bf16ToF32,
  dequantize,
  f16ArrayToF32,
  f16ToF32,
  f32ArrayToBf16,
  f32ArrayToF16,
  f32ToBf16,
  f32ToF16,
  ggmlTypeName,
} from "../../../../src/compiler/gguf/index.js";
import { asU32, bitMismatches, fixtureBytes, fixtureJson } from "./helpers.js";

interface Manifest {
  typeSizes: Record<string, [number, number]>;
  dequant: Array<{ name: string; type: GgmlType; elementCount: number; raw: string; expected: string }>;
  convert: { count: number; input: string; f16: string; bf16: string };
}

const manifest = fixtureJson<Manifest>("dequant", "manifest.json");

function f32Fixture(name: string): Float32Array {
  const bytes = fixtureBytes("dequant", name);
  return new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4);
}

function u16Fixture(name: string): Uint16Array {
  const bytes = fixtureBytes("dequant", name);
  return new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.length / 2);
}

describe("dequantize matches the gguf Python reference", () => {
  it("covers every supported type", () => {
    expect(new Set(manifest.dequant.map((c) => c.type))).toEqual(SUPPORTED_GGML_TYPES);
  });

  for (const c of manifest.dequant) {
    it(`${c.name}: ${c.elementCount} elements, bit for bit`, () => {
      const expected = f32Fixture(c.expected);
      const actual = dequantize(c.type, fixtureBytes("dequant", c.raw), c.elementCount);
      expect(actual.length).toBe(expected.length);
      expect(bitMismatches(actual, expected)).toEqual([]);
    });
  }

  it("reads from a view at an odd byte offset", () => {
    const c = manifest.dequant.find((x) => x.type === GgmlType.Q8_0)!;
    const raw = fixtureBytes("dequant", c.raw);
    const shifted = new Uint8Array(raw.length + 3);
    shifted.set(raw, 3);
    const actual = dequantize(c.type, shifted.subarray(3), c.elementCount);
    expect(bitMismatches(actual, f32Fixture(c.expected))).toEqual([]);
  });

  it("reads F32 from an unaligned view", () => {
    const raw = fixtureBytes("dequant", "f32.raw");
    const shifted = new Uint8Array(raw.length + 1);
    shifted.set(raw, 1);
    const actual = dequantize(GgmlType.F32, shifted.subarray(1), raw.length / 4);
    expect(bitMismatches(actual, f32Fixture("f32.f32"))).toEqual([]);
  });
});

describe("dequantize input checks", () => {
  it("rejects too few bytes", () => {
    expect(() => dequantize(GgmlType.Q4_0, new Uint8Array(17), 32)).toThrow(/need 18 bytes, got 17/);
  });

  it("rejects a partial block", () => {
    expect(() => dequantize(GgmlType.Q4_K, new Uint8Array(144), 128)).toThrow(/whole number of Q4_K blocks/);
  });

  it("rejects types it cannot dequantize", () => {
    expect(() => dequantize(GgmlType.Q3_K, new Uint8Array(110), 256)).toThrow(/cannot dequantize Q3_K/);
    expect(() => dequantize(99 as GgmlType, new Uint8Array(4), 1)).toThrow(/type 99/);
  });

  it("returns an empty array for no elements", () => {
    expect(dequantize(GgmlType.Q6_K, new Uint8Array(0), 0)).toEqual(new Float32Array(0));
  });
});

describe("type table", () => {
  it("matches gguf-py's GGML_QUANT_SIZES for every type both know", () => {
    for (const [type, [blockSize, bytesPerBlock]] of Object.entries(manifest.typeSizes)) {
      const traits = GGML_TYPE_TRAITS[Number(type) as GgmlType];
      if (!traits) continue; // types newer than kiln's table
      expect({ type: ggmlTypeName(Number(type)), ...traits }).toEqual({ type: ggmlTypeName(Number(type)), blockSize, bytesPerBlock });
    }
  });
});

/** IEEE half by its definition, independent of the bit-twiddling conversion. */
function halfByDefinition(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0x1f) return mant ? NaN : sign * Infinity;
  if (exp === 0) return sign * mant * 2 ** -24;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

describe("fp16 and bf16 conversion", () => {
  it("f16ToF32 agrees with the definition of IEEE half for all 65536 values", () => {
    const bad: number[] = [];
    for (let h = 0; h < 65536; h++) {
      if (!Object.is(f16ToF32(h), halfByDefinition(h))) bad.push(h);
    }
    expect(bad).toEqual([]);
  });

  it("f16ArrayToF32 keeps NaN payloads", () => {
    const out = asU32(f16ArrayToF32(new Uint16Array([0x7c01, 0xfe00, 0x3c00])));
    expect([...out]).toEqual([0x7f802000, 0xffc00000, 0x3f800000]);
  });

  it("f32ToF16 rounds as numpy does", () => {
    const input = f32Fixture(manifest.convert.input);
    const expected = u16Fixture(manifest.convert.f16);
    expect(Array.from(f32ArrayToF16(input))).toEqual(Array.from(expected));
    expect(Array.from(input, (x) => f32ToF16(x))).toEqual(Array.from(expected));
  });

  it("f32ToBf16 rounds as ggml does", () => {
    const input = f32Fixture(manifest.convert.input);
    const expected = u16Fixture(manifest.convert.bf16);
    expect(Array.from(f32ArrayToBf16(input))).toEqual(Array.from(expected));
    expect(Array.from(input, (x) => f32ToBf16(x))).toEqual(Array.from(expected));
  });

  it("round-trips every finite half and every bf16", () => {
    const bad: number[] = [];
    for (let h = 0; h < 65536; h++) {
      if (((h >> 10) & 0x1f) !== 0x1f && f32ToF16(f16ToF32(h)) !== h) bad.push(h);
      if (!Number.isNaN(bf16ToF32(h)) && f32ToBf16(bf16ToF32(h)) !== h) bad.push(h);
    }
    expect(bad).toEqual([]);
  });

  it("converts a few values by hand", () => {
    expect(f16ToF32(0x3c00)).toBe(1);
    expect(f16ToF32(0xc000)).toBe(-2);
    expect(f16ToF32(0x0001)).toBe(2 ** -24);
    expect(bf16ToF32(0x3f80)).toBe(1);
    expect(f32ToF16(65520)).toBe(0x7c00);
    expect(f32ToF16(2 ** -25)).toBe(0);
    expect(f32ToF16(2 ** -25 * 1.0001)).toBe(1);
    expect(f32ToBf16(NaN) & 0x7fc0).toBe(0x7fc0);
  });
});
