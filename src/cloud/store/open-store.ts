/** Opens cloud mode's database from `--database`: `postgres://…` (a fleet's shared one), or an SQLite file (default: kiln's own). */
import { openDatabase } from "../../catalogue/db.js";
import { SqliteCloudStore } from "./sqlite-store.js";
import type { CloudStore } from "./store.js";

/** Whether `--database` names a Postgres server rather than an SQLite file. */
export function isPostgresUrl(database: string | undefined): database is string {
  return database !== undefined && /^postgres(ql)?:\/\//i.test(database);
}

/** @param database `postgres://…`, a file path, or undefined for `$KILN_HOME/kiln.sqlite`. */
export async function openCloudStore(database?: string): Promise<CloudStore> {
  // Loaded only for a Postgres database, so that other servers never load its client.
  if (isPostgresUrl(database)) return (await import("./postgres-store.js")).openPostgresStore(database);
  return new SqliteCloudStore(openDatabase(database ? { path: database } : {}), true);
}
