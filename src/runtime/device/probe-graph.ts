/**
 * The smallest graph that proves a provider computes: y = x + x over four floats, as ONNX protobuf
 * bytes written here (the runtime imports no compiler), so a probe needs no file on disk.
 */

/** The graph's input and output names, and its input length. */
export const PROBE_GRAPH = { input: "x", output: "y", length: 4 } as const;

/** ModelProto bytes: IR version 8, opset 17, one Add node. */
export function probeGraphBytes(): Uint8Array {
  const tensorType = message(1, [varintField(1, 1 /* FLOAT */), message(2, [message(1, [varintField(1, PROBE_GRAPH.length)])])]);
  const valueInfo = (name: string) => [stringField(1, name), message(2, [tensorType])];
  const node = message(1, [stringField(1, PROBE_GRAPH.input), stringField(1, PROBE_GRAPH.input), stringField(2, PROBE_GRAPH.output), stringField(4, "Add")]);
  const graph = message(7, [node, stringField(2, "device_probe"), message(11, valueInfo(PROBE_GRAPH.input)), message(12, valueInfo(PROBE_GRAPH.output))]);
  const opset = message(8, [stringField(1, ""), varintField(2, 17)]);
  return concat([varintField(1, 8), opset, graph]);
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
