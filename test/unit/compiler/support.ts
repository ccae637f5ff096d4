// Shared helpers for the compiler unit tests: temp dirs, a seeded PRNG, a tiny protobuf
// reader (to look inside what ProtoWriter / encodeModel wrote), and "build a graph, run it in ORT".

import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as ort from "onnxruntime-node";
import { afterAll } from "vitest";
import { GraphBuilder } from "../../../src/compiler/onnx/graph-builder.js";
import { DEVICE_GRAPH, type DeviceResults, unpackDeviceResults } from "../../../src/runtime/artifact/index.js";

/** A temp directory removed after the calling test file. */
export function tempDir(prefix = "kiln-compiler-"): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** mulberry32: a small deterministic PRNG, uniform in [0, 1). */
export function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function randomBytes(n: number, random: () => number): Uint8Array {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = Math.floor(random() * 256);
  return out;
}

export function randomFloats(n: number, random: () => number, lo = -1, hi = 1): Float32Array {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = lo + (hi - lo) * random();
  return out;
}

// ---------------------------------------------------------------------------------------------
// Protobuf reading (wire format only; enough to check what the writer emitted)

export type ProtoField =
  | { field: number; wire: 0; value: bigint }
  | { field: number; wire: 1; value: Uint8Array }
  | { field: number; wire: 2; value: Uint8Array }
  | { field: number; wire: 5; value: Uint8Array };

/** Reads one varint at `pos`; returns [value as uint64, next position]. */
export function readVarint(bytes: Uint8Array, pos: number): [bigint, number] {
  let v = 0n;
  let shift = 0n;
  for (;;) {
    if (pos >= bytes.length) throw new Error("truncated varint");
    const b = bytes[pos++];
    v |= BigInt(b & 0x7f) << shift;
    if ((b & 0x80) === 0) return [v, pos];
    shift += 7n;
    if (shift > 63n) throw new Error("varint longer than 10 bytes");
  }
}

/** Splits a message into its top-level fields, in order. Throws on malformed input. */
export function decodeMessage(bytes: Uint8Array): ProtoField[] {
  const out: ProtoField[] = [];
  let pos = 0;
  while (pos < bytes.length) {
    const [tag, p] = readVarint(bytes, pos);
    pos = p;
    const field = Number(tag >> 3n);
    const wire = Number(tag & 7n);
    if (wire === 0) {
      const [v, q] = readVarint(bytes, pos);
      out.push({ field, wire, value: v });
      pos = q;
    } else if (wire === 2) {
      const [len, q] = readVarint(bytes, pos);
      const end = q + Number(len);
      if (end > bytes.length) throw new Error("truncated length-delimited field");
      out.push({ field, wire, value: bytes.subarray(q, end) });
      pos = end;
    } else if (wire === 5 || wire === 1) {
      const size = wire === 5 ? 4 : 8;
      out.push({ field, wire, value: bytes.subarray(pos, pos + size) } as ProtoField);
      pos += size;
    } else {
      throw new Error(`unexpected wire type ${wire}`);
    }
  }
  return out;
}

/** The length-delimited payloads of every occurrence of `field`. */
export function messages(fields: ProtoField[], field: number): Uint8Array[] {
  return fields.filter((f) => f.field === field && f.wire === 2).map((f) => f.value as Uint8Array);
}

export function text(bytes: Uint8Array): string {
  return new TextDecoder().decode(bytes);
}

// ---------------------------------------------------------------------------------------------
// Build-and-run

export type Feeds = Record<string, ort.Tensor>;

/**
 * Builds a graph with GraphBuilder into `<dir>/<name>/model.onnx` (+ `model.onnx.data` beside it),
 * opens it with onnxruntime-node and runs it once.
 */
export async function buildAndRun(
  dir: string,
  name: string,
  build: (g: GraphBuilder) => void,
  feeds: Feeds,
): Promise<{ outputs: ort.InferenceSession.OnnxValueMapType; modelPath: string; dataPath: string; graph: Uint8Array }> {
  const folder = join(dir, name);
  rmSync(folder, { recursive: true, force: true });
  mkdirSync(folder, { recursive: true });
  const dataPath = join(folder, "model.onnx.data");
  const modelPath = join(folder, "model.onnx");
  const g = new GraphBuilder(dataPath);
  build(g);
  const graph = g.finish(name, "test", { test: name });
  writeFileSync(modelPath, graph);
  const session = await ort.InferenceSession.create(modelPath);
  try {
    const outputs = await session.run(feeds);
    return { outputs, modelPath, dataPath, graph };
  } finally {
    await session.release();
  }
}

export function floatTensor(data: Float32Array, dims: number[]): ort.Tensor {
  return new ort.Tensor("float32", data, dims);
}

/** A GPU step graph's run `out` read as the runtime reads it: its one `step_results` output unpacked, for a model of `vocab` tokens. */
export function stepResults(out: Record<string, ort.Tensor>, vocab: number): DeviceResults {
  const packed = out[DEVICE_GRAPH.results];
  return unpackDeviceResults(packed.data as Float32Array, packed.dims[0], packed.dims[1], vocab);
}
