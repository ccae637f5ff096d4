/** Lookups over the catalogue in `models.ts`. */
import { MODELS } from "./models.js";
import type { ModelEntry, ModelKind, PackageMember, PythonPackageSource, WeightSource } from "./types.js";

export const SLUG_PATTERN = /^[a-z0-9]+(-[a-z0-9]+)*$/;

/** Thrown for a slug that is not in the catalogue. */
export class UnknownModelError extends Error {
  readonly slug: string;
  readonly code = "unknown_model";
  constructor(slug: string) {
    super(`unknown model: ${slug} (run \`kiln models\` for the list)`);
    this.name = "UnknownModelError";
    this.slug = slug;
  }
}

const BY_SLUG: ReadonlyMap<string, ModelEntry> = new Map(MODELS.map((m) => [m.slug, m]));

/** All catalogue entries, in catalogue order. */
export function listModels(filter: { kind?: ModelKind } = {}): readonly ModelEntry[] {
  return filter.kind ? MODELS.filter((m) => m.kind === filter.kind) : MODELS;
}

export function hasModel(slug: string): boolean {
  return BY_SLUG.has(slug);
}

/** The entry for `slug`; throws `UnknownModelError` when there is none. */
export function getModel(slug: string): ModelEntry {
  const entry = BY_SLUG.get(slug);
  if (!entry) throw new UnknownModelError(slug);
  return entry;
}

/** The models that can be had without a hub (their weights ship in Python packages). */
export function embeddedModels(): readonly ModelEntry[] {
  return MODELS.filter((m) => m.embedded === true);
}

/** The members of a python-package source, normalising the single-file shorthand. */
export function packageMembers(source: PythonPackageSource): PackageMember[] {
  const list: PackageMember[] = [];
  if (source.member !== undefined) {
    if (source.sha256 === undefined || source.bytes === undefined) {
      throw new Error(`python package ${source.package}: member ${source.member} lacks sha256/bytes`);
    }
    list.push({ member: source.member, path: source.path, sha256: source.sha256, bytes: source.bytes });
  }
  for (const m of source.members ?? []) list.push(m);
  return list;
}

/** Where a package member lands, relative to the model directory. */
export function memberPath(member: PackageMember): string {
  return member.path ?? member.member.slice(member.member.lastIndexOf("/") + 1);
}

/** A short human description of a source, as used in pull messages ("hub owner/repo@rev"). */
export function describeSource(source: WeightSource): string {
  if (source.type === "hub") {
    return source.revision === "main" ? `hub ${source.repo}` : `hub ${source.repo}@${source.revision}`;
  }
  return `python package ${source.package}==${source.version}`;
}

export type { ModelEntry, ModelKind, WeightSource } from "./types.js";
