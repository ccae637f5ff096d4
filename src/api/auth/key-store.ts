/**
 * API keys of cloud mode, in the `api_keys` table of kiln's database. Only the SHA-256 of a key
 * is stored: the key itself is shown once, when created, and cannot be recovered.
 */
import { createHash, randomBytes } from "node:crypto";
import type { KilnDatabase } from "../../catalogue/db.js";

/** What a request's key allows. */
export interface ApiKeyInfo {
  /** Key id (`key_…`); null in local mode, where keys are not checked. */
  id: string | null;
  name: string;
  /** Model slugs the key may use; null means every model. */
  models: string[] | null;
}

export interface StoredKey extends ApiKeyInfo {
  id: string;
  createdAt: string;
  revokedAt: string | null;
}

/** Looks keys up (cloud mode); the server needs only this. */
export interface KeyVerifier {
  /** The key's rights, or null when it is unknown or revoked. */
  verify(key: string): ApiKeyInfo | null;
}

export const KEY_PREFIX = "kiln-";

export function hashKey(key: string): string {
  return createHash("sha256").update(key, "utf8").digest("hex");
}

interface KeyRow {
  id: string;
  name: string;
  models_json: string | null;
  created_at: string;
  revoked_at: string | null;
}

function fromRow(row: KeyRow): StoredKey {
  return {
    id: row.id,
    name: row.name,
    models: row.models_json === null ? null : (JSON.parse(row.models_json) as string[]),
    createdAt: row.created_at,
    revokedAt: row.revoked_at,
  };
}

export class KeyStore implements KeyVerifier {
  constructor(private readonly db: KilnDatabase) {}

  /** Creates a key; returns it in clear (the only time it exists outside the client). */
  create(name: string, models: string[] | null = null): { key: string; record: StoredKey } {
    const id = "key_" + randomBytes(6).toString("hex");
    const key = KEY_PREFIX + randomBytes(24).toString("base64url");
    this.db
      .prepare("INSERT INTO api_keys (id, name, key_hash, models_json) VALUES (?, ?, ?, ?)")
      .run(id, name, hashKey(key), models === null ? null : JSON.stringify(models));
    return { key, record: this.get(id)! };
  }

  get(id: string): StoredKey | null {
    const row = this.db.prepare("SELECT id, name, models_json, created_at, revoked_at FROM api_keys WHERE id = ?").get(id) as KeyRow | undefined;
    return row ? fromRow(row) : null;
  }

  list(): StoredKey[] {
    const rows = this.db.prepare("SELECT id, name, models_json, created_at, revoked_at FROM api_keys ORDER BY created_at, id").all() as KeyRow[];
    return rows.map(fromRow);
  }

  /** Revokes a key; false when there is no such key or it was already revoked. */
  revoke(id: string): boolean {
    const info = this.db
      .prepare("UPDATE api_keys SET revoked_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ? AND revoked_at IS NULL")
      .run(id);
    return info.changes > 0;
  }

  verify(key: string): ApiKeyInfo | null {
    const row = this.db
      .prepare("SELECT id, name, models_json, created_at, revoked_at FROM api_keys WHERE key_hash = ? AND revoked_at IS NULL")
      .get(hashKey(key)) as KeyRow | undefined;
    if (!row) return null;
    const { id, name, models } = fromRow(row);
    return { id, name, models };
  }
}
