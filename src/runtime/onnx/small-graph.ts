/**
 * ONNX ModelProto bytes for the runtime's own small helper graphs (a device probe, joining speech
 * windows on a device), written here because the runtime
 * imports no compiler and these graphs need no file on disk. Only what they use: nodes with integer
 * and integer-list attributes, and typed inputs and outputs whose dimensions are fixed or named.
 */

/** ONNX element types used by the helper graphs. */
export const ElementType = { float: 1, int64: 7, float16: 10 } as const;
export type ElementType = (typeof ElementType)[keyof typeof ElementType];

/** A graph input or output: its name, element type and dimensions (a number is fixed, a string named). */
export interface SmallValue {
  name: string;
  type: ElementType;
  dims: ReadonlyArray<number | string>;
}

export interface SmallNode {
  op: string;
  inputs: readonly string[];
  outputs: readonly string[];
  /** Integer and integer-list attributes (non-negative), by name. */
  attributes?: Readonly<Record<string, number | readonly number[]>>;
}

export interface SmallGraph {
  name: string;
  nodes: readonly SmallNode[];
  inputs: readonly SmallValue[];
  outputs: readonly SmallValue[];
  /** The default domain's opset. Default 17. */
  opset?: number;
}

/** ModelProto bytes (IR version 8) of `graph`. */
export function smallGraphBytes(graph: SmallGraph): Uint8Array {
  const parts = [
    ...graph.nodes.map((node) => message(1, nodeProto(node))),
    stringField(2, graph.name),
    ...graph.inputs.map((value) => message(11, valueInfo(value))),
    ...graph.outputs.map((value) => message(12, valueInfo(value))),
  ];
  const opset = message(8, [stringField(1, ""), varintField(2, graph.opset ?? 17)]);
  return concat([varintField(1, 8), opset, message(7, parts)]);
}

function nodeProto(node: SmallNode): Uint8Array[] {
  const attributes = Object.entries(node.attributes ?? {}).map(([name, value]) => {
    const ints = typeof value === "number" ? [value] : value;
    if (ints.some((v) => !Number.isInteger(v) || v < 0)) throw new RangeError(`attribute ${name} of ${node.op}: only non-negative integers are written`);
    if (typeof value === "number") return message(5, [stringField(1, name), varintField(3, value), varintField(20, 2 /* AttributeProto.INT */)]);
    return message(5, [stringField(1, name), ...ints.map((v) => varintField(8, v)), varintField(20, 7 /* AttributeProto.INTS */)]);
  });
  return [...node.inputs.map((i) => stringField(1, i)), ...node.outputs.map((o) => stringField(2, o)), stringField(4, node.op), ...attributes];
}

function valueInfo(value: SmallValue): Uint8Array[] {
  const dims = value.dims.map((d) => message(1, [typeof d === "number" ? varintField(1, d) : stringField(2, d)]));
  return [stringField(1, value.name), message(2, [message(1, [varintField(1, value.type), message(2, dims)])])];
}

function varint(value: number): number[] {
  const bytes: number[] = [];
  let v = value;
  while (v >= 0x80) {
    bytes.push((v & 0x7f) | 0x80);
    v = Math.floor(v / 128);
  }
  bytes.push(v);
  return bytes;
}

function varintField(field: number, value: number): Uint8Array {
  return Uint8Array.from([...varint(field << 3), ...varint(value)]);
}

function lengthDelimited(field: number, body: Uint8Array): Uint8Array {
  return concat([Uint8Array.from([...varint((field << 3) | 2), ...varint(body.length)]), body]);
}

function stringField(field: number, text: string): Uint8Array {
  return lengthDelimited(field, new TextEncoder().encode(text));
}

function message(field: number, parts: Uint8Array[]): Uint8Array {
  return lengthDelimited(field, concat(parts));
}

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
