/** The `track_candidates` table: every measurement the track makes, with its verdict. */
import { randomUUID } from "node:crypto";
import type { KilnDatabase } from "../catalogue/db.js";
import type { QualityMetrics, SpeedMetrics } from "./rule.js";
import { completeSettings, settingsKey, type TrackSettings } from "./settings.js";

export type Verdict = "running" | "incumbent" | "promoted" | "rejected" | "failed";

export interface CandidateRecord {
  id: string;
  runId: string;
  slug: string;
  /** "" when the measurement failed before it had an artifact. */
  artifactId: string;
  settings: TrackSettings;
  /** How the settings differ from the incumbent's ("" for the incumbent). */
  change: string;
  metrics: SpeedMetrics;
  quality: QualityMetrics | null;
  machine: Record<string, unknown>;
  /** ISO 8601. */
  startedAt: string;
  finishedAt: string | null;
  verdict: Verdict;
  reason: string;
}

interface Row {
  id: string;
  run_id: string;
  slug: string;
  artifact_id: string;
  settings_json: string;
  change: string;
  metrics_json: string;
  quality_json: string;
  machine_json: string;
  started_at: string;
  finished_at: string | null;
  verdict: Verdict;
  reason: string;
}

function fromRow(row: Row): CandidateRecord {
  const quality = JSON.parse(row.quality_json) as Partial<QualityMetrics>;
  return {
    id: row.id,
    runId: row.run_id,
    slug: row.slug,
    artifactId: row.artifact_id,
    settings: completeSettings(JSON.parse(row.settings_json) as Record<string, unknown>),
    change: row.change,
    metrics: JSON.parse(row.metrics_json) as SpeedMetrics,
    quality: typeof quality.kl_divergence === "number" ? (quality as QualityMetrics) : null,
    machine: JSON.parse(row.machine_json) as Record<string, unknown>,
    startedAt: row.started_at,
    finishedAt: row.finished_at,
    verdict: row.verdict,
    reason: row.reason,
  };
}

/** A run of this model is already measuring, in a process that is still alive. */
export class RunInProgressError extends Error {
  constructor(slug: string, pid: unknown) {
    super(`a track run of ${slug} is already in progress (process ${String(pid)})`);
    this.name = "RunInProgressError";
  }
}

export interface StartInput {
  runId: string;
  slug: string;
  settings: TrackSettings;
  change: string;
  /** Where it is measured; `pid` is what tells a dead run's rows from a live one's. */
  machine: Record<string, unknown> & { pid: number };
  artifactId?: string;
}

const now = () => new Date().toISOString();

/** Writes a measurement's row as it starts ('running'); returns its id. */
export function startCandidate(db: KilnDatabase, input: StartInput): string {
  const id = randomUUID();
  db.prepare(
    `INSERT INTO track_candidates (id, run_id, slug, artifact_id, settings_json, change, machine_json, started_at, verdict)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'running')`,
  ).run(id, input.runId, input.slug, input.artifactId ?? "", JSON.stringify(input.settings), input.change, JSON.stringify(input.machine), now());
  return id;
}

/**
 * Starts the first row of a run, unless another live process is measuring the same model: the
 * check and the insert are one transaction, so two runs cannot both start. Rows left 'running' by
 * dead processes are marked failed first.
 */
export function claimRun(db: KilnDatabase, input: StartInput, isAlive: (pid: number) => boolean = processAlive): string {
  return db
    .transaction(() => {
      markAbandoned(db, input.slug, undefined, isAlive);
      const live = db.prepare(`SELECT machine_json FROM track_candidates WHERE slug = ? AND verdict = 'running' LIMIT 1`).get(input.slug) as
        | { machine_json: string }
        | undefined;
      if (live) throw new RunInProgressError(input.slug, (JSON.parse(live.machine_json) as { pid?: unknown }).pid);
      return startCandidate(db, input);
    })
    .immediate();
}

export interface FinishInput {
  verdict: Verdict;
  reason?: string;
  artifactId?: string;
  metrics?: SpeedMetrics;
  quality?: QualityMetrics | null;
  /** Keep `finished_at` unset (a winner waiting for its confirmation). */
  open?: boolean;
}

/** Records a measurement's results and verdict (fields left out keep their values). */
export function finishCandidate(db: KilnDatabase, id: string, input: FinishInput): void {
  const sets: string[] = ["verdict = @verdict"];
  const params: Record<string, unknown> = { id, verdict: input.verdict };
  if (input.reason !== undefined) (sets.push("reason = @reason"), (params.reason = input.reason));
  if (input.artifactId !== undefined) (sets.push("artifact_id = @artifactId"), (params.artifactId = input.artifactId));
  if (input.metrics !== undefined) (sets.push("metrics_json = @metrics"), (params.metrics = JSON.stringify(input.metrics)));
  if (input.quality !== undefined) (sets.push("quality_json = @quality"), (params.quality = JSON.stringify(input.quality ?? {})));
  if (!input.open) (sets.push("finished_at = @finished"), (params.finished = now()));
  db.prepare(`UPDATE track_candidates SET ${sets.join(", ")} WHERE id = @id`).run(params);
}

export function getCandidate(db: KilnDatabase, id: string): CandidateRecord | null {
  const row = db.prepare(`SELECT * FROM track_candidates WHERE id = ?`).get(id) as Row | undefined;
  return row ? fromRow(row) : null;
}

/** A model's records oldest first (every model's when `slug` is absent); `limit` keeps the newest ones. */
export function listCandidates(db: KilnDatabase, slug?: string, limit?: number): CandidateRecord[] {
  const where = slug === undefined ? "" : "WHERE slug = @slug";
  const rows = db
    .prepare(`SELECT * FROM (SELECT rowid AS r, * FROM track_candidates ${where} ORDER BY started_at DESC, r DESC LIMIT @limit) ORDER BY started_at, r`)
    .all({ slug, limit: limit ?? -1 }) as Row[];
  return rows.map(fromRow);
}

/** Slugs with track records, alphabetically. */
export function trackedSlugs(db: KilnDatabase): string[] {
  return (db.prepare(`SELECT DISTINCT slug FROM track_candidates ORDER BY slug`).all() as Array<{ slug: string }>).map((r) => r.slug);
}

/** The newest finished record of an artifact (not a failed one), for its settings and figures. */
export function latestRecordOfArtifact(db: KilnDatabase, slug: string, artifactId: string): CandidateRecord | null {
  const row = db
    .prepare(
      `SELECT * FROM track_candidates WHERE slug = ? AND artifact_id = ? AND verdict IN ('incumbent', 'promoted', 'rejected') ORDER BY started_at DESC, rowid DESC LIMIT 1`,
    )
    .get(slug, artifactId) as Row | undefined;
  return row ? fromRow(row) : null;
}

/**
 * Settings measured as candidates of `slug` since `since` (ISO; all when null), by settings key, with
 * when each was last tried: candidates the next run puts at the back of its line.
 */
export function triedSettings(db: KilnDatabase, slug: string, since: string | null): Map<string, string> {
  const rows = db
    .prepare(
      `SELECT settings_json, started_at FROM track_candidates WHERE slug = ? AND verdict IN ('rejected', 'failed', 'promoted') AND started_at >= ? ORDER BY started_at`,
    )
    .all(slug, since ?? "") as Array<{ settings_json: string; started_at: string }>;
  const tried = new Map<string, string>();
  for (const row of rows) tried.set(settingsKey(completeSettings(JSON.parse(row.settings_json) as Record<string, unknown>)), row.started_at);
  return tried;
}

/** Whether a record says its settings lost outright: slower, over the quality budget, or failed (a pair built on them is not worth measuring). */
export function lost(verdict: Verdict, reason: string): boolean {
  return verdict === "failed" || (verdict === "rejected" && (reason.startsWith("slower") || reason.startsWith("outside the quality budget")));
}

/** Settings keys of `slug`'s candidates that lost outright since `since` (ISO; all when null). */
export function losingSettings(db: KilnDatabase, slug: string, since: string | null): Set<string> {
  const rows = db
    .prepare(
      `SELECT settings_json, verdict, reason FROM track_candidates WHERE slug = ? AND verdict IN ('rejected', 'failed') AND change != '' AND started_at >= ?`,
    )
    .all(slug, since ?? "") as Array<{ settings_json: string; verdict: Verdict; reason: string }>;
  return new Set(
    rows.filter((r) => lost(r.verdict, r.reason)).map((r) => settingsKey(completeSettings(JSON.parse(r.settings_json) as Record<string, unknown>))),
  );
}

/**
 * How badly a record that lost outright lost: the largest relative loss its reason names ("slower:
 * decode −91.7% (beyond −3.0%), ..." gives 0.917), 1 for a miss of the quality budget (which no
 * serving setting changes), 0 for anything else (a failure may be the machine's).
 */
export function lossSize(reason: string): number {
  if (reason.startsWith("outside the quality budget")) return 1;
  if (!reason.startsWith("slower")) return 0;
  let worst = 0;
  for (const m of reason.matchAll(/−(\d+(?:\.\d+)?)% \(beyond/g)) worst = Math.max(worst, Number(m[1]) / 100);
  return worst;
}

/**
 * One-setting changes ("name=value", e.g. "accuracyLevel=0") whose candidate lost outright for
 * `slug` against any incumbent, ever, with the largest {@link lossSize} each had: a new incumbent
 * measures them only after everything else (float activations lose about 90% of decode whatever
 * else is set, and take minutes to measure).
 */
export function losingChanges(db: KilnDatabase, slug: string): Map<string, number> {
  const rows = db
    .prepare(`SELECT change, verdict, reason FROM track_candidates WHERE slug = ? AND verdict IN ('rejected', 'failed') AND change != ''`)
    .all(slug) as Array<{ change: string; verdict: Verdict; reason: string }>;
  const out = new Map<string, number>();
  for (const row of rows) {
    // describeChange's form for one setting: "name from→to".
    const single = /^(\w+) [^,→]+→([^,→]+)$/.exec(row.change);
    if (!single || !lost(row.verdict, row.reason)) continue;
    const key = `${single[1]}=${single[2]}`;
    out.set(key, Math.max(out.get(key) ?? 0, lossSize(row.reason)));
  }
  return out;
}

/** Whether a process with this id is alive on this machine. */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * Marks 'running' rows whose process is gone as failed (one model's, or every model's when `slug`
 * is absent); returns how many. A scheduler whose track process just exited passes the reason.
 */
export function markAbandoned(db: KilnDatabase, slug?: string, reason?: string, isAlive: (pid: number) => boolean = processAlive): number {
  const rows = db
    .prepare(`SELECT id, machine_json FROM track_candidates WHERE verdict = 'running' ${slug === undefined ? "" : "AND slug = ?"}`)
    .all(...(slug === undefined ? [] : [slug])) as Array<{
    id: string;
    machine_json: string;
  }>;
  let marked = 0;
  for (const row of rows) {
    const pid = (JSON.parse(row.machine_json) as { pid?: unknown }).pid;
    if (typeof pid === "number" && pid !== process.pid && isAlive(pid)) continue;
    if (pid === process.pid) continue;
    finishCandidate(db, row.id, { verdict: "failed", reason: reason ?? `the track process (${String(pid)}) ended while this was being measured` });
    marked++;
  }
  return marked;
}
