/**
 * A minimal protobuf wire-format writer: just what ONNX's ModelProto needs
 * (varints, 32-bit floats, length-delimited bytes, nested messages).
 * Writing it here keeps the compiler free of a generated-code dependency.
 */
export class ProtoWriter {
  private chunks: Uint8Array[] = [];
  private scratch = new Uint8Array(16);
  private length = 0;

  private push(bytes: Uint8Array): void {
    this.chunks.push(bytes);
    this.length += bytes.length;
  }

  private varint(value: number | bigint): void {
    let v = BigInt.asUintN(64, BigInt(value));
    let n = 0;
    while (v >= 0x80n) {
      this.scratch[n++] = Number(v & 0x7fn) | 0x80;
      v >>= 7n;
    }
    this.scratch[n++] = Number(v);
    this.push(this.scratch.slice(0, n));
  }

  private tag(field: number, wireType: number): void {
    this.varint((field << 3) | wireType);
  }

  int(field: number, value: number | bigint): this {
    this.tag(field, 0);
    this.varint(value);
    return this;
  }

  float(field: number, value: number): this {
    this.tag(field, 5);
    const b = new Uint8Array(4);
    new DataView(b.buffer).setFloat32(0, value, true);
    this.push(b);
    return this;
  }

  bytes(field: number, value: Uint8Array): this {
    this.tag(field, 2);
    this.varint(value.length);
    this.push(value);
    return this;
  }

  string(field: number, value: string): this {
    return this.bytes(field, new TextEncoder().encode(value));
  }

  message(field: number, build: (w: ProtoWriter) => void): this {
    const inner = new ProtoWriter();
    build(inner);
    return this.bytes(field, inner.finish());
  }

  packedInts(field: number, values: ReadonlyArray<number | bigint>): this {
    const inner = new ProtoWriter();
    for (const v of values) inner.varint(v);
    return this.bytes(field, inner.finish());
  }

  packedFloats(field: number, values: ReadonlyArray<number>): this {
    const b = new Uint8Array(values.length * 4);
    const dv = new DataView(b.buffer);
    values.forEach((v, i) => dv.setFloat32(i * 4, v, true));
    return this.bytes(field, b);
  }

  finish(): Uint8Array {
    const out = new Uint8Array(this.length);
    let offset = 0;
    for (const c of this.chunks) {
      out.set(c, offset);
      offset += c.length;
    }
    return out;
  }
}
