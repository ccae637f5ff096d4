import { open } from "node:fs/promises";
import { FileCursor } from "./cursor.js";
import { dequantize } from "./dequant.js";
import { GgufDuplicateTensorError, GgufMissingTensorError, GgufSplitError, GgufTruncatedError } from "./errors.js";
import { readHeader, readMetadata } from "./header.js";
import { shardPaths, SPLIT_KEYS, splitCount, splitIndex, splitTensorCount } from "./split.js";
import { alignUp, layoutTensors, readAlignment, readTensorTable } from "./tensor-table.js";
import type { GgufFile, GgufTensorInfo } from "./types.js";

/**
 * Reads a GGUF file's header, metadata and tensor table, and checks that every tensor's data
 * lies aligned inside the file. Tensor data itself is not read; see `readTensorBytes`.
 *
 * The first shard of a split model (`name-00001-of-0000N.gguf`) is read with the rest of its set:
 * one model whose tensor table spans the shards, each tensor's data read from its own shard.
 */
export async function readGguf(path: string): Promise<GgufFile> {
  const first = await readOneFile(path);
  const count = splitCount(first);
  if (count === 1) return first;
  if (splitIndex(first) !== 0) {
    throw new GgufSplitError(
      path,
      `this is shard ${splitIndex(first) + 1} of ${count}; open the first (…-00001-of-${String(count).padStart(5, "0")}.gguf), which holds the model's metadata`,
    );
  }
  const paths = shardPaths(path, count);
  const shards = [first];
  for (let i = 1; i < count; i++) shards.push(await readShard(paths[i], i, count));
  return joinShards(first, shards, paths);
}

async function readOneFile(path: string): Promise<GgufFile> {
  const handle = await open(path, "r");
  try {
    const fileSize = (await handle.stat()).size;
    const cursor = new FileCursor(handle, path, fileSize);
    const { version, tensorCount, kvCount } = await readHeader(cursor);
    const metadata = await readMetadata(cursor, kvCount);
    const alignment = readAlignment(path, metadata);
    const entries = await readTensorTable(cursor, tensorCount);
    const dataOffset = alignUp(cursor.offset, alignment);
    const tensors = layoutTensors(entries, { path, alignment, dataOffset, fileSize });
    return { path, version, metadata, tensors, alignment, dataOffset, fileSize };
  } finally {
    await handle.close();
  }
}

async function readShard(path: string, index: number, count: number): Promise<GgufFile> {
  let shard: GgufFile;
  try {
    shard = await readOneFile(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT")
      throw new GgufSplitError(path, `shard ${index + 1} of ${count} is missing (its shards are pulled as a set: pull the model again)`);
    throw err;
  }
  if (splitIndex(shard) !== index || splitCount(shard) !== count) {
    throw new GgufSplitError(
      path,
      `expected shard ${index + 1} of ${count}, but its ${SPLIT_KEYS.no} / ${SPLIT_KEYS.count} say ${splitIndex(shard) + 1} of ${splitCount(shard)}`,
    );
  }
  return shard;
}

/** One model from its shards: the first shard's metadata, every shard's tensors (each knowing its file). */
function joinShards(first: GgufFile, shards: GgufFile[], paths: string[]): GgufFile {
  const seen = new Set<string>();
  const tensors: GgufTensorInfo[] = [];
  for (const shard of shards) {
    for (const t of shard.tensors) {
      if (seen.has(t.name)) throw new GgufDuplicateTensorError(shard.path, t.name);
      seen.add(t.name);
      tensors.push({ ...t, path: shard.path });
    }
  }
  const declared = splitTensorCount(first);
  if (declared !== undefined && declared !== tensors.length) {
    throw new GgufSplitError(first.path, `${SPLIT_KEYS.tensorsCount} is ${declared}, but the ${shards.length} shards hold ${tensors.length} tensors`);
  }
  return { ...first, tensors, shards: paths };
}

export function findTensor(file: GgufFile, name: string): GgufTensorInfo | undefined {
  return file.tensors.find((t) => t.name === name);
}

export function getTensor(file: GgufFile, name: string): GgufTensorInfo {
  const tensor = findTensor(file, name);
  if (!tensor) throw new GgufMissingTensorError(file.path, name);
  return tensor;
}

/**
 * The raw (still quantized) bytes of one tensor, in a fresh buffer starting at byte 0; or of
 * `length` bytes of it from byte `start` (for reading a large tensor a run of rows at a time).
 */
export async function readTensorBytes(file: GgufFile, tensor: GgufTensorInfo, start = 0, length = tensor.byteLength - start): Promise<Uint8Array> {
  if (start < 0 || length < 0 || start + length > tensor.byteLength)
    throw new RangeError(`bytes ${start}..${start + length} are outside tensor "${tensor.name}" (${tensor.byteLength} bytes)`);
  const out = new Uint8Array(length);
  const path = tensor.path ?? file.path;
  const handle = await open(path, "r");
  try {
    let done = 0;
    while (done < out.length) {
      // One read is capped near 2 GiB by the OS; a tensor can be larger.
      const { bytesRead } = await handle.read(out, done, Math.min(out.length - done, 1 << 30), tensor.offset + start + done);
      if (bytesRead === 0) {
        throw new GgufTruncatedError(path, `file ended while reading tensor "${tensor.name}" (was it changed?)`);
      }
      done += bytesRead;
    }
  } finally {
    await handle.close();
  }
  return out;
}

/** One tensor's values as float32, in ggml element order (dims[0] fastest). */
export async function readTensorF32(file: GgufFile, tensor: GgufTensorInfo): Promise<Float32Array> {
  return dequantize(tensor.type, await readTensorBytes(file, tensor), tensor.elementCount);
}
