/**
 * The usage spool: where usage records wait while the ledger (the `usage` table) cannot be
 * written, e.g. with the database's disk full. An append-only file of JSON lines
 * (`$KILN_HOME/usage-spool.jsonl`, owner-only), each append fsync'd before the answer's usage
 * counts as kept. A settle loop writes what the spool holds to the ledger (idempotent per request
 * id, so a record written twice counts once) and then empties it; a spool left by an earlier run is
 * settled at startup. A record that neither the ledger nor the spool takes is held in memory,
 * retried, and logged loudly; while that is so, new metered requests are refused (never served free).
 */
import {
  closeSync,
  constants,
  fchmodSync,
  fstatSync,
  fsyncSync,
  ftruncateSync,
  openSync,
  readFileSync,
  readSync,
  renameSync,
  statSync,
  writeSync,
} from "node:fs";
import { dirname, join } from "node:path";
import { kilnHome } from "../catalogue/paths.js";
import type { LedgerEntry, UsageLedger, UsageRecord, UsageRecorder } from "./usage.js";

/** File name of the spool in KILN_HOME. */
export const USAGE_SPOOL_FILE = "usage-spool.jsonl";

/** Default milliseconds between attempts to settle the spool: 5 s. */
export const DEFAULT_SETTLE_INTERVAL_MS = 5_000;

const SPOOL_FILE_MODE = 0o600;

/**
 * Where kiln serve spools usage: `KILN_USAGE_SPOOL` when set (a file on another disk than the
 * database's keeps taking records when that one is full), else `$KILN_HOME/usage-spool.jsonl`.
 */
export function usageSpoolPath(env: NodeJS.ProcessEnv = process.env): string {
  return env.KILN_USAGE_SPOOL && env.KILN_USAGE_SPOOL.length > 0 ? env.KILN_USAGE_SPOOL : join(kilnHome(env), USAGE_SPOOL_FILE);
}

/** What the recorder logs with (pino's shape). */
export interface UsageLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

/** The spool file: appends (fsync'd), reads, and empties. Every method throws what the file system throws. */
export class UsageSpool {
  constructor(readonly path: string) {}

  /** Appends `entries` as JSON lines and fsyncs them; on failure nothing partial is left behind where it can be helped. */
  append(entries: readonly LedgerEntry[]): void {
    if (entries.length === 0) return;
    const { fd, created } = openForAppend(this.path);
    try {
      const stat = fstatSync(fd);
      if (stat.isFile() && (stat.mode & 0o077) !== 0) fchmodSync(fd, SPOOL_FILE_MODE);
      let text = entries.map((e) => `${JSON.stringify(spoolLine(e))}\n`).join("");
      // A line cut short by an earlier crash must not swallow the first record of this append.
      if (stat.isFile() && stat.size > 0 && lastByte(fd, stat.size) !== 0x0a) text = `\n${text}`;
      try {
        writeFully(fd, Buffer.from(text, "utf8"));
        fsyncSync(fd);
      } catch (err) {
        if (stat.isFile()) ignoreErrors(() => ftruncateSync(fd, stat.size));
        throw err;
      }
    } finally {
      closeSync(fd);
    }
    if (created) ignoreErrors(() => fsyncDirectory(dirname(this.path)));
  }

  /** Whether the spool is a file with something in it. */
  hasEntries(): boolean {
    try {
      const stat = statSync(this.path);
      return stat.isFile() && stat.size > 0;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return false;
      throw err;
    }
  }

  /** The spooled entries, the lines that are not entries (a line cut short by a crash), and the bytes read. */
  read(): { entries: LedgerEntry[]; bad: string[]; size: number } {
    if (!this.hasEntries()) return { entries: [], bad: [], size: 0 };
    const entries: LedgerEntry[] = [];
    const bad: string[] = [];
    const bytes = readFileSync(this.path);
    for (const line of bytes.toString("utf8").split("\n")) {
      if (line.trim() === "") continue;
      const entry = parseLine(line);
      if (entry) entries.push(entry);
      else bad.push(line);
    }
    return { entries, bad, size: bytes.length };
  }

  /**
   * Removes the first `size` bytes (what a settle read and wrote to the ledger), keeping what was
   * appended since (an asynchronous ledger's settle lets records arrive meanwhile); durably.
   */
  dropFirst(size: number): void {
    let current: Buffer;
    try {
      current = readFileSync(this.path);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return;
      throw err;
    }
    if (current.length <= size) return this.clear();
    const temp = `${this.path}.tmp`;
    const fd = openSync(temp, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC, SPOOL_FILE_MODE);
    try {
      writeFully(fd, current.subarray(size));
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(temp, this.path);
    ignoreErrors(() => fsyncDirectory(dirname(this.path)));
  }

  /** Empties the spool (durably). */
  clear(): void {
    let fd: number;
    try {
      fd = openSync(this.path, "r+");
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return;
      throw err;
    }
    try {
      if (!fstatSync(fd).isFile()) return;
      ftruncateSync(fd, 0);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  }
}

export interface SpooledUsageOptions {
  ledger: UsageLedger;
  /** The spool file (kiln serve: `$KILN_HOME/usage-spool.jsonl`). */
  spoolPath: string;
  /** Default: JSON lines on stderr. */
  log?: UsageLog;
  /** Milliseconds between settle attempts; default {@link DEFAULT_SETTLE_INTERVAL_MS}; 0 = only when `settle()` is called. */
  settleIntervalMs?: number;
  /** The clock of the records' times (tests). */
  now?: () => Date;
}

/** What the recorder knows of where records can go. */
export interface UsageLedgerStatus {
  /** The last write to the ledger succeeded (or none has failed since the last settle). */
  ledgerWritable: boolean;
  /** The last append to the spool succeeded (or none has been tried). */
  spoolWritable: boolean;
  /** Records in neither the ledger nor the spool: kept in memory, retried. */
  held: number;
  /** The spool holds records not yet in the ledger. */
  spooled: boolean;
}

/**
 * A usage recorder that never throws into an answer: the ledger when it can be written, else the
 * spool, else memory (retried, logged). See the file's header.
 */
export class SpooledUsageRecorder implements UsageRecorder {
  private readonly ledger: UsageLedger;
  private readonly spool: UsageSpool;
  private readonly log: UsageLog;
  private readonly now: () => Date;
  private ledgerWritable = true;
  private spoolWritable = true;
  private spooled = false;
  private held: LedgerEntry[] = [];
  /** Asynchronous ledger writes not yet ended (Postgres). */
  private readonly inFlight = new Set<Promise<void>>();
  private settling = false;
  private readonly timer: NodeJS.Timeout | null;

  constructor(options: SpooledUsageOptions) {
    this.ledger = options.ledger;
    this.spool = new UsageSpool(options.spoolPath);
    this.log = options.log ?? stderrLog;
    this.now = options.now ?? (() => new Date());
    try {
      this.spooled = this.spool.hasEntries();
    } catch (err) {
      this.log.error({ err, spool: this.spool.path }, "usage spool: cannot read it; its records stay there until it can be read");
      this.spooled = true;
    }
    // A spool left by an earlier run is settled first.
    if (this.spooled) this.settle();
    const interval = options.settleIntervalMs ?? DEFAULT_SETTLE_INTERVAL_MS;
    this.timer = interval > 0 ? setInterval(() => this.settle(), interval).unref() : null;
  }

  record(usage: UsageRecord): void {
    const entry: LedgerEntry = { ...usage, at: this.now().toISOString() };
    if (this.ledgerWritable) {
      try {
        const written = this.ledger.write([entry]);
        if (written) this.track(written.catch((err: unknown) => this.writeFailed(err, [entry])));
        return;
      } catch (err) {
        this.writeFailed(err, [entry]);
        return;
      }
    }
    this.keep([entry]);
  }

  /** A write the ledger refused: its entries go to the spool (else memory). */
  private writeFailed(err: unknown, entries: LedgerEntry[]): void {
    if (this.ledgerWritable)
      this.log.error({ err, requestIds: entries.map((e) => e.requestId) }, "usage ledger: write failed; spooling usage records until it can be written again");
    this.ledgerWritable = false;
    this.keep(entries);
  }

  /** Keeps an asynchronous write in sight until it ends, so that `close` can wait for it. */
  private track(write: Promise<void>): void {
    this.inFlight.add(write);
    void write.finally(() => this.inFlight.delete(write));
  }

  admits(): boolean {
    return this.ledgerWritable || this.spoolWritable;
  }

  status(): UsageLedgerStatus {
    return { ledgerWritable: this.ledgerWritable, spoolWritable: this.spoolWritable, held: this.held.length, spooled: this.spooled };
  }

  /**
   * Writes what the spool and memory hold to the ledger, then empties the spool; when the ledger
   * still fails, moves what memory holds to the spool. Never throws.
   */
  settle(): void {
    if (this.settling || (!this.spooled && this.held.length === 0)) return;
    let spooled: LedgerEntry[] | null = [];
    let spoolBytes = 0;
    if (this.spooled) {
      try {
        const { entries, bad, size } = this.spool.read();
        for (const line of bad)
          this.log.error({ spool: this.spool.path, line }, "usage spool: dropping a line that is not a usage record (cut short by a crash?)");
        spooled = entries;
        spoolBytes = size;
      } catch (err) {
        this.log.error({ err, spool: this.spool.path }, "usage spool: cannot read it; settling later");
        spooled = null;
      }
    }
    const held = this.held;
    const entries = [...(spooled ?? []), ...held];
    // Nothing could be read and nothing is held: no evidence either way about the ledger.
    if (spooled === null && entries.length === 0) return;
    let written: void | Promise<void> = undefined;
    if (entries.length > 0) {
      try {
        written = this.ledger.write(entries);
      } catch (err) {
        this.settleFailed(err, held);
        return;
      }
    }
    if (!written) return this.settled(entries.length, spooled !== null ? spoolBytes : null, held);
    this.settling = true;
    this.track(
      written
        .then(
          () => this.settled(entries.length, spooled !== null ? spoolBytes : null, held),
          (err: unknown) => this.settleFailed(err, held),
        )
        .finally(() => (this.settling = false)),
    );
  }

  /** The ledger took what the spool (its first `spoolBytes`; null: not read) and memory held: remove that. */
  private settled(count: number, spoolBytes: number | null, held: LedgerEntry[]): void {
    const wasWritable = this.ledgerWritable;
    this.ledgerWritable = true;
    this.held = this.held.filter((e) => !held.includes(e));
    if (spoolBytes !== null && this.spooled) {
      try {
        this.spool.dropFirst(spoolBytes);
        this.spooled = this.spool.hasEntries();
      } catch (err) {
        // Harmless but for disk space: the ledger ignores records it already has.
        this.log.error({ err, spool: this.spool.path }, "usage spool: settled but cannot be emptied; retrying");
      }
    }
    if (count > 0 || !wasWritable) this.log.info({ settled: count }, "usage ledger: written again; spooled usage records settled");
  }

  /** The ledger still fails: what memory held moves to the spool. */
  private settleFailed(err: unknown, held: LedgerEntry[]): void {
    if (this.ledgerWritable) this.log.error({ err }, "usage ledger: write failed; spooling usage records until it can be written again");
    this.ledgerWritable = false;
    this.held = this.held.filter((e) => !held.includes(e));
    this.keep(held);
  }

  /** Stops settling, waits for the writes in flight, and makes a last attempt; never rejects. */
  close(): void | Promise<void> {
    if (this.timer) clearInterval(this.timer);
    const last = () => {
      if (this.held.length > 0) {
        this.log.error({ usage: this.held }, "usage: exiting with usage records neither in the ledger nor in the spool; they are only in this log");
      }
    };
    if (this.inFlight.size === 0) {
      this.settle();
      if (this.inFlight.size === 0) return last();
    }
    return (async () => {
      while (this.inFlight.size > 0) await Promise.allSettled([...this.inFlight]);
      this.settle();
      while (this.inFlight.size > 0) await Promise.allSettled([...this.inFlight]);
      last();
    })();
  }

  /** Keeps `entries` in the spool, else in memory. */
  private keep(entries: LedgerEntry[]): void {
    if (entries.length === 0) return;
    try {
      this.spool.append(entries);
      this.spooled = true;
      if (!this.spoolWritable) this.log.info({ spool: this.spool.path }, "usage spool: written again");
      this.spoolWritable = true;
    } catch (err) {
      this.held.push(...entries);
      this.spoolWritable = false;
      this.log.error(
        { err, spool: this.spool.path, usage: entries, held: this.held.length },
        "usage: neither the ledger nor the spool can be written; usage kept in memory and retried; new metered requests get 503 until one of them can",
      );
    }
  }
}

/** The fields a spool line keeps; the optional ones only when present, so text lines read as they always did. */
function spoolLine(e: LedgerEntry): LedgerEntry {
  const line: LedgerEntry = {
    requestId: e.requestId,
    keyId: e.keyId,
    slug: e.slug,
    promptTokens: e.promptTokens,
    completionTokens: e.completionTokens,
    at: e.at,
  };
  if (e.audioSeconds) line.audioSeconds = e.audioSeconds;
  if (e.artifactId) line.artifactId = e.artifactId;
  if (e.settledFrom) line.settledFrom = e.settledFrom;
  if (e.price) line.price = e.price;
  if (e.costNanoUsd !== undefined) line.costNanoUsd = e.costNanoUsd;
  if (e.replicaId) line.replicaId = e.replicaId;
  return line;
}

function parseLine(line: string): LedgerEntry | null {
  let v: unknown;
  try {
    v = JSON.parse(line);
  } catch {
    return null;
  }
  if (typeof v !== "object" || v === null) return null;
  const e = v as Record<string, unknown>;
  const count = (x: unknown) => typeof x === "number" && Number.isSafeInteger(x) && x >= 0;
  const optional = (x: unknown, ok: (x: unknown) => boolean) => x === undefined || ok(x);
  const text = (x: unknown) => typeof x === "string";
  if (typeof e.requestId !== "string" || e.requestId === "" || typeof e.slug !== "string" || typeof e.at !== "string") return null;
  if (!(e.keyId === null || typeof e.keyId === "string") || !count(e.promptTokens) || !count(e.completionTokens)) return null;
  // Lines spooled before transcriptions were metered have no audio seconds; before nano-USD, no price or cost.
  if (!optional(e.audioSeconds, (x) => typeof x === "number" && Number.isFinite(x) && x >= 0)) return null;
  if (!optional(e.costNanoUsd, count) || !optional(e.artifactId, text) || !optional(e.settledFrom, text) || !optional(e.replicaId, text)) return null;
  if (!optional(e.price, (p) => typeof p === "object" && p !== null && Object.values(p).length === 3 && Object.values(p).every(count))) return null;
  return spoolLine(e as unknown as LedgerEntry);
}

function openForAppend(path: string): { fd: number; created: boolean } {
  try {
    return { fd: openSync(path, constants.O_RDWR | constants.O_APPEND | constants.O_CREAT | constants.O_EXCL, SPOOL_FILE_MODE), created: true };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
  }
  return { fd: openSync(path, constants.O_RDWR | constants.O_APPEND), created: false };
}

function lastByte(fd: number, size: number): number {
  const buf = Buffer.alloc(1);
  // Unreadable: assume the worst (a cut line) and start on a new line (an empty line is skipped).
  try {
    readSync(fd, buf, 0, 1, size - 1);
    return buf[0];
  } catch {
    return -1;
  }
}

function writeFully(fd: number, buf: Buffer): void {
  for (let off = 0; off < buf.length; ) off += writeSync(fd, buf, off, buf.length - off);
}

function fsyncDirectory(dir: string): void {
  const fd = openSync(dir, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

function ignoreErrors(f: () => void): void {
  try {
    f();
  } catch {
    // best effort
  }
}

const stderrLog: UsageLog = {
  info: (obj, msg) => process.stderr.write(`${JSON.stringify({ level: "info", msg, ...plain(obj) })}\n`),
  warn: (obj, msg) => process.stderr.write(`${JSON.stringify({ level: "warn", msg, ...plain(obj) })}\n`),
  error: (obj, msg) => process.stderr.write(`${JSON.stringify({ level: "error", msg, ...plain(obj) })}\n`),
};

function plain(obj: object): object {
  const o = obj as { err?: unknown };
  return o.err instanceof Error ? { ...obj, err: { message: o.err.message, code: (o.err as NodeJS.ErrnoException).code } } : obj;
}
