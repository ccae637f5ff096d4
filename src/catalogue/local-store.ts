/**
 * What kiln keeps of each model on this machine, under KILN_HOME: its pulled source weights
 * (`models/<slug>/`) and its compiled artifacts (`artifacts/<slug>/<id>/`), measured on disk, and
 * their removal. A slug is matched against the folders' own names, never joined into a path as
 * given, so no name reaches outside the home.
 */
import { lstatSync, readdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { artifactsDir, modelDir } from "./paths.js";

/** One model's folders on disk, in bytes. */
export interface LocalFootprint {
  slug: string;
  /** Bytes of `models/<slug>/`, 0 when nothing is pulled. */
  weightsBytes: number;
  /** Each folder under `artifacts/<slug>/`, by artifact id. */
  artifacts: Array<{ id: string; bytes: number }>;
}

/** Where a model's kept things are: a pulled model and its artifacts, or its artifacts alone. */
export type LocalPart = "all" | "artifacts";

/** Slugs with a folder under `models/` or `artifacts/`, sorted. */
export function localSlugs(home: string): string[] {
  return [...new Set([...folders(join(home, "models")), ...folders(join(home, "artifacts"))])].sort();
}

/** What is on disk of `slug`; null when nothing is. */
export function localFootprint(slug: string, home: string): LocalFootprint | null {
  if (!localSlugs(home).includes(slug)) return null;
  const weights = folders(join(home, "models")).includes(slug) ? treeBytes(modelDir(slug, home)) : 0;
  const artifacts = folders(artifactsDir(slug, home)).map((id) => ({ id, bytes: treeBytes(join(artifactsDir(slug, home), id)) }));
  return { slug, weightsBytes: weights, artifacts };
}

/** Bytes of a footprint, weights and artifacts together. */
export function footprintBytes(f: LocalFootprint): number {
  return f.weightsBytes + f.artifacts.reduce((n, a) => n + a.bytes, 0);
}

/**
 * Deletes `slug`'s artifacts and, for "all", its pulled weights. Returns what was deleted (weights
 * 0 for "artifacts"), or null when nothing of `slug` is on disk.
 */
export function removeLocal(slug: string, home: string, part: LocalPart): LocalFootprint | null {
  const found = localFootprint(slug, home);
  if (!found) return null;
  rmSync(artifactsDir(slug, home), { recursive: true, force: true });
  if (part === "artifacts") return { ...found, weightsBytes: 0 };
  rmSync(modelDir(slug, home), { recursive: true, force: true });
  return found;
}

/** Deletes those of `slug`'s artifacts named in `ids` that are on disk; returns what was deleted (weights 0). */
export function removeArtifacts(slug: string, home: string, ids: readonly string[]): LocalFootprint {
  const found = localFootprint(slug, home);
  const gone = (found?.artifacts ?? []).filter((a) => ids.includes(a.id));
  for (const a of gone) rmSync(join(artifactsDir(slug, home), a.id), { recursive: true, force: true });
  return { slug, weightsBytes: 0, artifacts: gone };
}

/** Names of the folders in `dir` ([] when it does not exist). */
function folders(dir: string): string[] {
  try {
    return readdirSync(dir, { withFileTypes: true })
      .filter((e) => e.isDirectory())
      .map((e) => e.name);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw err;
  }
}

/** Bytes of the files under `path`, links not followed. */
function treeBytes(path: string): number {
  const stat = lstatSync(path);
  if (!stat.isDirectory()) return stat.isFile() ? stat.size : 0;
  return readdirSync(path).reduce((n, name) => n + treeBytes(join(path, name)), 0);
}
