/**
 * The Files and Batch APIs' stores in cloud mode's Postgres, shared by every replica of a fleet: a
 * key's files and batches are found through any replica, and the lease columns let one replica run
 * each batch and another take it over once its runner is gone. Times are Unix seconds (leases
 * milliseconds), as the SQLite stores keep them; `seq` orders rows made within one second.
 */
import type pg from "pg";
import {
  FINAL_BATCH_STATUSES,
  pageOf,
  type BatchKey,
  type BatchObject,
  type BatchPage,
  type BatchResult,
  type BatchStore,
  type StoredBatch,
} from "../../catalogue/stored-batches.js";
import type { FileListQuery, FileStore, StoredFileInfo } from "../../catalogue/stored-files.js";
import { inTransaction } from "./postgres-transaction.js";

interface PgFileRow {
  id: string;
  key_id: string | null;
  created_at: string;
  expires_at: string | null;
  filename: string;
  purpose: string;
  bytes: string;
}

const FILE_COLUMNS = "id, key_id, created_at, expires_at, filename, purpose, bytes";

/** Not past its expiry; `$1` is now, in Unix seconds. */
const LIVE = "(expires_at IS NULL OR expires_at > $1)";

function fileInfo(row: PgFileRow): StoredFileInfo {
  return {
    id: row.id,
    keyId: row.key_id,
    createdAt: Number(row.created_at),
    expiresAt: row.expires_at === null ? null : Number(row.expires_at),
    filename: row.filename,
    purpose: row.purpose,
    bytes: Number(row.bytes),
  };
}

export class PostgresFileStore implements FileStore {
  /** @param now the clock, milliseconds */
  constructor(
    private readonly pool: pg.Pool,
    private readonly now: () => number = Date.now,
  ) {}

  async save(info: StoredFileInfo, content: Buffer): Promise<void> {
    await this.pool.query("DELETE FROM files WHERE expires_at IS NOT NULL AND expires_at <= $1", [this.seconds()]);
    await this.pool.query(`INSERT INTO files (${FILE_COLUMNS}, content) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, [
      info.id,
      info.keyId,
      info.createdAt,
      info.expiresAt,
      info.filename,
      info.purpose,
      info.bytes,
      content,
    ]);
  }

  async get(id: string, keyId: string | null): Promise<StoredFileInfo | null> {
    const { rows } = await this.pool.query<PgFileRow>(`SELECT ${FILE_COLUMNS} FROM files WHERE ${LIVE} AND id = $2 AND key_id IS NOT DISTINCT FROM $3`, [
      this.seconds(),
      id,
      keyId,
    ]);
    return rows[0] ? fileInfo(rows[0]) : null;
  }

  async content(id: string, keyId: string | null): Promise<Buffer | null> {
    const { rows } = await this.pool.query<{ content: Buffer }>(`SELECT content FROM files WHERE ${LIVE} AND id = $2 AND key_id IS NOT DISTINCT FROM $3`, [
      this.seconds(),
      id,
      keyId,
    ]);
    return rows[0]?.content ?? null;
  }

  async delete(id: string, keyId: string | null): Promise<boolean> {
    const { rowCount } = await this.pool.query(`DELETE FROM files WHERE ${LIVE} AND id = $2 AND key_id IS NOT DISTINCT FROM $3`, [this.seconds(), id, keyId]);
    return (rowCount ?? 0) > 0;
  }

  async list(keyId: string | null, query: FileListQuery): Promise<{ files: StoredFileInfo[]; hasMore: boolean }> {
    const desc = query.order !== "asc";
    const params: unknown[] = [this.seconds(), keyId];
    const conditions = [LIVE, "key_id IS NOT DISTINCT FROM $2"];
    if (query.purpose !== undefined) {
      params.push(query.purpose);
      conditions.push(`purpose = $${params.length}`);
    }
    if (query.after !== undefined) {
      params.push(query.after);
      conditions.push(
        `(created_at, seq) ${desc ? "<" : ">"} (SELECT created_at, seq FROM files WHERE id = $${params.length} AND key_id IS NOT DISTINCT FROM $2)`,
      );
    }
    params.push(query.limit + 1);
    const direction = desc ? "DESC" : "ASC";
    const { rows } = await this.pool.query<PgFileRow>(
      `SELECT ${FILE_COLUMNS} FROM files WHERE ${conditions.join(" AND ")} ORDER BY created_at ${direction}, seq ${direction} LIMIT $${params.length}`,
      params,
    );
    return { files: rows.slice(0, query.limit).map(fileInfo), hasMore: rows.length > query.limit };
  }

  private seconds(): number {
    return Math.floor(this.now() / 1000);
  }
}

/** `status NOT IN (…)` of the final statuses, as literals (they are constants). */
const UNFINISHED = `status NOT IN (${[...FINAL_BATCH_STATUSES].map((s) => `'${s}'`).join(", ")})`;

export class PostgresBatchStore implements BatchStore {
  /** @param now the clock, milliseconds */
  constructor(
    private readonly pool: pg.Pool,
    private readonly now: () => number = Date.now,
  ) {}

  async create(batch: BatchObject, key: BatchKey, runner: string, leaseMs: number): Promise<void> {
    await this.pool.query(
      "INSERT INTO batches (id, key_id, created_at, status, batch_json, key_json, runner, lease_until) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
      [batch.id, key.id, batch.created_at, batch.status, JSON.stringify(batch), JSON.stringify(key), runner, this.now() + leaseMs],
    );
  }

  async get(id: string, keyId: string | null): Promise<BatchObject | null> {
    const { rows } = await this.pool.query<{ batch_json: string }>("SELECT batch_json FROM batches WHERE id = $1 AND key_id IS NOT DISTINCT FROM $2", [
      id,
      keyId,
    ]);
    return rows[0] ? (JSON.parse(rows[0].batch_json) as BatchObject) : null;
  }

  async list(keyId: string | null, page: BatchPage): Promise<{ batches: BatchObject[]; hasMore: boolean }> {
    const params: unknown[] = [keyId, page.idPrefix];
    let where = "key_id IS NOT DISTINCT FROM $1 AND starts_with(id, $2)";
    const cursor = page.before ?? page.after;
    if (cursor !== undefined) {
      params.push(cursor);
      where += ` AND (created_at, seq) ${page.before !== undefined ? ">" : "<"} (SELECT created_at, seq FROM batches WHERE id = $3 AND key_id IS NOT DISTINCT FROM $1)`;
    }
    params.push(page.limit + 1);
    // Before a cursor: the newer ones nearest to it, read oldest first and turned around.
    const order = page.before !== undefined ? "ASC" : "DESC";
    const { rows } = await this.pool.query<{ batch_json: string }>(
      `SELECT batch_json FROM batches WHERE ${where} ORDER BY created_at ${order}, seq ${order} LIMIT $${params.length}`,
      params,
    );
    return pageOf(rows, page);
  }

  async delete(id: string, keyId: string | null): Promise<boolean> {
    // Its answered lines go with it (ON DELETE CASCADE).
    const { rowCount } = await this.pool.query("DELETE FROM batches WHERE id = $1 AND key_id IS NOT DISTINCT FROM $2", [id, keyId]);
    return (rowCount ?? 0) > 0;
  }

  update(id: string, change: (batch: BatchObject) => void): Promise<BatchObject | null> {
    return inTransaction(this.pool, (client) => changeBatch(client, id, change));
  }

  async claim(id: string, runner: string, leaseMs: number): Promise<boolean> {
    const now = this.now();
    const { rowCount } = await this.pool.query(
      `UPDATE batches SET runner = $1, lease_until = $2 WHERE id = $3 AND ${UNFINISHED} AND (runner IS NULL OR runner = $1 OR lease_until <= $4)`,
      [runner, now + leaseMs, id, now],
    );
    return (rowCount ?? 0) > 0;
  }

  async release(id: string, runner: string): Promise<void> {
    await this.pool.query("UPDATE batches SET runner = NULL, lease_until = NULL WHERE id = $1 AND runner = $2", [id, runner]);
  }

  async claimable(): Promise<StoredBatch[]> {
    const { rows } = await this.pool.query<{ batch_json: string; key_json: string }>(
      `SELECT batch_json, key_json FROM batches WHERE ${UNFINISHED} AND (runner IS NULL OR lease_until <= $1) ORDER BY created_at, seq`,
      [this.now()],
    );
    return rows.map((r) => ({ batch: JSON.parse(r.batch_json) as BatchObject, key: JSON.parse(r.key_json) as BatchKey }));
  }

  addResult(batchId: string, result: BatchResult, counted: (batch: BatchObject) => void): Promise<BatchObject | null> {
    return inTransaction(this.pool, async (client) => {
      // The batch's row first: an insert first would take a share lock on it (the foreign key) that two such transactions then both wait to upgrade.
      await client.query("SELECT 1 FROM batches WHERE id = $1 FOR UPDATE", [batchId]);
      const added = await client.query(
        "INSERT INTO batch_results (batch_id, line, failed, result_json) VALUES ($1, $2, $3, $4) ON CONFLICT (batch_id, line) DO NOTHING",
        [batchId, result.line, result.failed, JSON.stringify(result.result)],
      );
      return changeBatch(client, batchId, (added.rowCount ?? 0) > 0 ? counted : () => {});
    });
  }

  async results(batchId: string): Promise<BatchResult[]> {
    const { rows } = await this.pool.query<{ line: number; failed: boolean; result_json: string }>(
      "SELECT line, failed, result_json FROM batch_results WHERE batch_id = $1 ORDER BY line",
      [batchId],
    );
    return rows.map((r) => ({ line: r.line, failed: r.failed, result: JSON.parse(r.result_json) as Record<string, unknown> }));
  }

  async clearResults(batchId: string): Promise<void> {
    await this.pool.query("DELETE FROM batch_results WHERE batch_id = $1", [batchId]);
  }
}

/** Within a transaction: the batch read with its row locked, changed and written back. */
async function changeBatch(client: pg.PoolClient, id: string, change: (batch: BatchObject) => void): Promise<BatchObject | null> {
  const { rows } = await client.query<{ batch_json: string }>("SELECT batch_json FROM batches WHERE id = $1 FOR UPDATE", [id]);
  if (!rows[0]) return null;
  const batch = JSON.parse(rows[0].batch_json) as BatchObject;
  change(batch);
  await client.query("UPDATE batches SET status = $1, batch_json = $2 WHERE id = $3", [batch.status, JSON.stringify(batch), id]);
  return batch;
}
