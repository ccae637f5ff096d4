/**
 * Batches of the Batch API: each batch object as the API answers it, the key it runs as, the runner
 * that holds it (a lease, so that one replica of a fleet runs it and another takes it over when the
 * first is gone), and, while it runs, each answered line, so that an unfinished batch resumes where
 * it was. A batch belongs to the key that made it (null in local mode) and is found only with that
 * key. {@link BatchStore} is what the API needs; here in the records database (tables `batches` and
 * `batch_results`), and in cloud mode's Postgres for a fleet (`src/cloud`).
 */
import type { KilnDatabase } from "./db.js";

/** What a batch runs as: its key's id (null in local mode) and whatever else the API keeps of the key (its name, models, limits). */
export interface BatchKey {
  id: string | null;
  [field: string]: unknown;
}

/** A batch object as stored: the API's fields, of which the store reads `id`, `status` and `created_at`. */
export interface BatchObject {
  id: string;
  status: string;
  created_at: number;
  /**
   * Requests a cancelled or expired batch never sent (counted in `request_counts.failed`, written to
   * its error file); kiln's own field, which the Message Batches API reads and `/v1/batches` does not show.
   */
  unsent_requests?: number;
  [field: string]: unknown;
}

/** A page of a key's batches, newest first: those after (older than) `after`, or before (newer than) `before`, whose ids start with `idPrefix`. */
export interface BatchPage {
  after?: string;
  before?: string;
  limit: number;
  /** The kind of batch listed, by its ids' prefix: `batch_` (the Batch API), `msgbatch_` (Message Batches). */
  idPrefix: string;
}

export interface StoredBatch {
  batch: BatchObject;
  key: BatchKey;
}

/** One answered line: its place in the input file, whether it failed, and its output line. */
export interface BatchResult {
  line: number;
  failed: boolean;
  result: Record<string, unknown>;
}

/** Statuses after which a batch does nothing more. */
export const FINAL_BATCH_STATUSES: ReadonlySet<string> = new Set(["completed", "failed", "expired", "cancelled"]);

/** Where the Batch API keeps batches. Every change to a batch is atomic, so replicas sharing the store never lose one another's. */
export interface BatchStore {
  /** Stores a new batch, held by `runner` for `leaseMs`. */
  create(batch: BatchObject, key: BatchKey, runner: string, leaseMs: number): Promise<void>;
  /** The batch `id` as `keyId` may see it, or null. */
  get(id: string, keyId: string | null): Promise<BatchObject | null>;
  /** A page of `keyId`'s batches, newest first, and whether more follow beyond it (older after `after`, newer before `before`). */
  list(keyId: string | null, page: BatchPage): Promise<{ batches: BatchObject[]; hasMore: boolean }>;
  /** Deletes the batch `id` of `keyId` and its answered lines; false when there is none. */
  delete(id: string, keyId: string | null): Promise<boolean>;
  /** Applies `change` to the batch `id` as it is stored now, and stores it; the changed batch, or null when there is none. */
  update(id: string, change: (batch: BatchObject) => void): Promise<BatchObject | null>;
  /**
   * Takes or renews the hold of `runner` on the unfinished batch `id` for `leaseMs`: true when it
   * was free, already `runner`'s, or its holder's lease had ended; false when another holds it or it is finished.
   */
  claim(id: string, runner: string, leaseMs: number): Promise<boolean>;
  /** Lets go of `runner`'s hold on the batch `id` (a stopping server), so that the next runner to look takes it at once. */
  release(id: string, runner: string): Promise<void>;
  /** Unfinished batches no runner holds (never claimed, or the lease ended), oldest first, with their keys. */
  claimable(): Promise<StoredBatch[]>;
  /**
   * Records one answered line; only when the line had no answer yet, applies `counted` to the batch
   * (its counts and usage) in the same change. The batch as it is after, or null when there is none.
   */
  addResult(batchId: string, result: BatchResult, counted: (batch: BatchObject) => void): Promise<BatchObject | null>;
  /** The lines of `batchId` answered so far, in input order. */
  results(batchId: string): Promise<BatchResult[]>;
  /** Forgets the answered lines of `batchId` (once its files hold them). */
  clearResults(batchId: string): Promise<void>;
}

/** The {@link BatchStore} in kiln's SQLite records database; `now` is the clock, milliseconds. */
export class SqliteBatchStore implements BatchStore {
  constructor(
    private readonly db: KilnDatabase,
    private readonly now: () => number = Date.now,
  ) {}

  async create(batch: BatchObject, key: BatchKey, runner: string, leaseMs: number): Promise<void> {
    this.db
      .prepare("INSERT INTO batches (id, key_id, created_at, status, batch_json, key_json, runner, lease_until) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
      .run(batch.id, key.id, batch.created_at, batch.status, JSON.stringify(batch), JSON.stringify(key), runner, this.now() + leaseMs);
  }

  async get(id: string, keyId: string | null): Promise<BatchObject | null> {
    const row = this.db.prepare("SELECT batch_json FROM batches WHERE id = ? AND key_id IS ?").get(id, keyId) as { batch_json: string } | undefined;
    return row ? (JSON.parse(row.batch_json) as BatchObject) : null;
  }

  async list(keyId: string | null, page: BatchPage): Promise<{ batches: BatchObject[]; hasMore: boolean }> {
    const params: unknown[] = [keyId, page.idPrefix.length, page.idPrefix];
    let where = "key_id IS ? AND substr(id, 1, ?) = ?";
    const cursor = page.before ?? page.after;
    if (cursor !== undefined) {
      where += ` AND (created_at, rowid) ${page.before !== undefined ? ">" : "<"} (SELECT created_at, rowid FROM batches WHERE id = ? AND key_id IS ?)`;
      params.push(cursor, keyId);
    }
    // Before a cursor: the newer ones nearest to it, read oldest first and turned around.
    const order = page.before !== undefined ? "ASC" : "DESC";
    const rows = this.db
      .prepare(`SELECT batch_json FROM batches WHERE ${where} ORDER BY created_at ${order}, rowid ${order} LIMIT ?`)
      .all(...params, page.limit + 1) as Array<{ batch_json: string }>;
    return pageOf(rows, page);
  }

  async delete(id: string, keyId: string | null): Promise<boolean> {
    return this.db
      .transaction(() => {
        const deleted = this.db.prepare("DELETE FROM batches WHERE id = ? AND key_id IS ?").run(id, keyId).changes > 0;
        if (deleted) this.db.prepare("DELETE FROM batch_results WHERE batch_id = ?").run(id);
        return deleted;
      })
      .immediate();
  }

  async update(id: string, change: (batch: BatchObject) => void): Promise<BatchObject | null> {
    return this.db.transaction(() => this.change(id, change)).immediate();
  }

  async claim(id: string, runner: string, leaseMs: number): Promise<boolean> {
    const now = this.now();
    const final = [...FINAL_BATCH_STATUSES];
    const taken = this.db
      .prepare(
        `UPDATE batches SET runner = ?, lease_until = ? WHERE id = ? AND status NOT IN (${final.map(() => "?").join(", ")})
         AND (runner IS NULL OR runner = ? OR lease_until <= ?)`,
      )
      .run(runner, now + leaseMs, id, ...final, runner, now);
    return taken.changes > 0;
  }

  async release(id: string, runner: string): Promise<void> {
    this.db.prepare("UPDATE batches SET runner = NULL, lease_until = NULL WHERE id = ? AND runner = ?").run(id, runner);
  }

  async claimable(): Promise<StoredBatch[]> {
    const final = [...FINAL_BATCH_STATUSES];
    const rows = this.db
      .prepare(
        `SELECT batch_json, key_json FROM batches WHERE status NOT IN (${final.map(() => "?").join(", ")}) AND (runner IS NULL OR lease_until <= ?)
         ORDER BY created_at, rowid`,
      )
      .all(...final, this.now()) as Array<{ batch_json: string; key_json: string }>;
    return rows.map((r) => ({ batch: JSON.parse(r.batch_json) as BatchObject, key: JSON.parse(r.key_json) as BatchKey }));
  }

  async addResult(batchId: string, result: BatchResult, counted: (batch: BatchObject) => void): Promise<BatchObject | null> {
    return this.db
      .transaction(() => {
        const added = this.db
          .prepare("INSERT OR IGNORE INTO batch_results (batch_id, line, failed, result_json) VALUES (?, ?, ?, ?)")
          .run(batchId, result.line, result.failed ? 1 : 0, JSON.stringify(result.result));
        return this.change(batchId, added.changes > 0 ? counted : () => {});
      })
      .immediate();
  }

  async results(batchId: string): Promise<BatchResult[]> {
    const rows = this.db.prepare("SELECT line, failed, result_json FROM batch_results WHERE batch_id = ? ORDER BY line").all(batchId) as Array<{
      line: number;
      failed: number;
      result_json: string;
    }>;
    return rows.map((r) => ({ line: r.line, failed: r.failed === 1, result: JSON.parse(r.result_json) as Record<string, unknown> }));
  }

  async clearResults(batchId: string): Promise<void> {
    this.db.prepare("DELETE FROM batch_results WHERE batch_id = ?").run(batchId);
  }

  /** Within a transaction: the batch read, changed and written back. */
  private change(id: string, change: (batch: BatchObject) => void): BatchObject | null {
    const row = this.db.prepare("SELECT batch_json FROM batches WHERE id = ?").get(id) as { batch_json: string } | undefined;
    if (!row) return null;
    const batch = JSON.parse(row.batch_json) as BatchObject;
    change(batch);
    this.db.prepare("UPDATE batches SET status = ?, batch_json = ? WHERE id = ?").run(batch.status, JSON.stringify(batch), id);
    return batch;
  }
}

/** A page read one past `page.limit` (to know whether more follow), newest first. */
export function pageOf(rows: ReadonlyArray<{ batch_json: string }>, page: BatchPage): { batches: BatchObject[]; hasMore: boolean } {
  const batches = rows.slice(0, page.limit).map((r) => JSON.parse(r.batch_json) as BatchObject);
  if (page.before !== undefined) batches.reverse();
  return { batches, hasMore: rows.length > page.limit };
}
