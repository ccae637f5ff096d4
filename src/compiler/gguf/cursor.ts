import type { FileHandle } from "node:fs/promises";
import { GgufTruncatedError } from "./errors.js";

const DEFAULT_CHUNK = 1 << 20;
const TWO_POW_32 = 2 ** 32;
/** Above this high word a u64 no longer fits a JS number exactly. */
const SAFE_HIGH_WORD = 2 ** 21;
const MIN_SAFE_BIG = BigInt(Number.MIN_SAFE_INTEGER);
const MAX_SAFE_BIG = BigInt(Number.MAX_SAFE_INTEGER);

/**
 * Little-endian reader over the start of a file that pulls chunks on demand, so a header with
 * megabytes of vocabulary is parsed without loading gigabytes of tensor data.
 * Callers `await need(n)` (or check `has(n)` first, to skip an await on the hot path) before
 * the synchronous reads.
 */
export class FileCursor {
  private buf: Buffer;
  /** File offset of buf[0]. */
  private start = 0;
  /** Valid bytes in buf. */
  private end = 0;
  /** Read position in buf. */
  private pos = 0;

  constructor(
    private readonly handle: FileHandle,
    readonly path: string,
    readonly fileSize: number,
    chunkSize = DEFAULT_CHUNK,
  ) {
    this.buf = Buffer.allocUnsafe(Math.max(64, Math.min(chunkSize, fileSize)));
  }

  /** Absolute file offset of the next byte to read. */
  get offset(): number {
    return this.start + this.pos;
  }

  get remainingInFile(): number {
    return this.fileSize - this.offset;
  }

  has(n: number): boolean {
    return this.end - this.pos >= n;
  }

  async need(n: number, what: string): Promise<void> {
    if (this.has(n)) return;
    if (n > this.remainingInFile) {
      throw new GgufTruncatedError(this.path, `${what} needs ${n} bytes at offset ${this.offset}, but the file ends at ${this.fileSize}`);
    }
    this.compact(n);
    await this.fillTo(n, what);
  }

  private compact(n: number): void {
    const kept = this.end - this.pos;
    if (n > this.buf.length) {
      const bigger = Buffer.allocUnsafe(Math.max(n, this.buf.length * 2));
      this.buf.copy(bigger, 0, this.pos, this.end);
      this.buf = bigger;
    } else {
      this.buf.copy(this.buf, 0, this.pos, this.end);
    }
    this.start += this.pos;
    this.pos = 0;
    this.end = kept;
  }

  private async fillTo(n: number, what: string): Promise<void> {
    while (this.end < n) {
      const { bytesRead } = await this.handle.read(this.buf, this.end, this.buf.length - this.end, this.start + this.end);
      if (bytesRead === 0) {
        throw new GgufTruncatedError(this.path, `file ended at offset ${this.start + this.end} while reading ${what}`);
      }
      this.end += bytesRead;
    }
  }

  bytes(n: number): Uint8Array {
    const out = new Uint8Array(this.buf.subarray(this.pos, this.pos + n));
    this.pos += n;
    return out;
  }

  u8(): number {
    return this.buf[this.pos++];
  }

  i8(): number {
    return this.buf.readInt8(this.pos++);
  }

  u16(): number {
    const v = this.buf.readUInt16LE(this.pos);
    this.pos += 2;
    return v;
  }

  i16(): number {
    const v = this.buf.readInt16LE(this.pos);
    this.pos += 2;
    return v;
  }

  u32(): number {
    const v = this.buf.readUInt32LE(this.pos);
    this.pos += 4;
    return v;
  }

  i32(): number {
    const v = this.buf.readInt32LE(this.pos);
    this.pos += 4;
    return v;
  }

  f32(): number {
    const v = this.buf.readFloatLE(this.pos);
    this.pos += 4;
    return v;
  }

  f64(): number {
    const v = this.buf.readDoubleLE(this.pos);
    this.pos += 8;
    return v;
  }

  /** A u64 as a number when exact, else a bigint. */
  u64(): number | bigint {
    const lo = this.buf.readUInt32LE(this.pos);
    const hi = this.buf.readUInt32LE(this.pos + 4);
    if (hi < SAFE_HIGH_WORD) {
      this.pos += 8;
      return hi * TWO_POW_32 + lo;
    }
    const v = this.buf.readBigUInt64LE(this.pos);
    this.pos += 8;
    return v;
  }

  /** An i64 as a number when exact, else a bigint. */
  i64(): number | bigint {
    const v = this.buf.readBigInt64LE(this.pos);
    this.pos += 8;
    return v >= MIN_SAFE_BIG && v <= MAX_SAFE_BIG ? Number(v) : v;
  }

  utf8(n: number): string {
    const s = this.buf.toString("utf8", this.pos, this.pos + n);
    this.pos += n;
    return s;
  }
}
