/**
 * Metered usage: one row per generation or transcription request in the `usage` table (cloud mode), keyed by the
 * answer's id so that writing a record twice counts it once. Metering never breaks an answer: the
 * recorder kiln serves with ({@link sqliteUsageRecorder} with a spool path) keeps what the database
 * cannot take in a durable spool and settles it later (see `usage-spool.ts`).
 */
import type { KilnDatabase } from "../catalogue/db.js";
import type { ModelEntry } from "../catalogue/types.js";
import { SpooledUsageRecorder, type SpooledUsageOptions } from "./usage-spool.js";

export interface UsageRecord {
  /** Unique id of the answer (the completion id), the row key. */
  requestId: string;
  keyId: string | null;
  slug: string;
  promptTokens: number;
  completionTokens: number;
  /** Seconds of audio transcribed (transcription models, priced per minute); absent or 0 for text. */
  audioSeconds?: number;
}

/** A usage record with the time it was made (ISO 8601, UTC), as the ledger and the spool keep it. */
export interface LedgerEntry extends UsageRecord {
  at: string;
}

export interface UsageRecorder {
  /** Records one generation's usage. Called once the answer is generated; must not throw into the answer. */
  record(usage: UsageRecord): void;
  /**
   * Whether a new metered request may be served now: false while its usage could be neither
   * written nor kept durably (such requests get 503 `ledger_unavailable` before any work). Absent = always.
   */
  admits?(): boolean;
  /** Stops background work and makes a last attempt to write what is pending. */
  close?(): void;
}

/** Where usage rows are written: all of `entries` or none (throws); idempotent per request id. */
export interface UsageLedger {
  write(entries: readonly LedgerEntry[]): void;
}

/** Cost in USD of a request at the catalogue's prices: per audio minute for transcription models, per token for text. */
export function costUsd(entry: ModelEntry | undefined, usage: Pick<UsageRecord, "promptTokens" | "completionTokens" | "audioSeconds">): number {
  if (!entry) return 0;
  const p = entry.prices;
  if (entry.kind === "transcription") return ((usage.audioSeconds ?? 0) * (p.usdPerAudioMinute ?? 0)) / 60;
  return (usage.promptTokens * (p.inputUsdPerMillionTokens ?? 0) + usage.completionTokens * (p.outputUsdPerMillionTokens ?? 0)) / 1e6;
}

/**
 * The `usage` table as a ledger: one transaction per write, `INSERT OR IGNORE` on the request id
 * (the primary key) so a retried record never counts twice. A key that no longer exists is
 * recorded as null, as `ON DELETE SET NULL` would have left it, so a spooled record never becomes
 * unwritable.
 */
export function sqliteUsageLedger(db: KilnDatabase, priceOf: (slug: string) => ModelEntry | undefined): UsageLedger {
  const insert = db.prepare(
    `INSERT OR IGNORE INTO usage (request_id, key_id, slug, prompt_tokens, completion_tokens, audio_seconds, cost_usd, created_at)
     VALUES (?, (SELECT id FROM api_keys WHERE id = ?), ?, ?, ?, ?, ?, ?)`,
  );
  const writeAll = db.transaction((entries: readonly LedgerEntry[]) => {
    for (const u of entries) {
      insert.run(u.requestId, u.keyId, u.slug, u.promptTokens, u.completionTokens, u.audioSeconds ?? 0, costUsd(priceOf(u.slug), u), u.at);
    }
  });
  return { write: (entries) => void writeAll(entries) };
}

export interface SqliteUsageRecorderOptions extends Omit<SpooledUsageOptions, "ledger"> {}

/**
 * Records usage in the database. With `options` (a spool path), the recorder kiln serves with: a
 * failed write goes to the spool and new requests are refused only while the spool fails too.
 * Without, each record is written directly and a failed write throws (the answer path logs it).
 */
export function sqliteUsageRecorder(db: KilnDatabase, priceOf: (slug: string) => ModelEntry | undefined): UsageRecorder;
export function sqliteUsageRecorder(db: KilnDatabase, priceOf: (slug: string) => ModelEntry | undefined, options: SqliteUsageRecorderOptions): SpooledUsageRecorder;
export function sqliteUsageRecorder(
  db: KilnDatabase,
  priceOf: (slug: string) => ModelEntry | undefined,
  options?: SqliteUsageRecorderOptions,
): UsageRecorder {
  const ledger = sqliteUsageLedger(db, priceOf);
  if (options) return new SpooledUsageRecorder({ ...options, ledger });
  return { record: (u) => ledger.write([{ ...u, at: new Date().toISOString() }]) };
}
