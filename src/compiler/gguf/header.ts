import type { FileCursor } from "./cursor.js";
import { GgufBadMagicError, GgufBadValueTypeError, GgufDuplicateKeyError, GgufTruncatedError, GgufUnsupportedVersionError } from "./errors.js";
import { GgufValueType, type GgufValue } from "./types.js";

const MAGIC = [0x47, 0x47, 0x55, 0x46]; // "GGUF"
const SUPPORTED_VERSIONS = new Set([2, 3]);

/** Bytes taken by each fixed-size value type. */
const SCALAR_SIZE: Partial<Record<GgufValueType, number>> = {
  [GgufValueType.UINT8]: 1,
  [GgufValueType.INT8]: 1,
  [GgufValueType.UINT16]: 2,
  [GgufValueType.INT16]: 2,
  [GgufValueType.UINT32]: 4,
  [GgufValueType.INT32]: 4,
  [GgufValueType.FLOAT32]: 4,
  [GgufValueType.BOOL]: 1,
  [GgufValueType.UINT64]: 8,
  [GgufValueType.INT64]: 8,
  [GgufValueType.FLOAT64]: 8,
};

/** Smallest encoding of a string (its u64 length) and of an array (u32 type + u64 count). */
const MIN_STRING_SIZE = 8;
const MIN_ARRAY_SIZE = 12;
/** Key length, value type, and at least one byte of value. */
const MIN_KV_SIZE = 8 + 4 + 1;
/** Name length, n_dims, type and offset. */
const MIN_TENSOR_INFO_SIZE = 8 + 4 + 4 + 8;

export interface GgufHeader {
  version: number;
  tensorCount: number;
  kvCount: number;
}

export async function readHeader(c: FileCursor): Promise<GgufHeader> {
  await checkMagic(c);
  await c.need(4, "the version");
  const version = c.u32();
  if (!SUPPORTED_VERSIONS.has(version)) throw new GgufUnsupportedVersionError(c.path, version);
  await c.need(16, "the tensor and metadata counts");
  const tensorCount = c.u64();
  const kvCount = c.u64();
  return {
    version,
    tensorCount: plausibleCount(c, tensorCount, MIN_TENSOR_INFO_SIZE, "tensor count"),
    kvCount: plausibleCount(c, kvCount, MIN_KV_SIZE, "metadata count"),
  };
}

async function checkMagic(c: FileCursor): Promise<void> {
  const n = Math.min(4, c.fileSize);
  if (n > 0) await c.need(n, "the magic");
  const found = c.bytes(n);
  if (found.some((b, i) => b !== MAGIC[i])) throw new GgufBadMagicError(c.path, found);
  if (n < 4) throw new GgufTruncatedError(c.path, `file is only ${c.fileSize} bytes long`);
}

/**
 * Rejects counts that could not fit in what is left of the file, before anything is sized by
 * them, so a corrupt count fails fast instead of allocating a huge array.
 */
export function plausibleCount(c: FileCursor, count: number | bigint, minItemSize: number, what: string): number {
  if (typeof count === "bigint" || count * minItemSize > c.remainingInFile) {
    throw new GgufTruncatedError(c.path, `${what} ${count} at offset ${c.offset} cannot fit in the ${c.remainingInFile} bytes left`);
  }
  return count;
}

export async function readMetadata(c: FileCursor, kvCount: number): Promise<Record<string, GgufValue>> {
  // No prototype, so keys like "__proto__" or "constructor" are plain data.
  const metadata: Record<string, GgufValue> = Object.create(null);
  for (let i = 0; i < kvCount; i++) {
    const key = await readString(c, `metadata key #${i}`);
    if (key in metadata) throw new GgufDuplicateKeyError(c.path, key);
    await c.need(4, `the type of "${key}"`);
    metadata[key] = await readValue(c, c.u32(), key);
  }
  return metadata;
}

export async function readString(c: FileCursor, what: string): Promise<string> {
  if (!c.has(8)) await c.need(8, what);
  const length = c.u64();
  if (typeof length === "bigint" || length > c.remainingInFile) {
    throw new GgufTruncatedError(c.path, `${what} claims ${length} bytes at offset ${c.offset}, past the end of the file`);
  }
  if (!c.has(length)) await c.need(length, what);
  return c.utf8(length);
}

async function readValue(c: FileCursor, type: number, key: string): Promise<GgufValue> {
  if (type === GgufValueType.STRING) return readString(c, `the value of "${key}"`);
  if (type === GgufValueType.ARRAY) return readArray(c, key);
  const size = scalarSize(c, type, key);
  if (!c.has(size)) await c.need(size, `the value of "${key}"`);
  return readScalar(c, type);
}

async function readArray(c: FileCursor, key: string): Promise<GgufValue[]> {
  await c.need(12, `the array header of "${key}"`);
  const itemType = c.u32();
  const count = plausibleCount(c, c.u64(), minValueSize(c, itemType, key), `array length of "${key}"`);
  const items: GgufValue[] = new Array(count);
  const size = SCALAR_SIZE[itemType as GgufValueType];
  if (size === undefined) {
    for (let i = 0; i < count; i++) items[i] = await readValue(c, itemType, key);
    return items;
  }
  for (let i = 0; i < count; i++) {
    if (!c.has(size)) await c.need(size, `an item of "${key}"`);
    items[i] = readScalar(c, itemType);
  }
  return items;
}

function scalarSize(c: FileCursor, type: number, key: string): number {
  const size = SCALAR_SIZE[type as GgufValueType];
  if (size === undefined) throw new GgufBadValueTypeError(c.path, key, type);
  return size;
}

function minValueSize(c: FileCursor, type: number, key: string): number {
  if (type === GgufValueType.STRING) return MIN_STRING_SIZE;
  if (type === GgufValueType.ARRAY) return MIN_ARRAY_SIZE;
  return scalarSize(c, type, key);
}

function readScalar(c: FileCursor, type: GgufValueType): GgufValue {
  switch (type) {
    case GgufValueType.UINT8:
      return c.u8();
    case GgufValueType.INT8:
      return c.i8();
    case GgufValueType.UINT16:
      return c.u16();
    case GgufValueType.INT16:
      return c.i16();
    case GgufValueType.UINT32:
      return c.u32();
    case GgufValueType.INT32:
      return c.i32();
    case GgufValueType.FLOAT32:
      return c.f32();
    case GgufValueType.BOOL:
      return c.u8() !== 0;
    case GgufValueType.UINT64:
      return c.u64();
    case GgufValueType.INT64:
      return c.i64();
    case GgufValueType.FLOAT64:
      return c.f64();
    default:
      throw new Error(`unreachable: value type ${type} is not a scalar`);
  }
}
