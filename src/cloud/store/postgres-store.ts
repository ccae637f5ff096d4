/**
 * The {@link CloudStore} in Postgres, shared by every replica of a fleet. Migrations are applied
 * when it opens (`postgres-migrate.ts`). BIGINT columns come back from `pg` as strings: money is
 * read as bigint, counts as safe integers.
 */
import pg from "pg";
import type { ResponseRetention } from "../../catalogue/stored-responses.js";
import { PostgresBatchStore, PostgresFileStore } from "./postgres-batches.js";
import { PostgresResponseStore } from "./postgres-responses.js";
import { migratePostgres } from "./postgres-migrate.js";
import { inTransaction } from "./postgres-transaction.js";
import { ledgerRowOfOrphan, type ReservationRow } from "./sqlite-store.js";
import type { PriceInForce } from "../money.js";
import {
  startOfUtcDay,
  type CloudStore,
  type KeyListing,
  type KeyRecord,
  type LedgerRow,
  type NewKey,
  type SharedStores,
  type Reservation,
  type UsageLine,
  type UsageQuery,
} from "./store.js";

export interface PostgresStoreOptions {
  /** Most connections of this process. Default 10. */
  maxConnections?: number;
  /** How long a query may wait for a connection, ms, before failing (the request gets 503). Default 5000. */
  connectTimeoutMs?: number;
}

/** Connects, applies the migrations, and returns the store; throws when Postgres cannot be reached. */
export async function openPostgresStore(url: string, options: PostgresStoreOptions = {}): Promise<PostgresCloudStore> {
  const pool = new pg.Pool({ connectionString: url, max: options.maxConnections ?? 10, connectionTimeoutMillis: options.connectTimeoutMs ?? 5_000 });
  // An idle connection dropped by the server must not crash the process; the next query reconnects.
  pool.on("error", () => undefined);
  try {
    await migratePostgres(pool);
  } catch (err) {
    await pool.end();
    throw err;
  }
  return new PostgresCloudStore(pool);
}

interface PgKeyRow {
  id: string;
  name: string;
  key_hash: string;
  key_prefix: string;
  models: string[] | null;
  rpm: number | null;
  tpm: number | null;
  max_concurrent: number | null;
  budget_nano_usd_per_day: string | null;
  created_at: Date;
  expires_at: Date | null;
  revoked_at: Date | null;
  admin: boolean;
}

const iso = (d: Date | null) => (d === null ? null : d.toISOString());

function keyFromRow(row: PgKeyRow): KeyRecord & { hash: string } {
  return {
    id: row.id,
    name: row.name,
    hash: row.key_hash,
    prefix: row.key_prefix,
    models: row.models,
    limits: {
      requestsPerMinute: row.rpm,
      tokensPerMinute: row.tpm,
      maxConcurrent: row.max_concurrent,
      dailyBudgetNanoUsd: row.budget_nano_usd_per_day === null ? null : Number(row.budget_nano_usd_per_day),
    },
    admin: row.admin,
    createdAt: row.created_at.toISOString(),
    expiresAt: iso(row.expires_at),
    revokedAt: iso(row.revoked_at),
  };
}

const priceColumns = (p: PriceInForce) => [p.inputNanoUsdPerMTok, p.outputNanoUsdPerMTok, p.nanoUsdPerAudioMinute];

const GROUP_EXPRESSION = { key: "COALESCE(key_id, '-')", model: "slug", day: "to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')" } as const;

const LEDGER_COLUMNS = `request_id, key_id, slug, artifact_id, prompt_tokens, completion_tokens, audio_ms,
  input_nano_usd_per_mtok, output_nano_usd_per_mtok, nano_usd_per_audio_minute, cost_nano_usd, settled_from, replica_id, created_at`;

export class PostgresCloudStore implements CloudStore {
  readonly kind = "postgres";

  constructor(private readonly pool: pg.Pool) {}

  async createKey(key: NewKey): Promise<KeyRecord> {
    const l = key.limits;
    const { rows } = await this.pool.query<PgKeyRow>(
      `INSERT INTO api_keys (id, name, key_hash, key_prefix, models, rpm, tpm, max_concurrent, budget_nano_usd_per_day, expires_at, admin)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING *`,
      [
        key.id,
        key.name,
        key.hash,
        key.prefix,
        key.models,
        l.requestsPerMinute,
        l.tokensPerMinute,
        l.maxConcurrent,
        l.dailyBudgetNanoUsd,
        key.expiresAt,
        key.admin,
      ],
    );
    const { hash: _hash, ...record } = keyFromRow(rows[0]);
    return record;
  }

  async keyByHash(hash: string) {
    const { rows } = await this.pool.query<PgKeyRow>("SELECT * FROM api_keys WHERE key_hash = $1", [hash]);
    return rows[0] ? keyFromRow(rows[0]) : null;
  }

  async listKeys(now: Date): Promise<KeyListing[]> {
    const { rows } = await this.pool.query<PgKeyRow & { last_used_at: Date | null; spent_today: string; spent_total: string }>(
      `SELECT k.*, u.last_used_at, COALESCE(u.spent_today, 0) AS spent_today, COALESCE(u.spent_total, 0) AS spent_total
       FROM api_keys k LEFT JOIN (
         SELECT key_id, max(created_at) AS last_used_at, sum(cost_nano_usd) FILTER (WHERE created_at >= $1) AS spent_today, sum(cost_nano_usd) AS spent_total
         FROM usage_ledger GROUP BY key_id) u ON u.key_id = k.id
       ORDER BY k.created_at, k.id`,
      [startOfUtcDay(now)],
    );
    return rows.map((r) => {
      const { hash: _hash, ...record } = keyFromRow(r);
      return { ...record, lastUsedAt: iso(r.last_used_at), spentTodayNanoUsd: BigInt(r.spent_today), spentTotalNanoUsd: BigInt(r.spent_total) };
    });
  }

  async revokeKey(id: string): Promise<boolean> {
    const { rowCount } = await this.pool.query("UPDATE api_keys SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL", [id]);
    return (rowCount ?? 0) > 0;
  }

  async reserve(r: Reservation): Promise<void> {
    await this.pool.query(
      `INSERT INTO usage_reservations (request_id, key_id, slug, artifact_id, prompt_tokens, completion_tokens, audio_ms,
         input_nano_usd_per_mtok, output_nano_usd_per_mtok, nano_usd_per_audio_minute, nano_usd, replica_id, created_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) ON CONFLICT (request_id) DO NOTHING`,
      [r.requestId, r.keyId, r.slug, r.artifactId, r.promptTokens, r.completionTokens, r.audioMs, ...priceColumns(r.price), r.nanoUsd, r.replicaId, r.at],
    );
  }

  async releaseReservation(requestId: string): Promise<void> {
    await this.pool.query("DELETE FROM usage_reservations WHERE request_id = $1", [requestId]);
  }

  async writeLedger(rows: readonly LedgerRow[]): Promise<void> {
    if (rows.length === 0) return;
    await this.transaction((client) => this.insertLedger(client, rows));
  }

  /** One multi-row insert (deleted keys recorded as null) and one delete of the reservations. */
  private async insertLedger(client: pg.PoolClient, rows: readonly LedgerRow[]): Promise<void> {
    const values: unknown[] = [];
    const tuples = rows.map((r) => {
      const row = [
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
      ];
      const base = values.length;
      values.push(...row);
      return `(${row.map((_, i) => `$${base + i + 1}`).join(", ")})`;
    });
    await client.query(
      `INSERT INTO usage_ledger (${LEDGER_COLUMNS})
       SELECT v.request_id, k.id, v.slug, v.artifact_id, v.p::bigint, v.c::bigint, v.a::bigint, v.pi::bigint, v.po::bigint, v.pa::bigint, v.cost::bigint, v.sf, v.rep, v.at::timestamptz
       FROM (VALUES ${tuples.join(", ")}) AS v (request_id, key_id, slug, artifact_id, p, c, a, pi, po, pa, cost, sf, rep, at)
       LEFT JOIN api_keys k ON k.id = v.key_id
       ON CONFLICT (request_id) DO NOTHING`,
      values,
    );
    await client.query("DELETE FROM usage_reservations WHERE request_id = ANY($1)", [rows.map((r) => r.requestId)]);
  }

  async heartbeat(replicaId: string, now: Date): Promise<void> {
    await this.pool.query("INSERT INTO replicas (id, last_seen) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET last_seen = excluded.last_seen", [
      replicaId,
      now,
    ]);
  }

  async settleOrphans(silentMs: number, now: Date): Promise<number> {
    const cutoff = new Date(now.getTime() - silentMs);
    return this.transaction(async (client) => {
      // SKIP LOCKED: two replicas sweeping at once each take different rows; ON CONFLICT keeps it once anyway.
      const { rows } = await client.query<ReservationRow>(
        `SELECT r.* FROM usage_reservations r LEFT JOIN replicas p ON p.id = r.replica_id
         WHERE (p.last_seen IS NULL OR p.last_seen < $1) AND r.created_at < $1
         FOR UPDATE OF r SKIP LOCKED`,
        [cutoff],
      );
      if (rows.length > 0)
        await this.insertLedger(
          client,
          rows.map((o) => ledgerRowOfOrphan(o, now)),
        );
      return rows.length;
    });
  }

  async spendSince(since: Date): Promise<Map<string, bigint>> {
    const { rows } = await this.pool.query<{ key_id: string; n: string }>(
      `SELECT key_id, sum(n) AS n FROM (
         SELECT key_id, cost_nano_usd AS n FROM usage_ledger WHERE created_at >= $1 AND key_id IS NOT NULL
         UNION ALL SELECT key_id, nano_usd AS n FROM usage_reservations) s
       GROUP BY key_id`,
      [since],
    );
    return new Map(rows.map((r) => [r.key_id, BigInt(r.n)]));
  }

  async usage(q: UsageQuery): Promise<UsageLine[]> {
    const where: string[] = [];
    const args: unknown[] = [];
    const add = (sql: string, v: unknown) => (args.push(v), where.push(sql.replace("?", `$${args.length}`)));
    if (q.keyId) add("key_id = ?", q.keyId);
    if (q.slug) add("slug = ?", q.slug);
    if (q.since) add("created_at >= ?", q.since);
    const { rows } = await this.pool.query<{ grp: string; requests: string; p: string; c: string; a: string; cost: string }>(
      `SELECT ${GROUP_EXPRESSION[q.by]} AS grp, count(*) AS requests, COALESCE(sum(prompt_tokens), 0) AS p, COALESCE(sum(completion_tokens), 0) AS c,
         COALESCE(sum(audio_ms), 0) AS a, COALESCE(sum(cost_nano_usd), 0) AS cost
       FROM usage_ledger ${where.length ? `WHERE ${where.join(" AND ")}` : ""} GROUP BY grp ORDER BY grp`,
      args,
    );
    return rows.map((r) => ({
      group: r.grp,
      requests: Number(r.requests),
      promptTokens: Number(r.p),
      completionTokens: Number(r.c),
      audioMs: Number(r.a),
      costNanoUsd: BigInt(r.cost),
    }));
  }

  async close(): Promise<void> {
    await this.pool.end();
  }

  /** What clients store (files, batches, stored responses) in this database, shared by the fleet. */
  sharedStores(retention: ResponseRetention): SharedStores {
    return { files: new PostgresFileStore(this.pool), batches: new PostgresBatchStore(this.pool), responses: new PostgresResponseStore(this.pool, retention) };
  }

  private transaction<T>(work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    return inTransaction(this.pool, work);
  }
}
