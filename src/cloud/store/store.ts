/**
 * Cloud mode's database, behind one async interface: API keys, the usage ledger, the reservations
 * of requests in flight, the replicas' heartbeats, and the usage reports. Two implementations:
 * SQLite (`sqlite-store.ts`, kiln's own file: the embedded default, one process) and Postgres
 * (`postgres-store.ts`, shared by every replica of a fleet; migrations in `migrations/postgres/`).
 * Money is integer nano-USD (see `money.ts`): per row a JS safe integer, sums done by the database
 * and returned as bigint.
 */
import type { BatchStore } from "../../catalogue/stored-batches.js";
import type { FileStore } from "../../catalogue/stored-files.js";
import type { ResponseRetention, ResponseStore } from "../../catalogue/stored-responses.js";
import type { KeyLimits } from "../limits/limiter.js";
import type { Metered, PriceInForce } from "../money.js";

/** A key as the database keeps it (its keyed hash, never the key). */
export interface KeyRecord {
  /** `key_…` */
  id: string;
  name: string;
  /** The first characters of the key, to recognise it in a list (not enough to use it). */
  prefix: string;
  /** Model slugs the key may use; null = every model. */
  models: string[] | null;
  limits: KeyLimits;
  /** An admin key: besides what any key does, the operator's actions in the console (promote, rollback). */
  admin: boolean;
  /** ISO 8601 UTC. */
  createdAt: string;
  /** When the key stops working, ISO 8601 UTC; null = never. */
  expiresAt: string | null;
  revokedAt: string | null;
}

/** A key as `kiln keys create` writes it. */
export interface NewKey extends Omit<KeyRecord, "createdAt" | "revokedAt"> {
  /** HMAC-SHA256 of the key with the server secret, hex. */
  hash: string;
}

/** A key with its use, for `kiln keys list`. */
export interface KeyListing extends KeyRecord {
  /** Time of its latest ledger row; null = never used. */
  lastUsedAt: string | null;
  /** Its ledger's spend today (UTC) and in all, nano-USD. */
  spentTodayNanoUsd: bigint;
  spentTotalNanoUsd: bigint;
}

/** How a request's ledger row came to be written. */
export type SettledFrom = "completed" | "cancelled" | "shutdown" | "failed" | "reservation";

/** One row of the ledger: append-only, one per request id. */
export interface LedgerRow extends Metered {
  requestId: string;
  /** Null when the key has been deleted since (history outlives keys). */
  keyId: string | null;
  slug: string;
  /** The artifact that served it; null where unknown (transcriptions, old spool lines). */
  artifactId: string | null;
  price: PriceInForce;
  costNanoUsd: number;
  settledFrom: SettledFrom;
  replicaId: string;
  /** ISO 8601 UTC. */
  at: string;
}

/**
 * What an admitted request may cost at most, kept in the database until its ledger row is written:
 * if its replica dies first, another one charges it from here.
 */
export interface Reservation extends Metered {
  requestId: string;
  keyId: string;
  slug: string;
  artifactId: string | null;
  price: PriceInForce;
  /** The cost of the reserved usage, nano-USD. */
  nanoUsd: number;
  replicaId: string;
  at: string;
}

export type UsageGrouping = "key" | "model" | "day";

export interface UsageQuery {
  keyId?: string;
  slug?: string;
  /** ISO 8601: rows at or after it. */
  since?: string;
  by: UsageGrouping;
}

/** One line of a usage report. */
export interface UsageLine {
  /** The key id, the slug or the UTC day (YYYY-MM-DD); "-" for rows whose key was deleted. */
  group: string;
  requests: number;
  promptTokens: number;
  completionTokens: number;
  audioMs: number;
  costNanoUsd: bigint;
}

/** What clients store through the API (files, batches, stored responses), where every replica of a fleet finds it. */
export interface SharedStores {
  files: FileStore;
  batches: BatchStore;
  responses: ResponseStore;
}

export interface CloudStore {
  /** "sqlite" or "postgres". */
  readonly kind: string;
  /** What clients store, in this database where a fleet shares it (Postgres); absent: each server keeps its own, in its records database. */
  sharedStores?(retention: ResponseRetention): SharedStores;
  createKey(key: NewKey): Promise<KeyRecord>;
  /** The key with this hash, revoked and expired ones included (the caller decides); null = none. */
  keyByHash(hash: string): Promise<(KeyRecord & { hash: string }) | null>;
  listKeys(now: Date): Promise<KeyListing[]>;
  /** Revokes a key now; false when there is no such key or it was already revoked. */
  revokeKey(id: string): Promise<boolean>;

  /** Records a reservation at admission. */
  reserve(reservation: Reservation): Promise<void>;
  /** Deletes the reservation of a request that was admitted but never ran (refused by its engine): nothing to charge. */
  releaseReservation(requestId: string): Promise<void>;
  /**
   * Writes ledger rows and deletes their reservations, in one transaction: all or none. A row whose
   * request id is already in the ledger is skipped (a retried write never counts twice).
   */
  writeLedger(rows: readonly LedgerRow[]): Promise<void>;
  /** Marks this replica alive now. */
  heartbeat(replicaId: string, now: Date): Promise<void>;
  /**
   * Charges the reservations of replicas silent for longer than `silentMs` (or with no heartbeat
   * at all) from their reserved amounts, once each (the row keeps the dead replica's id and says
   * `settled_from = 'reservation'`); returns how many it charged.
   */
  settleOrphans(silentMs: number, now: Date): Promise<number>;
  /** Per key: ledger spend since `since` plus open reservations, nano-USD (the daily budget's seed). */
  spendSince(since: Date): Promise<Map<string, bigint>>;
  usage(query: UsageQuery): Promise<UsageLine[]>;
  close(): Promise<void>;
}

/** Midnight UTC of `now`'s day. */
export function startOfUtcDay(now: Date): Date {
  return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate()));
}
