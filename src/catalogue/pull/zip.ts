/**
 * A minimal zip reader (enough for Python wheels): reads the central directory (ZIP64 included) and
 * streams stored or deflated members to disk through node:zlib, hashing as it goes, so a 100 MB
 * member is never held in memory.
 */
import { createHash } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { open, type FileHandle } from "node:fs/promises";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import zlib from "node:zlib";

const EOCD_SIGNATURE = 0x06054b50;
const ZIP64_LOCATOR_SIGNATURE = 0x07064b50;
const ZIP64_EOCD_SIGNATURE = 0x06064b50;
const CENTRAL_SIGNATURE = 0x02014b50;
const LOCAL_SIGNATURE = 0x04034b50;

export const ZIP_STORED = 0;
export const ZIP_DEFLATED = 8;

export interface ZipEntry {
  name: string;
  /** 0 stored, 8 deflated. */
  method: number;
  flags: number;
  crc32: number;
  compressedSize: number;
  size: number;
  localHeaderOffset: number;
}

export interface ExtractResult {
  sha256: string;
  bytes: number;
}

export class ZipFormatError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ZipFormatError";
  }
}

async function readAt(fh: FileHandle, position: number, length: number): Promise<Buffer> {
  const buf = Buffer.alloc(length);
  let got = 0;
  while (got < length) {
    const { bytesRead } = await fh.read(buf, got, length - got, position + got);
    if (bytesRead === 0) throw new ZipFormatError(`unexpected end of file at ${position + got}`);
    got += bytesRead;
  }
  return buf;
}

function u64(buf: Buffer, offset: number): number {
  const value = buf.readBigUInt64LE(offset);
  if (value > BigInt(Number.MAX_SAFE_INTEGER)) throw new ZipFormatError("zip offset too large");
  return Number(value);
}

/** zlib.crc32 exists from Node 20.15 / 22.2; without it the CRC is not checked (SHA-256 still is). */
const crc32 = (zlib as unknown as { crc32?: (data: Buffer, value?: number) => number }).crc32;

export class ZipReader {
  readonly path: string;
  readonly entries: readonly ZipEntry[];
  private readonly byName: Map<string, ZipEntry>;
  private readonly fh: FileHandle;

  private constructor(path: string, fh: FileHandle, entries: ZipEntry[]) {
    this.path = path;
    this.fh = fh;
    this.entries = entries;
    this.byName = new Map(entries.map((e) => [e.name, e]));
  }

  static async open(path: string): Promise<ZipReader> {
    const fh = await open(path, "r");
    try {
      return new ZipReader(path, fh, await readCentralDirectory(fh));
    } catch (err) {
      await fh.close();
      throw err;
    }
  }

  get(name: string): ZipEntry | undefined {
    return this.byName.get(name);
  }

  /** Offset of the member's data (after its local header). */
  async dataOffset(entry: ZipEntry): Promise<number> {
    const header = await readAt(this.fh, entry.localHeaderOffset, 30);
    if (header.readUInt32LE(0) !== LOCAL_SIGNATURE) throw new ZipFormatError(`bad local header for ${entry.name}`);
    return entry.localHeaderOffset + 30 + header.readUInt16LE(26) + header.readUInt16LE(28);
  }

  /** The member's uncompressed bytes as a stream. */
  async openStream(entry: ZipEntry): Promise<Readable> {
    if (entry.flags & 1) throw new ZipFormatError(`${entry.name} is encrypted`);
    if (entry.method !== ZIP_STORED && entry.method !== ZIP_DEFLATED) {
      throw new ZipFormatError(`${entry.name}: unsupported compression method ${entry.method}`);
    }
    const start = await this.dataOffset(entry);
    const raw = entry.compressedSize === 0 ? Readable.from([] as Buffer[]) : createReadStream(this.path, { start, end: start + entry.compressedSize - 1 });
    if (entry.method === ZIP_STORED) return raw;
    const inflate = zlib.createInflateRaw();
    raw.on("error", (err) => inflate.destroy(err));
    return raw.pipe(inflate);
  }

  /** Reads a (small) member into memory. */
  async read(entry: ZipEntry): Promise<Buffer> {
    const chunks: Buffer[] = [];
    for await (const chunk of await this.openStream(entry)) chunks.push(chunk as Buffer);
    const data = Buffer.concat(chunks);
    if (data.length !== entry.size) throw new ZipFormatError(`${entry.name}: size ${data.length}, expected ${entry.size}`);
    if (crc32 && crc32(data) >>> 0 !== entry.crc32) throw new ZipFormatError(`${entry.name}: CRC-32 mismatch`);
    return data;
  }

  /**
   * Streams a member into `dest` (created or truncated), computing its SHA-256 and checking its size
   * and CRC-32 against the central directory.
   */
  async extract(entry: ZipEntry, dest: string, onBytes?: (bytesDone: number, bytesTotal: number) => void): Promise<ExtractResult> {
    const hash = createHash("sha256");
    let bytes = 0;
    let crc = 0;
    const source = await this.openStream(entry);
    await pipeline(
      source,
      async function* (chunks: AsyncIterable<Buffer>) {
        for await (const chunk of chunks) {
          hash.update(chunk);
          if (crc32) crc = crc32(chunk, crc);
          bytes += chunk.length;
          onBytes?.(bytes, entry.size);
          yield chunk;
        }
      },
      createWriteStream(dest),
    );
    if (bytes !== entry.size) throw new ZipFormatError(`${entry.name}: inflated to ${bytes} bytes, expected ${entry.size}`);
    if (crc32 && crc >>> 0 !== entry.crc32) throw new ZipFormatError(`${entry.name}: CRC-32 mismatch`);
    return { sha256: hash.digest("hex"), bytes };
  }

  async close(): Promise<void> {
    await this.fh.close();
  }
}

async function readCentralDirectory(fh: FileHandle): Promise<ZipEntry[]> {
  const { size } = await fh.stat();
  if (size < 22) throw new ZipFormatError("not a zip file (too short)");
  const tailLength = Math.min(size, 22 + 0xffff);
  const tailStart = size - tailLength;
  const tail = await readAt(fh, tailStart, tailLength);
  let eocd = -1;
  for (let i = tail.length - 22; i >= 0; i--) {
    if (tail.readUInt32LE(i) === EOCD_SIGNATURE && i + 22 + tail.readUInt16LE(i + 20) <= tail.length) {
      eocd = i;
      break;
    }
  }
  if (eocd < 0) throw new ZipFormatError("not a zip file (no end of central directory)");
  let count = tail.readUInt16LE(eocd + 10);
  let cdSize = tail.readUInt32LE(eocd + 12);
  let cdOffset = tail.readUInt32LE(eocd + 16);
  if (count === 0xffff || cdSize === 0xffffffff || cdOffset === 0xffffffff) {
    const locatorAt = tailStart + eocd - 20;
    if (locatorAt < 0) throw new ZipFormatError("ZIP64 locator missing");
    const locator = await readAt(fh, locatorAt, 20);
    if (locator.readUInt32LE(0) !== ZIP64_LOCATOR_SIGNATURE) throw new ZipFormatError("ZIP64 locator missing");
    const record = await readAt(fh, u64(locator, 8), 56);
    if (record.readUInt32LE(0) !== ZIP64_EOCD_SIGNATURE) throw new ZipFormatError("bad ZIP64 end record");
    count = u64(record, 32);
    cdSize = u64(record, 40);
    cdOffset = u64(record, 48);
  }
  if (cdOffset + cdSize > size) throw new ZipFormatError("central directory outside the file");
  const cd = await readAt(fh, cdOffset, cdSize);
  const entries: ZipEntry[] = [];
  let p = 0;
  for (let i = 0; i < count; i++) {
    if (p + 46 > cd.length || cd.readUInt32LE(p) !== CENTRAL_SIGNATURE) {
      throw new ZipFormatError(`bad central directory entry ${i}`);
    }
    const flags = cd.readUInt16LE(p + 8);
    const method = cd.readUInt16LE(p + 10);
    const crc = cd.readUInt32LE(p + 16);
    let compressedSize = cd.readUInt32LE(p + 20);
    let uncompressedSize = cd.readUInt32LE(p + 24);
    const nameLength = cd.readUInt16LE(p + 28);
    const extraLength = cd.readUInt16LE(p + 30);
    const commentLength = cd.readUInt16LE(p + 32);
    let localHeaderOffset = cd.readUInt32LE(p + 42);
    const name = cd.toString(flags & 0x800 ? "utf8" : "latin1", p + 46, p + 46 + nameLength);
    // ZIP64 extended information: the 8-byte values present are those whose 4-byte field is 0xFFFFFFFF.
    let e = p + 46 + nameLength;
    const extraEnd = e + extraLength;
    while (e + 4 <= extraEnd) {
      const id = cd.readUInt16LE(e);
      const len = cd.readUInt16LE(e + 2);
      if (id === 0x0001) {
        let q = e + 4;
        if (uncompressedSize === 0xffffffff) {
          uncompressedSize = u64(cd, q);
          q += 8;
        }
        if (compressedSize === 0xffffffff) {
          compressedSize = u64(cd, q);
          q += 8;
        }
        if (localHeaderOffset === 0xffffffff) localHeaderOffset = u64(cd, q);
      }
      e += 4 + len;
    }
    entries.push({
      name,
      method,
      flags,
      crc32: crc,
      compressedSize,
      size: uncompressedSize,
      localHeaderOffset,
    });
    p = extraEnd + commentLength;
  }
  return entries;
}
