import type { FileCursor } from "./cursor.js";
import {
  GgufBadAlignmentError,
  GgufBadOffsetError,
  GgufBadShapeError,
  GgufDuplicateTensorError,
  GgufTruncatedError,
  GgufUnsupportedTensorTypeError,
} from "./errors.js";
import { readString } from "./header.js";
import { ggmlByteLength, ggmlTypeTraits, isSupportedGgmlType, type GgufTensorInfo, type GgufValue } from "./types.js";

export const DEFAULT_ALIGNMENT = 32;
const ALIGNMENT_KEY = "general.alignment";
/** GGML_MAX_DIMS. */
const MAX_DIMS = 4;

/** One row of the tensor table as stored, before it is checked against the file. */
export interface TensorEntry {
  name: string;
  dims: Array<number | bigint>;
  type: number;
  relativeOffset: number | bigint;
}

export interface DataLayout {
  path: string;
  alignment: number;
  dataOffset: number;
  fileSize: number;
}

export async function readTensorTable(c: FileCursor, count: number): Promise<TensorEntry[]> {
  const entries: TensorEntry[] = [];
  for (let i = 0; i < count; i++) entries.push(await readTensorEntry(c, i));
  return entries;
}

async function readTensorEntry(c: FileCursor, index: number): Promise<TensorEntry> {
  const name = await readString(c, `the name of tensor #${index}`);
  await c.need(4, `the rank of tensor "${name}"`);
  const nDims = c.u32();
  if (nDims > MAX_DIMS) throw new GgufBadShapeError(c.path, name, `has ${nDims} dimensions, at most ${MAX_DIMS} allowed`);
  await c.need(8 * nDims + 12, `the shape, type and offset of tensor "${name}"`);
  const dims: Array<number | bigint> = [];
  for (let d = 0; d < nDims; d++) dims.push(c.u64());
  const type = c.u32();
  return { name, dims, type, relativeOffset: c.u64() };
}

export function readAlignment(path: string, metadata: Record<string, GgufValue>): number {
  const value = metadata[ALIGNMENT_KEY];
  if (value === undefined) return DEFAULT_ALIGNMENT;
  if (typeof value !== "number" || value < 1 || !Number.isInteger(Math.log2(value))) {
    throw new GgufBadAlignmentError(path, String(value));
  }
  return value;
}

export function alignUp(offset: number, alignment: number): number {
  return Math.ceil(offset / alignment) * alignment;
}

/** Checks every entry against the file and turns it into absolute offsets and sizes. */
export function layoutTensors(entries: TensorEntry[], layout: DataLayout): GgufTensorInfo[] {
  const seen = new Set<string>();
  const tensors = entries.map((entry) => {
    if (seen.has(entry.name)) throw new GgufDuplicateTensorError(layout.path, entry.name);
    seen.add(entry.name);
    return layoutTensor(entry, layout);
  });
  checkNoOverlap(tensors, layout.path);
  return tensors;
}

function layoutTensor(entry: TensorEntry, layout: DataLayout): GgufTensorInfo {
  const { name, type } = entry;
  const traits = ggmlTypeTraits(type);
  if (!traits || !isSupportedGgmlType(type)) throw new GgufUnsupportedTensorTypeError(layout.path, name, type);
  const dims = checkedDims(entry, layout.path);
  const elementCount = dims.reduce((a, b) => a * b, 1);
  if (!Number.isSafeInteger(elementCount)) {
    throw new GgufBadShapeError(layout.path, name, `shape [${dims}] has too many elements`);
  }
  if ((dims[0] ?? 1) % traits.blockSize !== 0) {
    throw new GgufBadShapeError(layout.path, name, `ne[0] = ${dims[0] ?? 1} is not a multiple of the ${traits.blockSize}-element block of its type`);
  }
  const byteLength = ggmlByteLength(type, elementCount);
  const offset = layout.dataOffset + checkedRelativeOffset(entry, layout);
  if (offset + byteLength > layout.fileSize) {
    throw new GgufTruncatedError(layout.path, `tensor "${name}" spans bytes ${offset}..${offset + byteLength}, past the end of the file at ${layout.fileSize}`);
  }
  return { name, dims, type, offset, byteLength, elementCount };
}

function checkedDims(entry: TensorEntry, path: string): number[] {
  return entry.dims.map((d) => {
    if (typeof d === "bigint") throw new GgufBadShapeError(path, entry.name, `dimension ${d} is too large`);
    return d;
  });
}

function checkedRelativeOffset(entry: TensorEntry, layout: DataLayout): number {
  const rel = entry.relativeOffset;
  if (typeof rel === "bigint" || rel > layout.fileSize) {
    throw new GgufTruncatedError(layout.path, `tensor "${entry.name}" starts at data offset ${rel}, past the end of the file`);
  }
  if (rel % layout.alignment !== 0) {
    throw new GgufBadOffsetError(layout.path, entry.name, `data offset ${rel} is not a multiple of the alignment ${layout.alignment}`);
  }
  return rel;
}

function checkNoOverlap(tensors: GgufTensorInfo[], path: string): void {
  const byOffset = [...tensors].sort((a, b) => a.offset - b.offset);
  for (let i = 1; i < byOffset.length; i++) {
    const prev = byOffset[i - 1];
    const cur = byOffset[i];
    if (cur.offset < prev.offset + prev.byteLength) {
      throw new GgufBadOffsetError(path, cur.name, `data at offset ${cur.offset} overlaps tensor "${prev.name}"`);
    }
  }
}
