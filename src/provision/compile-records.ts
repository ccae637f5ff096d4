import { randomUUID } from "node:crypto";
import type { KilnDatabase } from "../catalogue/db.js";
import type { CompileResult } from "../compiler/compile.js";

/** The `compiles` table of the database: one row per compile. */

/** Starts a compile row; `finish` or `fail` closes it, so an interrupted compile stays visibly 'running'. */
export function recordCompileStart(db: KilnDatabase, slug: string, compilerVersion: string, options: object): string {
  const id = randomUUID();
  db.prepare(
    `INSERT INTO compiles (id, slug, artifact_id, artifact_dir, compiler_version, options_json, status)
     VALUES (?, ?, '', '', ?, ?, 'running')`,
  ).run(id, slug, compilerVersion, JSON.stringify(options));
  return id;
}

export function recordCompileFinish(db: KilnDatabase, id: string, result: CompileResult): void {
  db.prepare(
    `UPDATE compiles SET artifact_id = ?, artifact_dir = ?, source_sha256 = ?, manifest_json = ?,
       finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), status = 'succeeded' WHERE id = ?`,
  ).run(result.manifest.id, result.dir, result.manifest.source.sha256, JSON.stringify(result.manifest), id);
}

export function recordCompileFailure(db: KilnDatabase, id: string, error: unknown): void {
  db.prepare(`UPDATE compiles SET finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), status = 'failed', error = ? WHERE id = ?`).run(
    error instanceof Error ? error.message : String(error),
    id,
  );
}
