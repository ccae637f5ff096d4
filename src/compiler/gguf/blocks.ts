// Block-level access to Q4_0, Q4_1 and Q8_0 data, for repacking into other quantized layouts
// without a float32 round trip. Values are in element order (ggml stores element j and j+16 of
// a 4-bit block in one byte).

import { halfToFloatTable } from "./fp16.js";
import { GgmlType, ggmlTypeName, ggmlTypeTraits } from "./types.js";

export const Q_BLOCK_SIZE = 32;

/** One Q4_0/Q4_1 block: element i is `(q[i] - 8) * d` for Q4_0 and `q[i] * d + m` for Q4_1. */
export interface Q4BlockView {
  index: number;
  d: number;
  /** Q4_1's min; 0 for Q4_0. */
  m: number;
  /** 8 for Q4_0, 0 for Q4_1. */
  zero: number;
  /** The 32 4-bit values (0..15). The same array is refilled for every block: copy to keep. */
  q: Uint8Array;
}

/** One Q8_0 block: element i is `q[i] * d`. */
export interface Q8BlockView {
  index: number;
  d: number;
  /** The 32 int8 values. The same array is refilled for every block: copy to keep. */
  q: Int8Array;
}

/** All blocks of a Q4_0/Q4_1 tensor at once: per-block d and m, one q value per element (block b is q[32b..32b+31]). */
export interface Q4Unpacked {
  blockCount: number;
  d: Float32Array;
  m: Float32Array;
  zero: number;
  q: Uint8Array;
}

/** All blocks of a Q8_0 tensor at once: element i is `q[i] * d[i >> 5]`. */
export interface Q8Unpacked {
  blockCount: number;
  d: Float32Array;
  q: Int8Array;
}

export type Q4Type = GgmlType.Q4_0 | GgmlType.Q4_1;

export function* q4Blocks(type: Q4Type, bytes: Uint8Array): Generator<Q4BlockView> {
  const layout = q4Layout(type);
  const half = halfToFloatTable();
  const view: Q4BlockView = { index: 0, d: 0, m: 0, zero: layout.zero, q: new Uint8Array(Q_BLOCK_SIZE) };
  const count = blockCount(type, bytes);
  for (let b = 0, o = 0; b < count; b++, o += layout.bytesPerBlock) {
    view.index = b;
    view.d = half[bytes[o] | (bytes[o + 1] << 8)];
    view.m = layout.hasMin ? half[bytes[o + 2] | (bytes[o + 3] << 8)] : 0;
    unpackNibbles(bytes, o + layout.qsOffset, view.q, 0);
    yield view;
  }
}

export function unpackQ4(type: Q4Type, bytes: Uint8Array): Q4Unpacked {
  const layout = q4Layout(type);
  const half = halfToFloatTable();
  const count = blockCount(type, bytes);
  const out: Q4Unpacked = {
    blockCount: count,
    d: new Float32Array(count),
    m: new Float32Array(count),
    zero: layout.zero,
    q: new Uint8Array(count * Q_BLOCK_SIZE),
  };
  for (let b = 0, o = 0; b < count; b++, o += layout.bytesPerBlock) {
    out.d[b] = half[bytes[o] | (bytes[o + 1] << 8)];
    if (layout.hasMin) out.m[b] = half[bytes[o + 2] | (bytes[o + 3] << 8)];
    unpackNibbles(bytes, o + layout.qsOffset, out.q, b * Q_BLOCK_SIZE);
  }
  return out;
}

export function* q8Blocks(bytes: Uint8Array): Generator<Q8BlockView> {
  const half = halfToFloatTable();
  const signed = new Int8Array(bytes.buffer, bytes.byteOffset, bytes.length);
  const view: Q8BlockView = { index: 0, d: 0, q: new Int8Array(Q_BLOCK_SIZE) };
  const count = blockCount(GgmlType.Q8_0, bytes);
  for (let b = 0, o = 0; b < count; b++, o += 34) {
    view.index = b;
    view.d = half[bytes[o] | (bytes[o + 1] << 8)];
    view.q.set(signed.subarray(o + 2, o + 34));
    yield view;
  }
}

export function unpackQ8_0(bytes: Uint8Array): Q8Unpacked {
  const half = halfToFloatTable();
  const signed = new Int8Array(bytes.buffer, bytes.byteOffset, bytes.length);
  const count = blockCount(GgmlType.Q8_0, bytes);
  const out: Q8Unpacked = { blockCount: count, d: new Float32Array(count), q: new Int8Array(count * Q_BLOCK_SIZE) };
  for (let b = 0, o = 0; b < count; b++, o += 34) {
    out.d[b] = half[bytes[o] | (bytes[o + 1] << 8)];
    out.q.set(signed.subarray(o + 2, o + 34), b * Q_BLOCK_SIZE);
  }
  return out;
}

interface Q4Layout {
  bytesPerBlock: number;
  qsOffset: number;
  hasMin: boolean;
  zero: number;
}

function q4Layout(type: Q4Type): Q4Layout {
  if (type === GgmlType.Q4_0) return { bytesPerBlock: 18, qsOffset: 2, hasMin: false, zero: 8 };
  if (type === GgmlType.Q4_1) return { bytesPerBlock: 20, qsOffset: 4, hasMin: true, zero: 0 };
  throw new RangeError(`${ggmlTypeName(type)} is not a 4-bit block type (Q4_0 or Q4_1)`);
}

function blockCount(type: GgmlType, bytes: Uint8Array): number {
  const { bytesPerBlock } = ggmlTypeTraits(type)!;
  if (bytes.length % bytesPerBlock !== 0) {
    throw new RangeError(`${bytes.length} bytes is not a whole number of ${ggmlTypeName(type)} blocks of ${bytesPerBlock}`);
  }
  return bytes.length / bytesPerBlock;
}

function unpackNibbles(src: Uint8Array, from: number, dst: Uint8Array, at: number): void {
  for (let j = 0; j < 16; j++) {
    const byte = src[from + j];
    dst[at + j] = byte & 0x0f;
    dst[at + j + 16] = byte >> 4;
  }
}
