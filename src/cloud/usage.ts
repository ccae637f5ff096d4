/**
 * Metered usage: one ledger row per generation or transcription request (cloud mode), keyed by the
 * answer's id so that writing a record twice counts it once. Metering never breaks an answer: the
 * recorder kiln serves with (a {@link SpooledUsageRecorder}) keeps what the database cannot take in
 * a durable spool and settles it later (see `usage-spool.ts`). Money is integer nano-USD, computed
 * by the one rule of `cloud/money.ts`.
 */
import type { KilnDatabase } from "../catalogue/db.js";
import type { ModelEntry } from "../catalogue/types.js";
import { costNanoUsd, priceOf as catalogueNanoPrice, type PriceInForce } from "./money.js";
import { SqliteCloudStore } from "./store/sqlite-store.js";
import type { CloudStore, LedgerRow, SettledFrom } from "./store/store.js";
import { SpooledUsageRecorder, type SpooledUsageOptions } from "./usage-spool.js";

export interface UsageRecord {
  /** Unique id of the answer (the completion id), the row key. */
  requestId: string;
  keyId: string | null;
  slug: string;
  /** The artifact that served it, where known. */
  artifactId?: string | null;
  promptTokens: number;
  completionTokens: number;
  /** Seconds of audio billed (transcription models, priced per minute); absent or 0 for text. */
  audioSeconds?: number;
  /** How the request ended; default "completed". */
  settledFrom?: SettledFrom;
  /** The prices in force when it was served; absent: the catalogue's when written. */
  price?: PriceInForce;
  /** Its cost; absent: computed from `price` when written. */
  costNanoUsd?: number;
  /** The replica that served it; default "". */
  replicaId?: string;
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
  close?(): void | Promise<void>;
}

/**
 * Where usage rows are written: all of `entries` or none (throws, or rejects); idempotent per
 * request id. SQLite's writes synchronously; Postgres's returns a promise.
 */
export interface UsageLedger {
  write(entries: readonly LedgerEntry[]): void | Promise<void>;
}

/** The nano-USD prices of a slug (the catalogue's, where the model is known). */
export type PriceLookup = (slug: string) => ModelEntry | undefined;

/** A usage record as its ledger row: prices and cost filled in by the money rule where the entry lacks them. */
export function ledgerRow(entry: LedgerEntry, priceOf: PriceLookup): LedgerRow {
  const price = entry.price ?? catalogueNanoPrice(priceOf(entry.slug));
  const used = { promptTokens: entry.promptTokens, completionTokens: entry.completionTokens, audioMs: Math.round((entry.audioSeconds ?? 0) * 1000) };
  return {
    requestId: entry.requestId,
    keyId: entry.keyId,
    slug: entry.slug,
    artifactId: entry.artifactId ?? null,
    ...used,
    price,
    costNanoUsd: entry.costNanoUsd ?? costNanoUsd(price, used),
    settledFrom: entry.settledFrom ?? "completed",
    replicaId: entry.replicaId ?? "",
    at: entry.at,
  };
}

/**
 * A cloud store as the ledger: one transaction per write, a request id already there skipped.
 * SQLite's is synchronous (a failure throws before `write` returns, which the spool relies on).
 */
export function storeUsageLedger(store: CloudStore, priceOf: PriceLookup): UsageLedger {
  if (store instanceof SqliteCloudStore) return { write: (entries) => store.writeLedgerNow(entries.map((e) => ledgerRow(e, priceOf))) };
  return { write: (entries) => store.writeLedger(entries.map((e) => ledgerRow(e, priceOf))) };
}

/** The `usage` table of kiln's SQLite database as a ledger. */
export function sqliteUsageLedger(db: KilnDatabase, priceOf: PriceLookup): UsageLedger {
  return storeUsageLedger(new SqliteCloudStore(db), priceOf);
}

export interface SqliteUsageRecorderOptions extends Omit<SpooledUsageOptions, "ledger"> {}

/**
 * Records usage in the database. With `options` (a spool path), the recorder kiln serves with: a
 * failed write goes to the spool and new requests are refused only while the spool fails too.
 * Without, each record is written directly and a failed write throws (the answer path logs it).
 */
export function sqliteUsageRecorder(db: KilnDatabase, priceOf: PriceLookup): UsageRecorder;
export function sqliteUsageRecorder(db: KilnDatabase, priceOf: PriceLookup, options: SqliteUsageRecorderOptions): SpooledUsageRecorder;
export function sqliteUsageRecorder(db: KilnDatabase, priceOf: PriceLookup, options?: SqliteUsageRecorderOptions): UsageRecorder {
  const ledger = sqliteUsageLedger(db, priceOf);
  if (options) return new SpooledUsageRecorder({ ...options, ledger });
  return { record: (u) => void ledger.write([{ ...u, at: new Date().toISOString() }]) };
}
