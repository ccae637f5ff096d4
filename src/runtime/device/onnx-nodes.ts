/**
 * Reads the names of a graph's nodes of one operator from its ONNX protobuf, without a protobuf
 * library: only ModelProto.graph (7) -> GraphProto.node (1) -> NodeProto name (3), op_type (4) and
 * domain (7) are decoded; every other field is skipped by its wire type.
 */

/** Names of the nodes of `model` whose operator is `opType` in `domain` ("" is the default ONNX domain). */
export function nodeNamesOf(model: Uint8Array, opType: string, domain = ""): string[] {
  const names: string[] = [];
  const text = new TextDecoder();
  for (const graph of lengthDelimited(model, 0, model.length, 7)) {
    for (const node of lengthDelimited(model, graph.start, graph.end, 1)) {
      let name = "";
      let op = "";
      let nodeDomain = "";
      for (const f of fields(model, node.start, node.end)) {
        if (f.wire !== 2) continue;
        const value = () => text.decode(model.subarray(f.start, f.end));
        if (f.field === 3) name = value();
        else if (f.field === 4) op = value();
        else if (f.field === 7) nodeDomain = value();
      }
      if (op === opType && normalDomain(nodeDomain) === normalDomain(domain) && name !== "") names.push(name);
    }
  }
  return names;
}

/** "ai.onnx" and "" both name the default domain. */
function normalDomain(domain: string): string {
  return domain === "ai.onnx" ? "" : domain;
}

interface Field {
  field: number;
  wire: number;
  /** The bytes of a length-delimited field's value (empty for other wire types). */
  start: number;
  end: number;
}

function* lengthDelimited(buf: Uint8Array, start: number, end: number, field: number): Generator<Field> {
  for (const f of fields(buf, start, end)) if (f.field === field && f.wire === 2) yield f;
}

function* fields(buf: Uint8Array, start: number, end: number): Generator<Field> {
  let at = start;
  const varint = (): number => {
    let value = 0;
    let scale = 1;
    for (;;) {
      if (at >= end) throw new RangeError("a varint runs past its message");
      const byte = buf[at++];
      value += (byte & 0x7f) * scale;
      scale *= 128;
      if (byte < 0x80) return value;
    }
  };
  while (at < end) {
    const key = varint();
    const field = Math.floor(key / 8);
    const wire = key & 7;
    if (wire === 0) {
      varint();
      yield { field, wire, start: at, end: at };
    } else if (wire === 1 || wire === 5) {
      at += wire === 1 ? 8 : 4;
      yield { field, wire, start: at, end: at };
    } else if (wire === 2) {
      const length = varint();
      yield { field, wire, start: at, end: at + length };
      at += length;
    } else {
      throw new RangeError(`unsupported protobuf wire type ${wire}`);
    }
  }
}
