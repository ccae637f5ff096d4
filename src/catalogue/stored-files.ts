/**
 * Files of the Files API: uploads (a batch's input) and what batches write (their output and error
 * files), kept until deleted or past their expiry. A file belongs to the key that made it (null in
 * local mode) and is found only with that key. {@link FileStore} is what the API needs; here in the
 * records database (table `files`), and in cloud mode's Postgres for a fleet (`src/cloud`).
 */
import type { KilnDatabase } from "./db.js";

/** A file's description, as the Files API answers it (without `object`). */
export interface StoredFileInfo {
  /** `file-…`. */
  id: string;
  /** The key that owns it; null in local mode. */
  keyId: string | null;
  /** Unix seconds. */
  createdAt: number;
  /** Unix seconds past which it is gone; null: kept until deleted. */
  expiresAt: number | null;
  filename: string;
  purpose: string;
  /** Its size in bytes. */
  bytes: number;
}

export interface FileListQuery {
  /** Only files of this purpose; default every purpose. */
  purpose?: string;
  /** Newest first (`desc`, the default) or oldest first. */
  order?: "asc" | "desc";
  /** Only files after this one in that order. */
  after?: string;
  /** Most files answered. */
  limit: number;
}

interface FileRow {
  id: string;
  key_id: string | null;
  created_at: number;
  expires_at: number | null;
  filename: string;
  purpose: string;
  bytes: number;
}

const INFO_COLUMNS = "id, key_id, created_at, expires_at, filename, purpose, bytes";

/** Where the Files API keeps files. */
export interface FileStore {
  /** Stores a file's bytes under `info.id` (and forgets the files past their expiry). */
  save(info: StoredFileInfo, content: Buffer): Promise<void>;
  /** The file `id` as `keyId` may see it, or null (unknown, another key's, or expired). */
  get(id: string, keyId: string | null): Promise<StoredFileInfo | null>;
  /** The bytes of the file `id` as `keyId` may see it, or null. */
  content(id: string, keyId: string | null): Promise<Buffer | null>;
  /** Deletes the file `id` of `keyId`; false when there is none it may see. */
  delete(id: string, keyId: string | null): Promise<boolean>;
  /**
   * `keyId`'s files in creation order (newest first unless `asc`), from after `query.after`, at most
   * `query.limit` of them, and whether more follow. An `after` the key cannot see lists nothing.
   */
  list(keyId: string | null, query: FileListQuery): Promise<{ files: StoredFileInfo[]; hasMore: boolean }>;
}

/** The {@link FileStore} in kiln's SQLite records database. */
export class SqliteFileStore implements FileStore {
  /** @param now the clock, milliseconds (tests move it) */
  constructor(
    private readonly db: KilnDatabase,
    private readonly now: () => number = Date.now,
  ) {}

  async save(info: StoredFileInfo, content: Buffer): Promise<void> {
    this.db
      .transaction(() => {
        this.db.prepare("DELETE FROM files WHERE expires_at IS NOT NULL AND expires_at <= ?").run(this.seconds());
        this.db
          .prepare(`INSERT INTO files (${INFO_COLUMNS}, content) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`)
          .run(info.id, info.keyId, info.createdAt, info.expiresAt, info.filename, info.purpose, info.bytes, content);
      })
      .immediate();
  }

  async get(id: string, keyId: string | null): Promise<StoredFileInfo | null> {
    const row = this.db.prepare(`SELECT ${INFO_COLUMNS} FROM files WHERE id = ? AND key_id IS ? AND ${LIVE}`).get(id, keyId, this.seconds()) as
      | FileRow
      | undefined;
    return row ? infoOf(row) : null;
  }

  async content(id: string, keyId: string | null): Promise<Buffer | null> {
    const row = this.db.prepare(`SELECT content FROM files WHERE id = ? AND key_id IS ? AND ${LIVE}`).get(id, keyId, this.seconds()) as
      | { content: Buffer }
      | undefined;
    return row ? row.content : null;
  }

  async delete(id: string, keyId: string | null): Promise<boolean> {
    return this.db.prepare(`DELETE FROM files WHERE id = ? AND key_id IS ? AND ${LIVE}`).run(id, keyId, this.seconds()).changes > 0;
  }

  async list(keyId: string | null, query: FileListQuery): Promise<{ files: StoredFileInfo[]; hasMore: boolean }> {
    const desc = query.order !== "asc";
    const conditions = [`key_id IS ?`, LIVE];
    const params: unknown[] = [keyId, this.seconds()];
    if (query.purpose !== undefined) {
      conditions.push("purpose = ?");
      params.push(query.purpose);
    }
    if (query.after !== undefined) {
      // Rows tie on created_at within a second; rowid breaks the tie in insertion order.
      conditions.push(`(created_at, rowid) ${desc ? "<" : ">"} (SELECT created_at, rowid FROM files WHERE id = ? AND key_id IS ?)`);
      params.push(query.after, keyId);
    }
    const direction = desc ? "DESC" : "ASC";
    const rows = this.db
      .prepare(`SELECT ${INFO_COLUMNS} FROM files WHERE ${conditions.join(" AND ")} ORDER BY created_at ${direction}, rowid ${direction} LIMIT ?`)
      .all(...params, query.limit + 1) as FileRow[];
    return { files: rows.slice(0, query.limit).map(infoOf), hasMore: rows.length > query.limit };
  }

  private seconds(): number {
    return Math.floor(this.now() / 1000);
  }
}

/** Not past its expiry (the one parameter: now, in Unix seconds). */
const LIVE = "(expires_at IS NULL OR expires_at > ?)";

function infoOf(row: FileRow): StoredFileInfo {
  return {
    id: row.id,
    keyId: row.key_id,
    createdAt: row.created_at,
    expiresAt: row.expires_at,
    filename: row.filename,
    purpose: row.purpose,
    bytes: row.bytes,
  };
}
