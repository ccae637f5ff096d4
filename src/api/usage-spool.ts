/**
 * The usage spool: where usage records wait while the ledger (the `usage` table) cannot be
 * written, e.g. with the database's disk full. An append-only file of JSON lines
 * (`$KILN_HOME/usage-spool.jsonl`, owner-only), each append fsync'd before the answer's usage
 * counts as kept. A settle loop writes what the spool holds to the ledger (idempotent per request
 * id, so a record written twice counts once) and then empties it; a spool left by an earlier run is
 * settled at startup. A record that neither the ledger nor the spool takes is held in memory,
 * retried, and logged loudly; while that is so, new metered requests are refused (never served free).
 */
import { closeSync, constants, fchmodSync, fstatSync, fsyncSync, ftruncateSync, openSync, readFileSync, readSync, statSync, writeSync } from "node:fs";
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

  /** The spooled entries, and the lines that are not entries (a line cut short by a crash). */
  read(): { entries: LedgerEntry[]; bad: string[] } {
    if (!this.hasEntries()) return { entries: [], bad: [] };
    const entries: LedgerEntry[] = [];
    const bad: string[] = [];
    for (const line of readFileSync(this.path, "utf8").split("\n")) {
      if (line.trim() === "") continue;
      const entry = parseLine(line);
      if (entry) entries.push(entry);
      else bad.push(line);
    }
    return { entries, bad };
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
        this.ledger.write([entry]);
        return;
      } catch (err) {
        this.ledgerWritable = false;
        this.log.error({ err, requestId: entry.requestId }, "usage ledger: write failed; spooling usage records until it can be written again");
      }
    }
    this.keep([entry]);
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
    if (!this.spooled && this.held.length === 0) return;
    let spooled: LedgerEntry[] | null = [];
    if (this.spooled) {
      try {
        const { entries, bad } = this.spool.read();
        for (const line of bad) this.log.error({ spool: this.spool.path, line }, "usage spool: dropping a line that is not a usage record (cut short by a crash?)");
        spooled = entries;
      } catch (err) {
        this.log.error({ err, spool: this.spool.path }, "usage spool: cannot read it; settling later");
        spooled = null;
      }
    }
    const entries = [...(spooled ?? []), ...this.held];
    // Nothing could be read and nothing is held: no evidence either way about the ledger.
    if (spooled === null && entries.length === 0) return;
    if (entries.length > 0) {
      try {
        this.ledger.write(entries);
      } catch (err) {
        if (this.ledgerWritable) this.log.error({ err }, "usage ledger: write failed; spooling usage records until it can be written again");
        this.ledgerWritable = false;
        const held = this.held;
        this.held = [];
        this.keep(held);
        return;
      }
    }
    const wasWritable = this.ledgerWritable;
    this.ledgerWritable = true;
    this.held = [];
    if (spooled !== null && this.spooled) {
      try {
        this.spool.clear();
        this.spooled = false;
      } catch (err) {
        // Harmless but for disk space: the ledger ignores records it already has.
        this.log.error({ err, spool: this.spool.path }, "usage spool: settled but cannot be emptied; retrying");
      }
    }
    if (entries.length > 0 || !wasWritable) this.log.info({ settled: entries.length }, "usage ledger: written again; spooled usage records settled");
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.settle();
    if (this.held.length > 0) {
      this.log.error({ usage: this.held }, "usage: exiting with usage records neither in the ledger nor in the spool; they are only in this log");
    }
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

/** The fields a spool line keeps; `audioSeconds` only when there are some, so text lines read as they always did. */
function spoolLine(e: LedgerEntry): LedgerEntry {
  const audio = e.audioSeconds ? { audioSeconds: e.audioSeconds } : {};
  return { requestId: e.requestId, keyId: e.keyId, slug: e.slug, promptTokens: e.promptTokens, completionTokens: e.completionTokens, ...audio, at: e.at };
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
  const count = (x: unknown) => typeof x === "number" && Number.isInteger(x) && x >= 0;
  if (typeof e.requestId !== "string" || e.requestId === "" || typeof e.slug !== "string" || typeof e.at !== "string") return null;
  if (!(e.keyId === null || typeof e.keyId === "string") || !count(e.promptTokens) || !count(e.completionTokens)) return null;
  // Lines spooled before transcriptions were metered have no audio seconds.
  if (e.audioSeconds !== undefined && !(typeof e.audioSeconds === "number" && Number.isFinite(e.audioSeconds) && e.audioSeconds >= 0)) return null;
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
