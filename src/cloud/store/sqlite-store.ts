/**
 * The {@link CloudStore} in kiln's SQLite file: the embedded default, for one process. Every call
 * runs synchronously (better-sqlite3) and resolves at once; a failure rejects.
 */
import type { KilnDatabase } from "../../catalogue/db.js";
import type { KeyLimits } from "../limits/limiter.js";
import type { PriceInForce } from "../money.js";
import {
  startOfUtcDay,
  type CloudStore,
  type KeyListing,
  type KeyRecord,
  type LedgerRow,
  type NewKey,
  type Reservation,
  type UsageLine,
  type UsageQuery,
} from "./store.js";

/** Columns added after the tables first shipped (older databases get them here). */
const ADDED_COLUMNS: ReadonlyArray<[table: string, column: string, definition: string]> = [
  ["api_keys", "key_prefix", "TEXT NOT NULL DEFAULT ''"],
  ["api_keys", "rpm", "INTEGER"],
  ["api_keys", "tpm", "INTEGER"],
  ["api_keys", "max_concurrent", "INTEGER"],
  ["api_keys", "budget_nano_usd_per_day", "INTEGER"],
  ["api_keys", "expires_at", "TEXT"],
  ["api_keys", "admin", "INTEGER NOT NULL DEFAULT 0"],
  ["usage", "artifact_id", "TEXT"],
  ["usage", "audio_ms", "INTEGER NOT NULL DEFAULT 0"],
  ["usage", "input_nano_usd_per_mtok", "INTEGER NOT NULL DEFAULT 0"],
  ["usage", "output_nano_usd_per_mtok", "INTEGER NOT NULL DEFAULT 0"],
  ["usage", "nano_usd_per_audio_minute", "INTEGER NOT NULL DEFAULT 0"],
  ["usage", "cost_nano_usd", "INTEGER NOT NULL DEFAULT 0"],
  ["usage", "settled_from", "TEXT NOT NULL DEFAULT 'completed'"],
  ["usage", "replica_id", "TEXT NOT NULL DEFAULT ''"],
];

/** Brings an older database's cloud tables up to the schema file's shape. */
export function upgradeCloudTables(db: KilnDatabase): void {
  const hadNanoCost = hasColumn(db, "usage", "cost_nano_usd");
  for (const [table, column, definition] of ADDED_COLUMNS) {
    if (!hasColumn(db, table, column)) db.exec(`ALTER TABLE ${table} ADD COLUMN ${column} ${definition}`);
  }
  // Rows from before integer money keep their amounts: the float cost rounded to the nearest nano-USD, once.
  if (!hadNanoCost) db.exec("UPDATE usage SET cost_nano_usd = CAST(round(cost_usd * 1e9) AS INTEGER), audio_ms = CAST(round(audio_seconds * 1000) AS INTEGER)");
  db.exec("CREATE INDEX IF NOT EXISTS usage_reservations_replica ON usage_reservations (replica_id)");
}

function hasColumn(db: KilnDatabase, table: string, column: string): boolean {
  return (db.prepare(`PRAGMA table_info(${table})`).all() as Array<{ name: string }>).some((c) => c.name === column);
}

interface KeyRow {
  id: string;
  name: string;
  key_hash: string;
  key_prefix: string;
  models_json: string | null;
  rpm: number | null;
  tpm: number | null;
  max_concurrent: number | null;
  budget_nano_usd_per_day: number | null;
  created_at: string;
  expires_at: string | null;
  revoked_at: string | null;
  admin: number;
}

function keyFromRow(row: KeyRow): KeyRecord & { hash: string } {
  return {
    id: row.id,
    name: row.name,
    hash: row.key_hash,
    prefix: row.key_prefix,
    models: row.models_json === null ? null : (JSON.parse(row.models_json) as string[]),
    limits: { requestsPerMinute: row.rpm, tokensPerMinute: row.tpm, maxConcurrent: row.max_concurrent, dailyBudgetNanoUsd: row.budget_nano_usd_per_day },
    admin: Number(row.admin) === 1,
    createdAt: row.created_at,
    expiresAt: row.expires_at,
    revokedAt: row.revoked_at,
  };
}

function withoutHash({ hash: _hash, ...key }: KeyRecord & { hash: string }): KeyRecord {
  return key;
}

const priceColumns = (p: PriceInForce) => [p.inputNanoUsdPerMTok, p.outputNanoUsdPerMTok, p.nanoUsdPerAudioMinute];

const GROUP_EXPRESSION = { key: "COALESCE(key_id, '-')", model: "slug", day: "substr(created_at, 1, 10)" } as const;

export class SqliteCloudStore implements CloudStore {
  readonly kind = "sqlite";

  /** @param ownsDb close `db` with the store. */
  constructor(
    private readonly db: KilnDatabase,
    private readonly ownsDb = false,
  ) {
    upgradeCloudTables(db);
  }

  async createKey(key: NewKey): Promise<KeyRecord> {
    const l: KeyLimits = key.limits;
    this.db
      .prepare(
        `INSERT INTO api_keys (id, name, key_hash, key_prefix, models_json, rpm, tpm, max_concurrent, budget_nano_usd_per_day, expires_at, admin)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      )
      .run(
        key.id,
        key.name,
        key.hash,
        key.prefix,
        key.models === null ? null : JSON.stringify(key.models),
        l.requestsPerMinute,
        l.tokensPerMinute,
        l.maxConcurrent,
        l.dailyBudgetNanoUsd,
        key.expiresAt,
        key.admin ? 1 : 0,
      );
    return withoutHash(keyFromRow(this.db.prepare("SELECT * FROM api_keys WHERE id = ?").get(key.id) as KeyRow));
  }

  async keyByHash(hash: string) {
    const row = this.db.prepare("SELECT * FROM api_keys WHERE key_hash = ?").get(hash) as KeyRow | undefined;
    return row ? keyFromRow(row) : null;
  }

  async listKeys(now: Date): Promise<KeyListing[]> {
    const rows = this.db
      .prepare(
        `SELECT k.*, (SELECT max(created_at) FROM usage u WHERE u.key_id = k.id) AS last_used_at,
           (SELECT COALESCE(sum(cost_nano_usd), 0) FROM usage u WHERE u.key_id = k.id AND u.created_at >= ?) AS spent_today,
           (SELECT COALESCE(sum(cost_nano_usd), 0) FROM usage u WHERE u.key_id = k.id) AS spent_total
         FROM api_keys k ORDER BY k.created_at, k.id`,
      )
      .safeIntegers(true)
      .all(startOfUtcDay(now).toISOString()) as Array<Record<string, unknown>>;
    return rows.map((r) => {
      const row = Object.fromEntries(
        Object.entries(r).map(([k, v]) => [k, typeof v === "bigint" && !k.startsWith("spent") ? Number(v) : v]),
      ) as unknown as KeyRow & {
        last_used_at: string | null;
        spent_today: bigint;
        spent_total: bigint;
      };
      return { ...withoutHash(keyFromRow(row)), lastUsedAt: row.last_used_at, spentTodayNanoUsd: row.spent_today, spentTotalNanoUsd: row.spent_total };
    });
  }

  async revokeKey(id: string): Promise<boolean> {
    const info = this.db.prepare("UPDATE api_keys SET revoked_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ? AND revoked_at IS NULL").run(id);
    return info.changes > 0;
  }

  async reserve(r: Reservation): Promise<void> {
    this.db
      .prepare(
        `INSERT OR IGNORE INTO usage_reservations (request_id, key_id, slug, artifact_id, prompt_tokens, completion_tokens, audio_ms,
           input_nano_usd_per_mtok, output_nano_usd_per_mtok, nano_usd_per_audio_minute, nano_usd, replica_id, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      )
      .run(r.requestId, r.keyId, r.slug, r.artifactId, r.promptTokens, r.completionTokens, r.audioMs, ...priceColumns(r.price), r.nanoUsd, r.replicaId, r.at);
  }

  async releaseReservation(requestId: string): Promise<void> {
    this.db.prepare("DELETE FROM usage_reservations WHERE request_id = ?").run(requestId);
  }

  private readonly writeAll = (rows: readonly LedgerRow[]) => {
    // A key deleted since is recorded as null, as ON DELETE SET NULL would have left it.
    const insert = this.db.prepare(
      `INSERT OR IGNORE INTO usage (request_id, key_id, slug, artifact_id, prompt_tokens, completion_tokens, audio_ms,
         input_nano_usd_per_mtok, output_nano_usd_per_mtok, nano_usd_per_audio_minute, cost_nano_usd, settled_from, replica_id, created_at)
       VALUES (?, (SELECT id FROM api_keys WHERE id = ?), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    const unreserve = this.db.prepare("DELETE FROM usage_reservations WHERE request_id = ?");
    this.db.transaction(() => {
      for (const r of rows) {
        insert.run(
          r.requestId,
          r.keyId,
          r.slug,
          r.artifactId,
          r.promptTokens,
          r.completionTokens,
          r.audioMs,
          ...priceColumns(r.price),
          r.costNanoUsd,
          r.settledFrom,
          r.replicaId,
          r.at,
        );
        unreserve.run(r.requestId);
      }
    })();
  };

  /** Synchronous: the spool's recorder relies on a failure being thrown before it returns. */
  writeLedgerNow(rows: readonly LedgerRow[]): void {
    this.writeAll(rows);
  }

  async writeLedger(rows: readonly LedgerRow[]): Promise<void> {
    this.writeAll(rows);
  }

  async heartbeat(replicaId: string, now: Date): Promise<void> {
    this.db
      .prepare("INSERT INTO replicas (id, last_seen) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET last_seen = excluded.last_seen")
      .run(replicaId, now.toISOString());
  }

  async settleOrphans(silentMs: number, now: Date): Promise<number> {
    const cutoff = new Date(now.getTime() - silentMs).toISOString();
    return this.db.transaction(() => {
      const orphans = this.db
        .prepare(
          `SELECT r.* FROM usage_reservations r LEFT JOIN replicas p ON p.id = r.replica_id
           WHERE (p.last_seen IS NULL OR p.last_seen < ?) AND r.created_at < ?`,
        )
        .all(cutoff, cutoff) as ReservationRow[];
      this.writeAll(orphans.map((o) => ledgerRowOfOrphan(o, now)));
      return orphans.length;
    })();
  }

  async spendSince(since: Date): Promise<Map<string, bigint>> {
    const rows = this.db
      .prepare(
        `SELECT key_id, sum(n) AS n FROM (
           SELECT key_id, cost_nano_usd AS n FROM usage WHERE created_at >= ? AND key_id IS NOT NULL
           UNION ALL SELECT key_id, nano_usd AS n FROM usage_reservations)
         GROUP BY key_id`,
      )
      .safeIntegers(true)
      .all(since.toISOString()) as Array<{ key_id: string; n: bigint }>;
    return new Map(rows.map((r) => [r.key_id, r.n]));
  }

  async usage(q: UsageQuery): Promise<UsageLine[]> {
    const where: string[] = [];
    const args: unknown[] = [];
    if (q.keyId) (where.push("key_id = ?"), args.push(q.keyId));
    if (q.slug) (where.push("slug = ?"), args.push(q.slug));
    if (q.since) (where.push("created_at >= ?"), args.push(q.since));
    const group = GROUP_EXPRESSION[q.by];
    const rows = this.db
      .prepare(
        `SELECT ${group} AS grp, count(*) AS requests, COALESCE(sum(prompt_tokens), 0) AS p, COALESCE(sum(completion_tokens), 0) AS c,
           COALESCE(sum(audio_ms), 0) AS a, COALESCE(sum(cost_nano_usd), 0) AS cost
         FROM usage ${where.length ? `WHERE ${where.join(" AND ")}` : ""} GROUP BY grp ORDER BY grp`,
      )
      .safeIntegers(true)
      .all(...args) as Array<{ grp: string; requests: bigint; p: bigint; c: bigint; a: bigint; cost: bigint }>;
    return rows.map((r) => ({
      group: r.grp,
      requests: Number(r.requests),
      promptTokens: Number(r.p),
      completionTokens: Number(r.c),
      audioMs: Number(r.a),
      costNanoUsd: r.cost,
    }));
  }

  async close(): Promise<void> {
    if (this.ownsDb) this.db.close();
  }
}

interface ReservationRow {
  request_id: string;
  key_id: string;
  slug: string;
  artifact_id: string | null;
  prompt_tokens: number;
  completion_tokens: number;
  audio_ms: number;
  input_nano_usd_per_mtok: number;
  output_nano_usd_per_mtok: number;
  nano_usd_per_audio_minute: number;
  nano_usd: number;
  replica_id: string;
}

/** A dead replica's reservation as its ledger row: charged the whole reserved amount, never free. */
export function ledgerRowOfOrphan(o: ReservationRow, now: Date): LedgerRow {
  return {
    requestId: o.request_id,
    keyId: o.key_id,
    slug: o.slug,
    artifactId: o.artifact_id,
    promptTokens: Number(o.prompt_tokens),
    completionTokens: Number(o.completion_tokens),
    audioMs: Number(o.audio_ms),
    price: {
      inputNanoUsdPerMTok: Number(o.input_nano_usd_per_mtok),
      outputNanoUsdPerMTok: Number(o.output_nano_usd_per_mtok),
      nanoUsdPerAudioMinute: Number(o.nano_usd_per_audio_minute),
    },
    costNanoUsd: Number(o.nano_usd),
    settledFrom: "reservation",
    replicaId: o.replica_id,
    at: now.toISOString(),
  };
}
export type { ReservationRow };
