/**
 * Integrity of an artifact folder: the manifest records the size and SHA-256 of every file beside
 * it (`files`), and an artifact is loaded only when its files still match. Sizes are checked every
 * time; hashes are checked against a verification stamp (`.verified.json`) that keeps, for each
 * file, its size, mtime, ctime and inode at the last full hash, so a multi-GB weights file is
 * re-hashed only when one of these changed. ctime cannot be set back by a user (mtime can), so a
 * file edited in place with its mtime restored is still hashed again.
 */
import { createHash } from "node:crypto";
import { createReadStream, readFileSync, statSync, type Stats, writeFileSync, renameSync } from "node:fs";
import { join } from "node:path";
import { ARTIFACT_FILES } from "./files.js";
import type { ArtifactFileRecord, ArtifactManifest } from "./manifest.js";

/** The verification stamp, beside the manifest. Not part of the artifact's content. */
export const VERIFIED_STAMP = ".verified.json";

/** Files of an artifact folder the manifest does not list (itself, and the stamp). */
export const UNLISTED_FILES: readonly string[] = [ARTIFACT_FILES.manifest, VERIFIED_STAMP];

/** One thing wrong with an artifact folder. */
export interface ArtifactProblem {
  /** File name inside the folder ("manifest.json" for a manifest that lists no files). */
  file: string;
  /** What differs, in words: "missing", "is 12 bytes, the manifest says 40", ... */
  problem: string;
}

export interface VerifyOptions {
  /** Hash every file, ignoring the stamp. Default false. */
  full?: boolean;
  /** The hash function (tests count calls). Default {@link sha256OfFile}. */
  hash?: (path: string) => Promise<string>;
}

interface StampEntry {
  bytes: number;
  mtimeMs: number;
  ctimeMs: number;
  ino: number;
  sha256: string;
}

interface Stamp {
  version: 1;
  artifactId: string;
  files: Record<string, StampEntry>;
}

export async function sha256OfFile(path: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path, { highWaterMark: 1 << 22 })) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

function statFile(path: string): Stats | null {
  try {
    const st = statSync(path);
    return st.isFile() ? st : null;
  } catch {
    return null;
  }
}

function stampEntry(st: Stats, sha256: string): StampEntry {
  return { bytes: st.size, mtimeMs: st.mtimeMs, ctimeMs: st.ctimeMs, ino: st.ino, sha256 };
}

function sameStamp(e: StampEntry | undefined, st: Stats, sha256: string): boolean {
  return e !== undefined && e.sha256 === sha256 && e.bytes === st.size && e.mtimeMs === st.mtimeMs && e.ctimeMs === st.ctimeMs && e.ino === st.ino;
}

function readStamp(dir: string, artifactId: string): Stamp | null {
  try {
    const s = JSON.parse(readFileSync(join(dir, VERIFIED_STAMP), "utf8")) as Stamp;
    return s && s.version === 1 && s.artifactId === artifactId && typeof s.files === "object" && s.files !== null ? s : null;
  } catch {
    return null;
  }
}

/**
 * Records that `files` were hashed just now with the sizes and hashes given (the compiler calls it
 * after committing a folder; `verifyArtifact` after a full hash). A folder that cannot be written
 * keeps no stamp and is hashed again next time.
 */
export function writeVerifiedStamp(dir: string, artifactId: string, files: readonly ArtifactFileRecord[]): void {
  const entries: Record<string, StampEntry> = {};
  for (const f of files) {
    const st = statFile(join(dir, f.path));
    if (st && st.size === f.bytes) entries[f.path] = stampEntry(st, f.sha256);
  }
  writeStamp(dir, { version: 1, artifactId, files: entries });
}

function writeStamp(dir: string, stamp: Stamp): void {
  try {
    const tmp = join(dir, `${VERIFIED_STAMP}.${process.pid}.tmp`);
    writeFileSync(tmp, JSON.stringify(stamp, null, 2) + "\n");
    renameSync(tmp, join(dir, VERIFIED_STAMP));
  } catch {
    // a read-only artifact store keeps no stamp: its files are hashed at each verification
  }
}

function short(sha: string): string {
  return sha.slice(0, 12);
}

function listedProblem(manifest: Pick<ArtifactManifest, "files" | "compilerVersion">): ArtifactProblem | null {
  if (!Array.isArray(manifest.files) || manifest.files.length === 0) {
    return {
      file: ARTIFACT_FILES.manifest,
      problem: `lists no file sizes and hashes (written by compiler ${manifest.compilerVersion}, before they were recorded): rebuild it`,
    };
  }
  return null;
}

/**
 * Cheap check (no hashing): every file the manifest lists is present with its recorded size.
 * Returns the problems, empty when none.
 */
export function checkArtifactSizes(dir: string, manifest: Pick<ArtifactManifest, "files" | "compilerVersion">): ArtifactProblem[] {
  const none = listedProblem(manifest);
  if (none) return [none];
  const problems: ArtifactProblem[] = [];
  for (const f of manifest.files) {
    const st = statFile(join(dir, f.path));
    if (!st) problems.push({ file: f.path, problem: "is missing" });
    else if (st.size !== f.bytes) problems.push({ file: f.path, problem: `is ${st.size} bytes, the manifest says ${f.bytes}` });
  }
  return problems;
}

/**
 * Checks every file the manifest lists: present, of its recorded size, and with its recorded
 * SHA-256 (hashed only when the stamp does not vouch for it, or with `full`). Updates the stamp for
 * the files hashed. Returns the problems, empty when the artifact is intact.
 */
export async function verifyArtifact(
  dir: string,
  manifest: Pick<ArtifactManifest, "id" | "files" | "compilerVersion">,
  options: VerifyOptions = {},
): Promise<ArtifactProblem[]> {
  const sizes = checkArtifactSizes(dir, manifest);
  if (sizes.length > 0) return sizes;
  const hash = options.hash ?? sha256OfFile;
  const stamp = options.full ? null : readStamp(dir, manifest.id);
  const problems: ArtifactProblem[] = [];
  const next: Stamp = { version: 1, artifactId: manifest.id, files: {} };
  let hashed = false;
  for (const f of manifest.files) {
    const path = join(dir, f.path);
    const before = statFile(path);
    if (!before) {
      problems.push({ file: f.path, problem: "is missing" });
      continue;
    }
    if (sameStamp(stamp?.files[f.path], before, f.sha256)) {
      next.files[f.path] = stamp!.files[f.path];
      continue;
    }
    const got = await hash(path);
    hashed = true;
    if (got !== f.sha256) {
      problems.push({ file: f.path, problem: `has sha256 ${short(got)}…, the manifest says ${short(f.sha256)}…` });
      continue;
    }
    // Vouch only for what was hashed: a file that changed while it was read is hashed again next time.
    const after = statFile(path);
    if (after && sameStamp(stampEntry(before, f.sha256), after, f.sha256)) next.files[f.path] = stampEntry(before, f.sha256);
  }
  if (hashed) writeStamp(dir, next);
  return problems;
}

/** The problems in one line: "model.onnx.data has sha256 …; tokenizer.json is missing". */
export function describeProblems(problems: readonly ArtifactProblem[]): string {
  return problems.map((p) => `${p.file} ${p.problem}`).join("; ");
}
