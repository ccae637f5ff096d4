/**
 * Reader of CTranslate2 model folders (`model.bin` + `config.json`), the format faster-whisper uses.
 *
 * model.bin (ctranslate2/specs/model_spec.py, `_serialize`): u32 binary version, spec name, u32 spec
 * revision, u32 variable count, then per variable: name, u8 rank, u32 dims, u8 dtype, u32 byte count,
 * bytes; then u32 alias count and (alias, variable) name pairs. Strings are a u16 length that counts a
 * trailing NUL, the bytes, and the NUL. Only the table is read up front: tensor bytes are read at their
 * offset when asked for, so a multi-gigabyte file never sits in memory.
 */
import { closeSync, fstatSync, openSync, readFileSync, readSync } from "node:fs";
import { join } from "node:path";
import { halfToFloatTable } from "../gguf/fp16.js";

/** CTranslate2's dtype ids, in `_dtype_to_type_id` order. */
export const CT2_DTYPES = ["float32", "int8", "int16", "int32", "float16", "bfloat16"] as const;
export type Ct2Dtype = (typeof CT2_DTYPES)[number];
const DTYPE_BYTES: Record<Ct2Dtype, number> = { float32: 4, int8: 1, int16: 2, int32: 4, float16: 2, bfloat16: 2 };

/** A model.bin (or config.json) that is not what CTranslate2 writes. */
export class Ct2FormatError extends Error {
  constructor(
    readonly path: string,
    why: string,
  ) {
    super(`${path} is not a readable CTranslate2 model: ${why}`);
    this.name = "Ct2FormatError";
  }
}

export interface Ct2Variable {
  name: string;
  dims: number[];
  dtype: Ct2Dtype;
  /** Byte offset of the data in model.bin. */
  offset: number;
  bytes: number;
}

/** The oldest and newest binary versions whose layout this reader knows (5 added aliases' current form). */
const MIN_VERSION = 5;
const MAX_VERSION = 6;

/** Sequential little-endian reads over a file descriptor, bounded by the file size. */
class FileCursor {
  pos = 0;
  constructor(
    private readonly fd: number,
    readonly size: number,
    private readonly path: string,
  ) {}

  bytes(n: number): Buffer {
    if (this.pos + n > this.size) throw new Ct2FormatError(this.path, `truncated at byte ${this.pos} (wanted ${n} more of ${this.size})`);
    const out = Buffer.alloc(n);
    for (let done = 0; done < n; ) done += readSync(this.fd, out, done, n - done, this.pos + done);
    this.pos += n;
    return out;
  }

  u8(): number {
    return this.bytes(1).readUInt8(0);
  }
  u16(): number {
    return this.bytes(2).readUInt16LE(0);
  }
  u32(): number {
    return this.bytes(4).readUInt32LE(0);
  }

  /** A u16 length counting the trailing NUL, then the UTF-8 bytes and the NUL. */
  string(): string {
    const n = this.u16();
    if (n === 0) throw new Ct2FormatError(this.path, `empty string length at byte ${this.pos - 2}`);
    const raw = this.bytes(n);
    if (raw[n - 1] !== 0) throw new Ct2FormatError(this.path, `string at byte ${this.pos - n} is not NUL-terminated`);
    return raw.subarray(0, n - 1).toString("utf8");
  }

  skip(n: number): void {
    if (this.pos + n > this.size) throw new Ct2FormatError(this.path, `truncated: a tensor of ${n} bytes at byte ${this.pos} runs past the end (${this.size})`);
    this.pos += n;
  }
}

/** An open CTranslate2 model.bin: its variable table, with tensors read on demand. */
export class Ct2Model {
  private constructor(
    readonly path: string,
    private readonly fd: number,
    readonly version: number,
    readonly specName: string,
    readonly specRevision: number,
    private readonly variables: Map<string, Ct2Variable>,
    /** alias name -> variable name. */
    readonly aliases: Map<string, string>,
  ) {}

  static open(path: string): Ct2Model {
    const fd = openSync(path, "r");
    try {
      const cur = new FileCursor(fd, fstatSync(fd).size, path);
      const version = cur.u32();
      if (version < MIN_VERSION || version > MAX_VERSION)
        throw new Ct2FormatError(path, `binary version ${version} (this reader knows ${MIN_VERSION}-${MAX_VERSION})`);
      const specName = cur.string();
      const specRevision = cur.u32();
      const variables = readVariables(cur, path);
      const aliases = readAliases(cur, variables, path);
      if (cur.pos !== cur.size) throw new Ct2FormatError(path, `${cur.size - cur.pos} unexpected bytes after the alias table`);
      return new Ct2Model(path, fd, version, specName, specRevision, variables, aliases);
    } catch (err) {
      closeSync(fd);
      throw err;
    }
  }

  close(): void {
    closeSync(this.fd);
  }

  /** Names of the stored variables (aliases excluded). */
  names(): string[] {
    return [...this.variables.keys()];
  }

  has(name: string): boolean {
    return this.variables.has(this.resolve(name));
  }

  variable(name: string): Ct2Variable {
    const v = this.variables.get(this.resolve(name));
    if (!v) throw new Ct2FormatError(this.path, `no variable ${name}`);
    return v;
  }

  dims(name: string): number[] {
    return this.variable(name).dims;
  }

  private resolve(name: string): string {
    return this.aliases.get(name) ?? name;
  }

  /** The stored bytes of one variable, read from the file now. */
  raw(name: string): Buffer {
    const v = this.variable(name);
    const out = Buffer.alloc(v.bytes);
    for (let done = 0; done < v.bytes; ) {
      const n = readSync(this.fd, out, done, v.bytes - done, v.offset + done);
      if (n === 0) throw new Ct2FormatError(this.path, `${name} ends early (file changed while reading?)`);
      done += n;
    }
    return out;
  }

  /**
   * A variable as float32 in storage order. Quantized ones (int8, int16) are divided by their
   * `<name>_scale` variable (per output row for int8, one scalar for int16), as CTranslate2 does.
   */
  floats(name: string): Float32Array {
    const v = this.variable(name);
    const values = this.storedAsFloats(v);
    if (v.dtype !== "int8" && v.dtype !== "int16") return values;
    const scaleName = `${name}_scale`;
    if (!this.has(scaleName)) throw new Ct2FormatError(this.path, `${name} is ${v.dtype} but has no ${scaleName}`);
    return dequantizeRows(values, this.storedAsFloats(this.variable(scaleName)), v, this.path);
  }

  /** A scalar (or the first element) as a number: spec attributes such as num_heads. */
  scalar(name: string): number {
    return this.storedAsFloats(this.variable(name))[0];
  }

  /** Stored values widened to float32 (typed views: the file is little-endian, as is every host Node runs on here). */
  private storedAsFloats(v: Ct2Variable): Float32Array {
    const buf = this.raw(v.name);
    // Buffer.alloc gives a fresh ArrayBuffer at offset 0, so these views are aligned.
    const count = v.bytes / DTYPE_BYTES[v.dtype];
    switch (v.dtype) {
      case "float32":
        return new Float32Array(buf.buffer, buf.byteOffset, count);
      case "float16": {
        const table = halfToFloatTable();
        const halves = new Uint16Array(buf.buffer, buf.byteOffset, count);
        const out = new Float32Array(count);
        for (let i = 0; i < count; i++) out[i] = table[halves[i]];
        return out;
      }
      case "bfloat16": {
        const halves = new Uint16Array(buf.buffer, buf.byteOffset, count);
        const bits = new Uint32Array(count);
        for (let i = 0; i < count; i++) bits[i] = halves[i] << 16;
        return new Float32Array(bits.buffer);
      }
      case "int8":
        return Float32Array.from(new Int8Array(buf.buffer, buf.byteOffset, count));
      case "int16":
        return Float32Array.from(new Int16Array(buf.buffer, buf.byteOffset, count));
      case "int32":
        return Float32Array.from(new Int32Array(buf.buffer, buf.byteOffset, count));
    }
  }

  /**
   * The weight dtype the file was converted with, as CTranslate2 names quantizations: the dtype of
   * the matmul weights, plus the float dtype of the rest for int8 ("int8_float16").
   */
  weightDtype(probe: string, floatProbe: string): string {
    const w = this.variable(probe).dtype;
    if (w !== "int8" && w !== "int16") return w;
    const other = this.variable(floatProbe).dtype;
    return other === "float32" ? w : `${w}_${other}`;
  }
}

function readVariables(cur: FileCursor, path: string): Map<string, Ct2Variable> {
  const count = cur.u32();
  const variables = new Map<string, Ct2Variable>();
  for (let i = 0; i < count; i++) {
    const name = cur.string();
    const rank = cur.u8();
    const dims = Array.from({ length: rank }, () => cur.u32());
    const typeId = cur.u8();
    const dtype = CT2_DTYPES[typeId];
    if (dtype === undefined) throw new Ct2FormatError(path, `${name} has unknown dtype id ${typeId}`);
    const bytes = cur.u32();
    const elements = dims.reduce((a, b) => a * b, 1);
    if (bytes !== elements * DTYPE_BYTES[dtype])
      throw new Ct2FormatError(path, `${name} [${dims.join(", ")}] ${dtype} declares ${bytes} bytes, expected ${elements * DTYPE_BYTES[dtype]}`);
    variables.set(name, { name, dims, dtype, offset: cur.pos, bytes });
    cur.skip(bytes);
  }
  return variables;
}

function readAliases(cur: FileCursor, variables: Map<string, Ct2Variable>, path: string): Map<string, string> {
  const aliases = new Map<string, string>();
  if (cur.pos === cur.size) return aliases;
  const count = cur.u32();
  for (let i = 0; i < count; i++) {
    const alias = cur.string();
    const target = cur.string();
    if (!variables.has(target)) throw new Ct2FormatError(path, `alias ${alias} names a missing variable ${target}`);
    aliases.set(alias, target);
  }
  return aliases;
}

/** int8 rows (or an int16 tensor) divided by their scales: CTranslate2 stores q = round(w * scale). */
function dequantizeRows(values: Float32Array, scales: Float32Array, v: Ct2Variable, path: string): Float32Array {
  if (scales.length === 1) return values.map((q) => q / scales[0]);
  const rows = v.dims[0];
  if (scales.length !== rows) throw new Ct2FormatError(path, `${v.name} has ${rows} rows but ${scales.length} scales`);
  const rowSize = values.length / rows;
  for (let r = 0; r < rows; r++) {
    const s = scales[r];
    for (let i = r * rowSize; i < (r + 1) * rowSize; i++) values[i] /= s;
  }
  return values;
}

/** A CTranslate2 model folder's config.json (Whisper's keys; other specs have other ones). */
export interface Ct2Config {
  suppress_ids?: number[];
  suppress_ids_begin?: number[];
  lang_ids?: number[];
  alignment_heads?: Array<[number, number]>;
  [key: string]: unknown;
}

export function readCt2Config(dir: string): Ct2Config {
  const path = join(dir, "config.json");
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(path, "utf8"));
  } catch (err) {
    throw new Ct2FormatError(path, `config.json cannot be read as JSON (${err instanceof Error ? err.message : String(err)})`);
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw new Ct2FormatError(path, "config.json is not a JSON object");
  return parsed as Ct2Config;
}
