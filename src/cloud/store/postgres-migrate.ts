/**
 * Postgres migrations: the numbered SQL files of `migrations/postgres/` (`NNN_name.sql`), each
 * applied once, in order, in one transaction, and recorded in `schema_migrations`. A transaction
 * -level advisory lock serialises replicas starting at once: the first applies, the others wait and
 * then find nothing left to do.
 */
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type pg from "pg";

/** The directory of the migration files (at the package root). */
export function migrationsDir(): string {
  return join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "migrations", "postgres");
}

/** An arbitrary constant naming kiln's migration lock among the database's advisory locks. */
const MIGRATION_LOCK = 7_301_842_113;

/** Applies what is missing; returns the versions applied now. */
export async function migratePostgres(pool: pg.Pool, dir = migrationsDir()): Promise<string[]> {
  const files = readdirSync(dir)
    .filter((f) => /^\d+_.+\.sql$/.test(f))
    .sort();
  const client = await pool.connect();
  try {
    await client.query("BEGIN");
    await client.query("SELECT pg_advisory_xact_lock($1)", [MIGRATION_LOCK]);
    await client.query("CREATE TABLE IF NOT EXISTS schema_migrations (version TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())");
    const { rows } = await client.query<{ version: string }>("SELECT version FROM schema_migrations");
    const done = new Set(rows.map((r) => r.version));
    const applied: string[] = [];
    for (const file of files) {
      const version = file.replace(/\.sql$/, "");
      if (done.has(version)) continue;
      await client.query(readFileSync(join(dir, file), "utf8"));
      await client.query("INSERT INTO schema_migrations (version) VALUES ($1)", [version]);
      applied.push(version);
    }
    await client.query("COMMIT");
    return applied;
  } catch (err) {
    await client.query("ROLLBACK").catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}
