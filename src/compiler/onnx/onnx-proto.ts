import { ProtoWriter } from "./protobuf.js";

/** ONNX TensorProto.DataType values used by kiln's graphs. */
export enum DataType {
  FLOAT = 1,
  UINT8 = 2,
  INT8 = 3,
  INT32 = 6,
  INT64 = 7,
  UINT32 = 12,
  FLOAT16 = 10,
  BFLOAT16 = 16,
}

export type Dim = number | string;

export interface ValueInfo {
  name: string;
  type: DataType;
  shape: Dim[];
}

export type AttributeValue = number | string | number[] | { float: number } | { floats: number[] };

export interface NodeDef {
  op: string;
  inputs: string[];
  outputs: string[];
  name: string;
  domain?: string;
  attributes?: Record<string, AttributeValue>;
}

/** An initializer whose bytes live in the external data file at [offset, offset+length). */
export interface ExternalTensor {
  name: string;
  type: DataType;
  dims: number[];
  location: string;
  offset: number;
  length: number;
}

/** A small initializer stored inside the graph file itself. */
export interface InlineTensor {
  name: string;
  type: DataType;
  dims: number[];
  raw: Uint8Array;
}

export interface ModelDef {
  producerVersion: string;
  graphName: string;
  opsets: Array<{ domain: string; version: number }>;
  nodes: NodeDef[];
  inputs: ValueInfo[];
  outputs: ValueInfo[];
  externalTensors: ExternalTensor[];
  inlineTensors: InlineTensor[];
  metadata: Record<string, string>;
}

// IR version 10 is the one that goes with opset 21 (ONNX 1.16).
const IR_VERSION = 10;

enum AttrType {
  FLOAT = 1,
  INT = 2,
  STRING = 3,
  FLOATS = 6,
  INTS = 7,
}

function writeAttribute(w: ProtoWriter, name: string, value: AttributeValue): void {
  w.string(1, name);
  if (typeof value === "number") {
    if (!Number.isInteger(value)) throw new Error(`attribute ${name}: use {float} for non-integers`);
    w.int(3, value).int(20, AttrType.INT);
  } else if (typeof value === "string") {
    w.string(4, value).int(20, AttrType.STRING);
  } else if (Array.isArray(value)) {
    w.packedInts(8, value).int(20, AttrType.INTS);
  } else if ("float" in value) {
    w.float(2, value.float).int(20, AttrType.FLOAT);
  } else {
    w.packedFloats(7, value.floats).int(20, AttrType.FLOATS);
  }
}

function writeNode(w: ProtoWriter, node: NodeDef): void {
  for (const i of node.inputs) w.string(1, i);
  for (const o of node.outputs) w.string(2, o);
  w.string(3, node.name).string(4, node.op);
  for (const [k, v] of Object.entries(node.attributes ?? {})) w.message(5, (a) => writeAttribute(a, k, v));
  if (node.domain) w.string(7, node.domain);
}

function writeValueInfo(w: ProtoWriter, v: ValueInfo): void {
  w.string(1, v.name);
  w.message(2, (type) =>
    type.message(1, (tensor) => {
      tensor.int(1, v.type);
      tensor.message(2, (shape) => {
        for (const d of v.shape) {
          shape.message(1, (dim) => (typeof d === "number" ? dim.int(1, d) : dim.string(2, d)));
        }
      });
    }),
  );
}

function writeExternalTensor(w: ProtoWriter, t: ExternalTensor): void {
  w.packedInts(1, t.dims).int(2, t.type).string(8, t.name);
  const entry = (key: string, value: string) => w.message(13, (e) => e.string(1, key).string(2, value));
  entry("location", t.location);
  entry("offset", String(t.offset));
  entry("length", String(t.length));
  w.int(14, 1);
}

function writeInlineTensor(w: ProtoWriter, t: InlineTensor): void {
  w.packedInts(1, t.dims).int(2, t.type).string(8, t.name).bytes(9, t.raw);
}

/** Serializes a ModelProto. Field numbers follow onnx/onnx.proto. */
export function encodeModel(model: ModelDef): Uint8Array {
  const w = new ProtoWriter();
  w.int(1, IR_VERSION).string(2, "kiln").string(3, model.producerVersion);
  w.message(7, (g) => {
    for (const n of model.nodes) g.message(1, (m) => writeNode(m, n));
    g.string(2, model.graphName);
    for (const t of model.externalTensors) g.message(5, (m) => writeExternalTensor(m, t));
    for (const t of model.inlineTensors) g.message(5, (m) => writeInlineTensor(m, t));
    for (const i of model.inputs) g.message(11, (m) => writeValueInfo(m, i));
    for (const o of model.outputs) g.message(12, (m) => writeValueInfo(m, o));
  });
  for (const o of model.opsets) w.message(8, (m) => m.string(1, o.domain).int(2, o.version));
  for (const [k, v] of Object.entries(model.metadata)) w.message(14, (m) => m.string(1, k).string(2, v));
  return w.finish();
}
