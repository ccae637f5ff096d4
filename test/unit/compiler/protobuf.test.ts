import { describe, expect, it } from "vitest";
import { ProtoWriter } from "../../../src/compiler/onnx/protobuf.js";
import { decodeMessage, readVarint, rng } from "./support.js";

/** Bytes of a writer after `build`, as an array of numbers (readable diffs). */
function encode(build: (w: ProtoWriter) => void): number[] {
  const w = new ProtoWriter();
  build(w);
  return [...w.finish()];
}

const ff = (n: number) => Array<number>(n).fill(0xff);

// Expected bytes are worked out by hand from the protobuf encoding spec
// (https://protobuf.dev/programming-guides/encoding/); several are its own examples.
describe("ProtoWriter varints (wire type 0)", () => {
  it("encodes small values in one byte", () => {
    expect(encode((w) => w.int(1, 0))).toEqual([0x08, 0x00]);
    expect(encode((w) => w.int(1, 1))).toEqual([0x08, 0x01]);
    expect(encode((w) => w.int(1, 127))).toEqual([0x08, 0x7f]);
  });

  it("splits larger values into 7-bit groups, least significant first", () => {
    expect(encode((w) => w.int(1, 128))).toEqual([0x08, 0x80, 0x01]);
    expect(encode((w) => w.int(1, 150))).toEqual([0x08, 0x96, 0x01]); // the spec's "Test1" example
    expect(encode((w) => w.int(2, 300))).toEqual([0x10, 0xac, 0x02]);
    expect(encode((w) => w.int(1, 16384))).toEqual([0x08, 0x80, 0x80, 0x01]);
  });

  it("handles values beyond 32 bits without truncation", () => {
    expect(encode((w) => w.int(1, 2 ** 32))).toEqual([0x08, 0x80, 0x80, 0x80, 0x80, 0x10]);
    expect(encode((w) => w.int(1, 2 ** 35))).toEqual([0x08, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]);
    // 2^53 - 1: 53 one-bits = seven full groups and a final 0b1111.
    expect(encode((w) => w.int(1, Number.MAX_SAFE_INTEGER))).toEqual([0x08, ...ff(7), 0x0f]);
    // int64 max as a bigint: 63 one-bits = nine full groups.
    expect(encode((w) => w.int(1, 2n ** 63n - 1n))).toEqual([0x08, ...ff(8), 0x7f]);
  });

  it("writes negative int64 values as 10-byte two's complement", () => {
    expect(encode((w) => w.int(1, -1))).toEqual([0x08, ...ff(9), 0x01]);
    expect(encode((w) => w.int(1, -1n))).toEqual([0x08, ...ff(9), 0x01]);
    expect(encode((w) => w.int(1, -2))).toEqual([0x08, 0xfe, ...ff(8), 0x01]);
    // -128: ...1111_1000_0000
    expect(encode((w) => w.int(1, -128))).toEqual([0x08, 0x80, ...ff(8), 0x01]);
    // int64 min: only bit 63 set.
    expect(encode((w) => w.int(1, -(2n ** 63n)))).toEqual([0x08, ...Array<number>(9).fill(0x80), 0x01]);
  });

  it("writes multi-byte tags for field numbers >= 16", () => {
    // (16 << 3) | 0 = 128, (20 << 3) | 0 = 160: ONNX's AttributeProto.type is field 20.
    expect(encode((w) => w.int(16, 1))).toEqual([0x80, 0x01, 0x01]);
    expect(encode((w) => w.int(20, 7))).toEqual([0xa0, 0x01, 0x07]);
  });

  it("round-trips random int64 values through a varint reader", () => {
    const random = rng(7);
    const values: bigint[] = [];
    for (let i = 0; i < 200; i++) {
      const hi = BigInt(Math.floor(random() * 2 ** 32));
      const lo = BigInt(Math.floor(random() * 2 ** 32));
      const bits = BigInt(Math.floor(random() * 64) + 1);
      values.push(BigInt.asIntN(64, ((hi << 32n) | lo) & ((1n << bits) - 1n)));
    }
    const w = new ProtoWriter();
    values.forEach((v) => w.int(3, v));
    const fields = decodeMessage(w.finish());
    expect(fields.map((f) => f.field)).toEqual(values.map(() => 3));
    expect(fields.map((f) => BigInt.asIntN(64, f.value as bigint))).toEqual(values);
  });

  it("rejects non-integers instead of silently truncating", () => {
    expect(() => new ProtoWriter().int(1, 1.5)).toThrow();
  });
});

describe("ProtoWriter fixed32 floats (wire type 5)", () => {
  it("writes little-endian IEEE single precision", () => {
    expect(encode((w) => w.float(2, 1))).toEqual([0x15, 0x00, 0x00, 0x80, 0x3f]);
    expect(encode((w) => w.float(2, -2.5))).toEqual([0x15, 0x00, 0x00, 0x20, 0xc0]);
    expect(encode((w) => w.float(1, 0.1))).toEqual([0x0d, 0xcd, 0xcc, 0xcc, 0x3d]);
  });
});

describe("ProtoWriter length-delimited fields (wire type 2)", () => {
  it("writes strings as UTF-8 with a length prefix", () => {
    expect(encode((w) => w.string(2, "testing"))).toEqual([0x12, 0x07, 0x74, 0x65, 0x73, 0x74, 0x69, 0x6e, 0x67]);
    expect(encode((w) => w.string(1, ""))).toEqual([0x0a, 0x00]);
    expect(encode((w) => w.string(1, "é▁"))).toEqual([0x0a, 0x05, 0xc3, 0xa9, 0xe2, 0x96, 0x81]);
  });

  it("uses a multi-byte length for payloads over 127 bytes", () => {
    const payload = new Uint8Array(200).map((_, i) => i);
    const bytes = encode((w) => w.bytes(1, payload));
    expect(bytes.slice(0, 3)).toEqual([0x0a, 0xc8, 0x01]);
    expect(bytes.slice(3)).toEqual([...payload]);
  });

  it("packs repeated ints as concatenated varints", () => {
    // The spec's packed example: field 4, [3, 270, 86942].
    expect(encode((w) => w.packedInts(4, [3, 270, 86942]))).toEqual([0x22, 0x06, 0x03, 0x8e, 0x02, 0x9e, 0xa7, 0x05]);
    // ONNX dims/ints may be negative (e.g. axes = [-1]): 10 bytes each.
    expect(encode((w) => w.packedInts(8, [-1, 2]))).toEqual([0x42, 0x0b, ...ff(9), 0x01, 0x02]);
    expect(encode((w) => w.packedInts(8, [2n ** 40n]))).toEqual([0x42, 0x06, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20]);
    expect(encode((w) => w.packedInts(1, []))).toEqual([0x0a, 0x00]);
  });

  it("packs repeated floats as concatenated fixed32s", () => {
    expect(encode((w) => w.packedFloats(7, [1, -2]))).toEqual([0x3a, 0x08, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0]);
  });

  it("nests messages with their encoded length", () => {
    // The spec's "Test3" example: message { Test1 c = 3; } with c.a = 150.
    expect(encode((w) => w.message(3, (m) => m.int(1, 150)))).toEqual([0x1a, 0x03, 0x08, 0x96, 0x01]);
    expect(encode((w) => w.message(5, () => {}))).toEqual([0x2a, 0x00]);
    // Two levels, each followed by a sibling field, so lengths must cover exactly the child.
    const bytes = encode((w) => w.message(1, (a) => a.message(2, (b) => b.string(1, "hi").int(2, 300)).int(3, 1)).int(4, 5));
    expect(bytes).toEqual([
      0x0a,
      0x0b, // field 1, 11 bytes
      0x12,
      0x07, // field 2, 7 bytes
      0x0a,
      0x02,
      0x68,
      0x69, // "hi"
      0x10,
      0xac,
      0x02, // 300
      0x18,
      0x01, // field 3 = 1
      0x20,
      0x05, // field 4 = 5
    ]);
  });

  it("keeps the order of fields as written and can finish() more than once", () => {
    const w = new ProtoWriter().int(2, 1).string(1, "a").float(3, 0).int(2, 2);
    const first = w.finish();
    expect([...first]).toEqual([0x10, 0x01, 0x0a, 0x01, 0x61, 0x1d, 0, 0, 0, 0, 0x10, 0x02]);
    expect(w.finish()).toEqual(first);
  });
});

describe("readVarint (test helper) sanity", () => {
  it("reads back the spec example", () => {
    expect(readVarint(new Uint8Array([0x96, 0x01]), 0)).toEqual([150n, 2]);
  });
});
