/**
 * kiln's record database: `$KILN_HOME/kiln.sqlite` (better-sqlite3, WAL mode).
 * The schema lives in `models.sqlite.sql` at the package root and is applied on every open; the
 * `models` and `weight_sources` tables are then re-seeded from `models.ts`, so the database always
 * matches the source file.
 */
import { closeSync, existsSync, mkdirSync, openSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import Database from "better-sqlite3";
import { MODELS } from "./models.js";
import { databasePath, ensurePrivateHome, kilnHome, PRIVATE_FILE_MODE, tightenFile } from "./paths.js";
import type { ModelEntry } from "./types.js";

export type KilnDatabase = Database.Database;

export const SCHEMA_FILE = "models.sqlite.sql";

/** Locates `models.sqlite.sql` by walking up from this module (works from `src/` and from `dist/`). */
export function schemaPath(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const candidate = join(dir, SCHEMA_FILE);
    if (existsSync(candidate)) return candidate;
    const parent = dirname(dir);
    if (parent === dir) throw new Error(`${SCHEMA_FILE} not found above ${dirname(fileURLToPath(import.meta.url))}`);
    dir = parent;
  }
}

export interface OpenDatabaseOptions {
  /** KILN_HOME to use (default: `kilnHome()`); the database is `<home>/kiln.sqlite`. */
  home?: string;
  /** Explicit database file (overrides `home`); ":memory:" works. */
  path?: string;
  /** Schema file to apply (default: `schemaPath()`). */
  schemaFile?: string;
  /** Re-seed the models from the catalogue (default true). */
  seed?: boolean;
  /** Catalogue to seed from (default: `MODELS`). */
  models?: readonly ModelEntry[];
  /**
   * Where the database cannot be written (a read-only KILN_HOME, as a fleet's shared home may be),
   * open it read-only instead of failing, with no schema applied and nothing seeded; writes then
   * fail with SQLITE_READONLY. For readers (promotions); default false.
   */
  readOnlyFallback?: boolean;
}

/**
 * Opens (creating as needed) the database, applies the schema and seeds the catalogue. The file and
 * its WAL companions are the owner's only (0600), and so is KILN_HOME when the database is its.
 */
export function openDatabase(options: OpenDatabaseOptions = {}): KilnDatabase {
  try {
    return openWritable(options);
  } catch (err) {
    const file = options.path ?? databasePath(options.home ?? kilnHome());
    if (!options.readOnlyFallback || file === ":memory:" || !cannotWrite(err) || !existsSync(file)) throw err;
    return openReadOnly(file);
  }
}

/** Errors of writing where kiln may only read: a read-only file system, no permission, or SQLite saying either. */
export function cannotWrite(err: unknown): boolean {
  const code = (err as { code?: unknown } | undefined)?.code;
  return code === "EROFS" || code === "EACCES" || code === "EPERM" || code === "SQLITE_READONLY" || code === "SQLITE_CANTOPEN";
}

/**
 * The database opened for reading only. SQLite cannot open a WAL database even to read without its
 * shared-memory file beside it, which a read-only directory cannot get once the last writer has
 * closed (and deleted it); then the file is read into memory as it is, which holds everything
 * since the last writer checkpointed on close.
 */
function openReadOnly(file: string): KilnDatabase {
  try {
    const db = new Database(file, { readonly: true, fileMustExist: true });
    try {
      db.prepare("SELECT count(*) FROM sqlite_master").get();
      return db;
    } catch (err) {
      db.close();
      throw err;
    }
  } catch {
    // Reached only where the file cannot be written, so no connection of this process writes it: locks dropped here lose nothing.
    const image = readFileSync(file);
    // The header's read and write versions (bytes 18, 19): 2 is WAL, which an in-memory copy cannot use; 1 is the rollback journal.
    if (image.length >= 20) image[18] = image[19] = 1;
    return new Database(image, { readonly: true });
  }
}

function openWritable(options: OpenDatabaseOptions): KilnDatabase {
  const file = options.path ?? databasePath(ensurePrivateHome(options.home ?? kilnHome()));
  if (file !== ":memory:") createPrivately(file);
  const db = new Database(file);
  try {
    db.pragma("busy_timeout = 10000");
    if (file !== ":memory:") db.pragma("journal_mode = WAL");
    db.pragma("synchronous = NORMAL");
    db.pragma("foreign_keys = ON");
    applySchema(db, options.schemaFile);
    if (options.seed !== false) seedModels(db, options.models ?? MODELS);
    return db;
  } catch (err) {
    db.close();
    throw err;
  }
}

/**
 * Creates the database file owner-only before SQLite opens it, since SQLite gives its WAL and
 * shared-memory files the database file's mode; one made before this gets tightened, companions included.
 *
 * An existing file is never opened here: closing any descriptor of a file drops every POSIX lock
 * this process holds on it, the locks of SQLite's connections included. Another connection of this
 * process (the cloud ledger's) would then look absent to an operator's `sqlite3` session, which on
 * closing, taking itself for the last connection, checkpoints and deletes the WAL and shared-memory
 * files under the server, whose later writes go to a deleted WAL: invisible to other readers, and
 * lost on a crash.
 */
function createPrivately(file: string): void {
  mkdirSync(dirname(file), { recursive: true });
  try {
    closeSync(openSync(file, "wx", PRIVATE_FILE_MODE));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
  }
  for (const path of [file, `${file}-wal`, `${file}-shm`, `${file}-journal`]) tightenFile(path);
}

/** Applies the schema file (read at run time; every statement is `IF NOT EXISTS`). */
export function applySchema(db: KilnDatabase, file: string = schemaPath()): void {
  db.exec(readFileSync(file, "utf8"));
  addMissingColumns(db);
}

/**
 * Columns added to tables after they first shipped: CREATE TABLE IF NOT EXISTS leaves an older
 * database's table as it was, so each is added here when missing (with the schema file's default).
 */
const ADDED_COLUMNS: ReadonlyArray<{ table: string; column: string; definition: string }> = [
  { table: "artifacts_promoted", column: "settings_json", definition: "TEXT NOT NULL DEFAULT '{}'" },
  { table: "artifacts_promoted", column: "reason", definition: "TEXT NOT NULL DEFAULT ''" },
];

function addMissingColumns(db: KilnDatabase): void {
  for (const { table, column, definition } of ADDED_COLUMNS) {
    const columns = db.prepare(`PRAGMA table_info(${table})`).all() as Array<{ name: string }>;
    if (!columns.some((c) => c.name === column)) db.exec(`ALTER TABLE ${table} ADD COLUMN ${column} ${definition}`);
  }
}

/** A catalogue entry as a `models` row (bind parameters by name). */
export interface ModelRow {
  slug: string;
  position: number;
  display_name: string;
  kind: string;
  family: string;
  parameters: number;
  architecture: string;
  context_length: number;
  capabilities_json: string;
  input_usd_per_million_tokens: number | null;
  output_usd_per_million_tokens: number | null;
  usd_per_audio_minute: number | null;
  ttft_target_ms: number | null;
  output_tokens_per_second: number | null;
  licence: string;
  upstream: string;
  embedded: number;
  entry_json: string;
}

export function modelRow(entry: ModelEntry, position: number): ModelRow {
  return {
    slug: entry.slug,
    position,
    display_name: entry.displayName,
    kind: entry.kind,
    family: entry.family,
    parameters: Math.round(entry.parameters),
    architecture: entry.architecture,
    context_length: entry.contextLength,
    capabilities_json: JSON.stringify(entry.capabilities),
    input_usd_per_million_tokens: entry.prices.inputUsdPerMillionTokens ?? null,
    output_usd_per_million_tokens: entry.prices.outputUsdPerMillionTokens ?? null,
    usd_per_audio_minute: entry.prices.usdPerAudioMinute ?? null,
    ttft_target_ms: entry.ttftTargetMs ?? null,
    output_tokens_per_second: entry.outputTokensPerSecond ?? null,
    licence: entry.licence,
    upstream: entry.upstream,
    embedded: entry.embedded ? 1 : 0,
    entry_json: JSON.stringify(entry),
  };
}

export interface SeedResult {
  /** Rows inserted or changed. */
  changed: number;
  /** Rows removed because their slug left the catalogue. */
  removed: number;
}

const MODEL_COLUMNS = [
  "slug",
  "position",
  "display_name",
  "kind",
  "family",
  "parameters",
  "architecture",
  "context_length",
  "capabilities_json",
  "input_usd_per_million_tokens",
  "output_usd_per_million_tokens",
  "usd_per_audio_minute",
  "ttft_target_ms",
  "output_tokens_per_second",
  "licence",
  "upstream",
  "embedded",
  "entry_json",
] as const;

/**
 * Upserts every catalogue entry (and its weight sources) and deletes rows whose slug is no longer
 * in the catalogue. Unchanged rows are not written. Runs in one IMMEDIATE transaction.
 */
export function seedModels(db: KilnDatabase, models: readonly ModelEntry[] = MODELS): SeedResult {
  const upsert = db.prepare(
    `INSERT INTO models (${MODEL_COLUMNS.join(", ")}) VALUES (${MODEL_COLUMNS.map((c) => "@" + c).join(", ")})
     ON CONFLICT (slug) DO UPDATE SET ${MODEL_COLUMNS.filter((c) => c !== "slug")
       .map((c) => `${c} = excluded.${c}`)
       .join(", ")}, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
     WHERE models.entry_json IS NOT excluded.entry_json OR models.position IS NOT excluded.position`,
  );
  const deleteSources = db.prepare("DELETE FROM weight_sources WHERE slug = ?");
  const insertSource = db.prepare(
    `INSERT INTO weight_sources (slug, position, type, format, repo, revision, package, version, files_json)
     VALUES (@slug, @position, @type, @format, @repo, @revision, @package, @version, @files_json)`,
  );
  const countSources = db.prepare("SELECT count(*) AS n FROM weight_sources WHERE slug = ?");
  const existing = db.prepare("SELECT slug FROM models");
  const remove = db.prepare("DELETE FROM models WHERE slug = ?");

  const run = db.transaction((): SeedResult => {
    let changed = 0;
    let removed = 0;
    models.forEach((entry, position) => {
      const info = upsert.run(modelRow(entry, position));
      const n = (countSources.get(entry.slug) as { n: number }).n;
      if (info.changes === 0 && n === entry.sources.length) return;
      changed += info.changes;
      deleteSources.run(entry.slug);
      entry.sources.forEach((source, i) => {
        insertSource.run({
          slug: entry.slug,
          position: i,
          type: source.type,
          format: source.format,
          repo: source.type === "hub" ? source.repo : null,
          revision: source.type === "hub" ? source.revision : null,
          package: source.type === "python-package" ? source.package : null,
          version: source.type === "python-package" ? source.version : null,
          files_json: JSON.stringify(
            source.type === "hub"
              ? source.files
              : (source.members ?? [{ member: source.member, path: source.path, sha256: source.sha256, bytes: source.bytes }]),
          ),
        });
      });
    });
    const wanted = new Set(models.map((m) => m.slug));
    for (const row of existing.all() as { slug: string }[]) {
      if (!wanted.has(row.slug)) removed += remove.run(row.slug).changes;
    }
    return { changed, removed };
  });
  return run.immediate();
}

/** The catalogue entries as stored in the database, in catalogue order. */
export function readModels(db: KilnDatabase): ModelEntry[] {
  const rows = db.prepare("SELECT entry_json FROM models ORDER BY position").all() as { entry_json: string }[];
  return rows.map((r) => JSON.parse(r.entry_json) as ModelEntry);
}
