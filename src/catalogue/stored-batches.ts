/**
 * Batches of the Batch API, kept in the records database (tables `batches` and `batch_results`):
 * each batch object as the API answers it, the key it runs as, and, while it runs, each answered
 * line, so that a batch a stopped server left unfinished resumes where it was. A batch belongs to
 * the key that made it (null in local mode) and is found only with that key.
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
  [field: string]: unknown;
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

export class BatchStore {
  constructor(private readonly db: KilnDatabase) {}

  /** Stores a new batch. */
  create(batch: BatchObject, key: BatchKey): void {
    this.db
      .prepare("INSERT INTO batches (id, key_id, created_at, status, batch_json, key_json) VALUES (?, ?, ?, ?, ?, ?)")
      .run(batch.id, key.id, batch.created_at, batch.status, JSON.stringify(batch), JSON.stringify(key));
  }

  /** Replaces a batch's object (its status, times, counts, files). */
  update(batch: BatchObject): void {
    this.db.prepare("UPDATE batches SET status = ?, batch_json = ? WHERE id = ?").run(batch.status, JSON.stringify(batch), batch.id);
  }

  /** The batch `id` as `keyId` may see it, or null. */
  get(id: string, keyId: string | null): BatchObject | null {
    const row = this.db.prepare("SELECT batch_json FROM batches WHERE id = ? AND key_id IS ?").get(id, keyId) as { batch_json: string } | undefined;
    return row ? (JSON.parse(row.batch_json) as BatchObject) : null;
  }

  /** `keyId`'s batches, newest first, from after `after`, at most `limit`, and whether more follow. */
  list(keyId: string | null, after: string | undefined, limit: number): { batches: BatchObject[]; hasMore: boolean } {
    const params: unknown[] = [keyId];
    let where = "key_id IS ?";
    if (after !== undefined) {
      where += " AND (created_at, rowid) < (SELECT created_at, rowid FROM batches WHERE id = ? AND key_id IS ?)";
      params.push(after, keyId);
    }
    const rows = this.db
      .prepare(`SELECT batch_json FROM batches WHERE ${where} ORDER BY created_at DESC, rowid DESC LIMIT ?`)
      .all(...params, limit + 1) as Array<{
      batch_json: string;
    }>;
    return { batches: rows.slice(0, limit).map((r) => JSON.parse(r.batch_json) as BatchObject), hasMore: rows.length > limit };
  }

  /** Every batch not yet in a final status, oldest first, with its key: what a starting server resumes. */
  unfinished(): StoredBatch[] {
    const final = [...FINAL_BATCH_STATUSES];
    const rows = this.db
      .prepare(`SELECT batch_json, key_json FROM batches WHERE status NOT IN (${final.map(() => "?").join(", ")}) ORDER BY created_at, rowid`)
      .all(...final) as Array<{ batch_json: string; key_json: string }>;
    return rows.map((r) => ({ batch: JSON.parse(r.batch_json) as BatchObject, key: JSON.parse(r.key_json) as BatchKey }));
  }

  /** Records one answered line (again: the later answer wins). */
  addResult(batchId: string, result: BatchResult): void {
    this.db
      .prepare("INSERT OR REPLACE INTO batch_results (batch_id, line, failed, result_json) VALUES (?, ?, ?, ?)")
      .run(batchId, result.line, result.failed ? 1 : 0, JSON.stringify(result.result));
  }

  /** The lines of `batchId` answered so far, in input order. */
  results(batchId: string): BatchResult[] {
    const rows = this.db.prepare("SELECT line, failed, result_json FROM batch_results WHERE batch_id = ? ORDER BY line").all(batchId) as Array<{
      line: number;
      failed: number;
      result_json: string;
    }>;
    return rows.map((r) => ({ line: r.line, failed: r.failed === 1, result: JSON.parse(r.result_json) as Record<string, unknown> }));
  }

  /** Forgets the answered lines of `batchId` (once its files hold them). */
  clearResults(batchId: string): void {
    this.db.prepare("DELETE FROM batch_results WHERE batch_id = ?").run(batchId);
  }
}
