import { chmodSync, mkdirSync, readdirSync, statSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join } from "node:path";

/**
 * Where kiln keeps everything it downloads and builds.
 * `KILN_HOME` (default `~/.kiln`) holds `models/<slug>/` (source weights),
 * `artifacts/<slug>/<artifact-id>/` (compiled ONNX artifacts) and `kiln.sqlite` (records).
 */
export function kilnHome(env: NodeJS.ProcessEnv = process.env): string {
  return env.KILN_HOME && env.KILN_HOME.length > 0 ? env.KILN_HOME : join(homedir(), ".kiln");
}

export function modelDir(slug: string, home = kilnHome()): string {
  return join(home, "models", slug);
}

export function artifactsDir(slug: string, home = kilnHome()): string {
  return join(home, "artifacts", slug);
}

export function databasePath(home = kilnHome()): string {
  return join(home, "kiln.sqlite");
}

/** Mode of kiln's home: the owner only (API key hashes and usage records live in it). */
export const PRIVATE_DIR_MODE = 0o700;
/** Mode of kiln's database files. */
export const PRIVATE_FILE_MODE = 0o600;

/** What kiln itself puts in its home: a directory holding nothing else is kiln's own to lock down. */
const KILN_ENTRIES = new Set([
  "models",
  "assets",
  "artifacts",
  "kiln.sqlite",
  "kiln.sqlite-wal",
  "kiln.sqlite-shm",
  "kiln.sqlite-journal",
  "usage-spool.jsonl",
  "key-secret",
]);

/** Files kiln names by pattern in its home: each replica's usage spool. */
const KILN_ENTRY_PATTERNS = [/^usage-spool-.+\.jsonl$/];

/**
 * Makes `home` readable by its owner only: creates it 0700 when missing (its parents as usual),
 * and tightens it to 0700 when group or others have access, but only when it is kiln's own (it
 * holds nothing but kiln's entries, and is not a shared sticky directory like /tmp). A KILN_HOME
 * pointed at a directory with other things in it is left as it is. Returns `home`.
 */
export function ensurePrivateHome(home = kilnHome()): string {
  mkdirSync(dirname(home), { recursive: true });
  try {
    mkdirSync(home, { mode: PRIVATE_DIR_MODE });
    return home;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
  }
  const { mode } = statSync(home);
  if ((mode & 0o077) !== 0 && isKilnsOwn(home, mode)) {
    try {
      chmodSync(home, PRIVATE_DIR_MODE);
    } catch (err) {
      // A home kiln may only read (a fleet's shared, read-only one) stays as its owner made it.
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== "EROFS" && code !== "EPERM") throw err;
    }
  }
  return home;
}

function isKilnsOwn(dir: string, mode: number): boolean {
  const sticky = (mode & 0o1000) !== 0;
  return !sticky && readdirSync(dir).every((entry) => KILN_ENTRIES.has(entry) || KILN_ENTRY_PATTERNS.some((p) => p.test(entry)));
}

/** Takes group and other access away from `file` if it exists (a database made before kiln did this). */
export function tightenFile(file: string): void {
  let mode: number;
  try {
    mode = statSync(file).mode;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return;
    throw err;
  }
  if ((mode & 0o077) !== 0) chmodSync(file, PRIVATE_FILE_MODE);
}
