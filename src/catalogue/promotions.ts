/**
 * Which artifact serves a model, as the optimization track and the operator decide it: the
 * `artifacts_promoted` table. Promotions are per device (the settings' `device`, the CPU where they
 * name none): the latest row of a slug and device with `promoted = 1` is current there; promoting
 * adds a row, rolling back clears the current row's flag (history is kept either way). A model with
 * no promotion on a device serves its default compile there.
 */
import { randomUUID } from "node:crypto";
import type { KilnDatabase } from "./db.js";

export interface Promotion {
  id: string;
  slug: string;
  artifactId: string;
  /** Runtime and serving settings the artifact is served with (as the track measured it); {} = defaults. */
  settings: Record<string, unknown>;
  metrics: Record<string, unknown>;
  quality: Record<string, unknown>;
  /** Why it was promoted ("track: 12% faster decode, KL 0.004", "operator"). */
  reason: string;
  /** ISO 8601. */
  createdAt: string;
  /** False once rolled back. */
  promoted: boolean;
}

interface PromotionRow {
  id: string;
  slug: string;
  artifact_id: string;
  settings_json: string;
  metrics_json: string;
  quality_json: string;
  reason: string;
  created_at: string;
  promoted: number;
}

function fromRow(row: PromotionRow): Promotion {
  return {
    id: row.id,
    slug: row.slug,
    artifactId: row.artifact_id,
    settings: JSON.parse(row.settings_json) as Record<string, unknown>,
    metrics: JSON.parse(row.metrics_json) as Record<string, unknown>,
    quality: JSON.parse(row.quality_json) as Record<string, unknown>,
    reason: row.reason,
    createdAt: row.created_at,
    promoted: row.promoted === 1,
  };
}

/** The device a promotion serves on: its settings' `device`, the CPU where they name none. */
export function promotionDevice(settings: Record<string, unknown>): string {
  return typeof settings.device === "string" ? settings.device : "cpu";
}

/** The promotion in service for `slug` on `device` (default the CPU), or null (the default compile serves there). */
export function currentPromotion(db: KilnDatabase, slug: string, device = "cpu"): Promotion | null {
  const row = db
    .prepare(
      `SELECT * FROM artifacts_promoted WHERE slug = ? AND promoted = 1 AND coalesce(json_extract(settings_json, '$.device'), 'cpu') = ?
       ORDER BY created_at DESC, rowid DESC LIMIT 1`,
    )
    .get(slug, device) as PromotionRow | undefined;
  return row ? fromRow(row) : null;
}

/** Every promotion of `slug`, newest first (rolled-back ones included, `promoted: false`). */
export function promotionHistory(db: KilnDatabase, slug: string): Promotion[] {
  return (db.prepare(`SELECT * FROM artifacts_promoted WHERE slug = ? ORDER BY created_at DESC, rowid DESC`).all(slug) as PromotionRow[]).map(fromRow);
}

export interface PromoteInput {
  slug: string;
  artifactId: string;
  settings?: Record<string, unknown>;
  metrics?: Record<string, unknown>;
  quality?: Record<string, unknown>;
  reason: string;
}

/** Makes `artifactId` (with its settings) the one serving `input.slug` on the device its settings name. */
export function promoteArtifact(db: KilnDatabase, input: PromoteInput): Promotion {
  const id = randomUUID();
  db.prepare(
    `INSERT INTO artifacts_promoted (id, slug, artifact_id, settings_json, metrics_json, quality_json, reason, promoted)
     VALUES (?, ?, ?, ?, ?, ?, ?, 1)`,
  ).run(
    id,
    input.slug,
    input.artifactId,
    JSON.stringify(input.settings ?? {}),
    JSON.stringify(input.metrics ?? {}),
    JSON.stringify(input.quality ?? {}),
    input.reason,
  );
  return currentPromotion(db, input.slug, promotionDevice(input.settings ?? {}))!;
}

/**
 * Takes the current promotion of `slug` on `device` (default the CPU) out of service; returns the one
 * serving there now (the previous promotion, or null for the default compile). Throws when nothing is promoted there.
 */
export function rollbackPromotion(db: KilnDatabase, slug: string, device = "cpu"): Promotion | null {
  const current = currentPromotion(db, slug, device);
  if (!current) throw new Error(`${slug} has no promoted artifact to roll back${device === "cpu" ? "" : ` on ${device}`}`);
  db.prepare(`UPDATE artifacts_promoted SET promoted = 0 WHERE id = ?`).run(current.id);
  return currentPromotion(db, slug, device);
}
