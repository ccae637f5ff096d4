import { open } from "node:fs/promises";
import { FileCursor } from "./cursor.js";
import { dequantize } from "./dequant.js";
import { GgufMissingTensorError, GgufTruncatedError } from "./errors.js";
import { readHeader, readMetadata } from "./header.js";
import { alignUp, layoutTensors, readAlignment, readTensorTable } from "./tensor-table.js";
import type { GgufFile, GgufTensorInfo } from "./types.js";

/**
 * Reads a GGUF file's header, metadata and tensor table, and checks that every tensor's data
 * lies aligned inside the file. Tensor data itself is not read; see `readTensorBytes`.
 */
export async function readGguf(path: string): Promise<GgufFile> {
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

export function findTensor(file: GgufFile, name: string): GgufTensorInfo | undefined {
  return file.tensors.find((t) => t.name === name);
}

export function getTensor(file: GgufFile, name: string): GgufTensorInfo {
  const tensor = findTensor(file, name);
  if (!tensor) throw new GgufMissingTensorError(file.path, name);
  return tensor;
}

/** The raw (still quantized) bytes of one tensor, in a fresh buffer starting at byte 0. */
export async function readTensorBytes(file: GgufFile, tensor: GgufTensorInfo): Promise<Uint8Array> {
  const out = new Uint8Array(tensor.byteLength);
  const handle = await open(file.path, "r");
  try {
    let done = 0;
    while (done < out.length) {
      const { bytesRead } = await handle.read(out, done, out.length - done, tensor.offset + done);
      if (bytesRead === 0) {
        throw new GgufTruncatedError(file.path, `file ended while reading tensor "${tensor.name}" (was it changed?)`);
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
