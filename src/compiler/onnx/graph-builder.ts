import { closeSync, openSync, writeSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { floatsToHalves } from "../quant/fp16.js";
import { type AttributeValue, DataType, type Dim, encodeModel, type ExternalTensor, type InlineTensor, type NodeDef, type ValueInfo } from "./onnx-proto.js";

/** Weights start on this boundary in the data file, so the runtime can map them aligned. */
const WEIGHT_ALIGNMENT = 64;

/** writeSync refuses over 2^31-1 bytes (a float32 embedding can be larger) and may write fewer than asked. */
function writeAll(fd: number, bytes: Uint8Array): void {
  for (let done = 0; done < bytes.length; ) done += writeSync(fd, bytes, done, Math.min(bytes.length - done, 1 << 30));
}

export interface NodeOptions {
  domain?: string;
  attributes?: Record<string, AttributeValue>;
  /** How many outputs the node has (default 1). */
  outputs?: number;
  /** Explicit output names (graph outputs must have fixed names). */
  names?: string[];
}

/**
 * Accumulates an ONNX graph: nodes with unique names, graph inputs and outputs,
 * small constants inline, and large weights streamed to external data files
 * as they are added (so a model never sits in memory twice, and the graph proto
 * holds only names and offsets).
 *
 * The data goes to `model.onnx.data`, and past `maxDataFileBytes` on to `model.onnx.data.1`,
 * `.2` ...: a tensor never straddles two files (one larger than the limit has a file to itself).
 */
export class GraphBuilder {
  readonly nodes: NodeDef[] = [];
  readonly inputs: ValueInfo[] = [];
  readonly outputs: ValueInfo[] = [];
  private readonly external: ExternalTensor[] = [];
  private readonly inline: InlineTensor[] = [];
  private readonly constantsByKey = new Map<string, string>();
  private counter = 0;
  /**
   * While true, float32 weights and constants are stored as float16, and a Cast to float32 casts to
   * float16 instead: the part of a graph built meanwhile computes in half precision (the GPU
   * target's activations). Graph inputs and outputs are declared as given. Default false.
   */
  halfFloats = false;
  private dataFd: number;
  private dataOffset = 0;
  private dataName: string;
  private readonly dataFiles: string[];

  /**
   * @param dataPath the first external data file.
   * @param maxDataFileBytes bytes after which the next weight starts a new data file (default: no limit, one file).
   */
  constructor(
    private readonly dataPath: string,
    private readonly maxDataFileBytes = Number.POSITIVE_INFINITY,
  ) {
    this.dataFd = openSync(dataPath, "w");
    this.dataName = basename(dataPath);
    this.dataFiles = [this.dataName];
  }

  /** The external data files written so far, by name, in order. */
  get dataFileNames(): readonly string[] {
    return this.dataFiles;
  }

  /** Where a weight of `length` bytes starts: aligned in the current file, or at 0 of a new one when it would pass the limit. */
  private placeWeight(length: number): void {
    const pad = (WEIGHT_ALIGNMENT - (this.dataOffset % WEIGHT_ALIGNMENT)) % WEIGHT_ALIGNMENT;
    if (this.dataOffset > 0 && this.dataOffset + pad + length > this.maxDataFileBytes) {
      closeSync(this.dataFd);
      this.dataName = `${basename(this.dataPath)}.${this.dataFiles.length}`;
      this.dataFiles.push(this.dataName);
      this.dataFd = openSync(join(dirname(this.dataPath), this.dataName), "w");
      this.dataOffset = 0;
      return;
    }
    if (pad > 0) {
      writeAll(this.dataFd, new Uint8Array(pad));
      this.dataOffset += pad;
    }
  }

  input(name: string, type: DataType, shape: Dim[]): string {
    this.inputs.push({ name, type, shape });
    return name;
  }

  output(name: string, type: DataType, shape: Dim[]): void {
    this.outputs.push({ name, type, shape });
  }

  /** Appends a weight to the external data. */
  weight(name: string, type: DataType, dims: number[], data: ArrayBufferView): string {
    if (this.halfFloats && type === DataType.FLOAT) [type, data] = [DataType.FLOAT16, floatsToHalves(asFloats(data))];
    const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    this.placeWeight(bytes.length);
    writeAll(this.dataFd, bytes);
    this.external.push({ name, type, dims, location: this.dataName, offset: this.dataOffset, length: bytes.length });
    this.dataOffset += bytes.length;
    return name;
  }

  /**
   * Appends a weight of `byteLength` bytes given in consecutive pieces, each written as it comes,
   * so a weight larger than memory (a 70B model's float32 embedding table) is never whole in it.
   */
  async weightFromChunks(name: string, type: DataType, dims: number[], byteLength: number, chunks: AsyncIterable<ArrayBufferView>): Promise<string> {
    if (this.halfFloats && type === DataType.FLOAT) return this.weightFromChunks(name, DataType.FLOAT16, dims, byteLength / 2, halvedChunks(chunks));
    this.placeWeight(byteLength);
    const start = this.dataOffset;
    for await (const chunk of chunks) {
      writeAll(this.dataFd, new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength));
      this.dataOffset += chunk.byteLength;
    }
    if (this.dataOffset - start !== byteLength) throw new Error(`weight ${name}: ${this.dataOffset - start} bytes written, ${byteLength} expected`);
    this.external.push({ name, type, dims, location: this.dataName, offset: start, length: byteLength });
    return name;
  }

  /** A small constant kept in the graph file; identical constants are shared. */
  constant(type: DataType, dims: number[], data: ArrayBufferView, hint = "const"): string {
    if (this.halfFloats && type === DataType.FLOAT) [type, data] = [DataType.FLOAT16, floatsToHalves(asFloats(data))];
    const raw = new Uint8Array(data.buffer, data.byteOffset, data.byteLength).slice();
    const key = `${type}:${dims.join(",")}:${Buffer.from(raw).toString("base64")}`;
    const existing = this.constantsByKey.get(key);
    if (existing) return existing;
    const name = `${hint}_${this.counter++}`;
    this.inline.push({ name, type, dims, raw });
    this.constantsByKey.set(key, name);
    return name;
  }

  int64s(values: number[]): string {
    return this.constant(DataType.INT64, [values.length], BigInt64Array.from(values.map(BigInt)), "i64");
  }

  /** Adds a node and returns its output names. */
  node(op: string, inputs: string[], options: NodeOptions = {}): string[] {
    if (this.halfFloats && op === "Cast" && options.attributes?.to === DataType.FLOAT)
      options = { ...options, attributes: { ...options.attributes, to: DataType.FLOAT16 } };
    const id = this.counter++;
    const count = options.names?.length ?? options.outputs ?? 1;
    const outputs = options.names ?? Array.from({ length: count }, (_, i) => `${op}_${id}_out${i}`);
    this.nodes.push({
      op,
      inputs,
      outputs,
      name: `${op}_${id}`,
      domain: options.domain,
      attributes: options.attributes,
    });
    return outputs;
  }

  /** Single-output shorthand for `node`. */
  op(op: string, inputs: string[], options: NodeOptions = {}): string {
    return this.node(op, inputs, options)[0];
  }

  /** Closes the data file and returns the serialized graph. */
  finish(graphName: string, producerVersion: string, metadata: Record<string, string>): Uint8Array {
    closeSync(this.dataFd);
    return encodeModel({
      producerVersion,
      graphName,
      opsets: [
        { domain: "", version: 21 },
        { domain: "com.microsoft", version: 1 },
      ],
      nodes: this.nodes,
      inputs: this.inputs,
      outputs: this.outputs,
      externalTensors: this.external,
      inlineTensors: this.inline,
      metadata,
    });
  }
}

/** A float32 view of float data given as any view of its bytes. */
function asFloats(data: ArrayBufferView): Float32Array {
  return data instanceof Float32Array ? data : new Float32Array(data.buffer, data.byteOffset, data.byteLength / 4);
}

async function* halvedChunks(chunks: AsyncIterable<ArrayBufferView>): AsyncIterable<ArrayBufferView> {
  for await (const chunk of chunks) yield floatsToHalves(asFloats(chunk));
}
