/**
 * The identity of a GGUF source: one file's sha256, or for a split model (`name-00001-of-0000N.gguf`
 * ...) a digest over every shard's sha256, so that an artifact names all the weights it came from.
 */
import { createHash } from "node:crypto";
import { basename } from "node:path";
import { sha256OfFile } from "../runtime/artifact/index.js";
import { isShardName, readGguf } from "./gguf/index.js";
import { statSync } from "node:fs";

export interface SourceFileDigest {
  /** Base name. */
  file: string;
  sha256: string;
  bytes: number;
}

export interface SourceDigest {
  /** The file's sha256, or for a split model the sha256 of its shards' `name sha256` lines. */
  sha256: string;
  /** Bytes of every file together. */
  bytes: number;
  /** Each file, the first (the one opened) first. */
  files: SourceFileDigest[];
}

/** The source's content is not the one recorded for it: it changed after it was pulled. */
export class SourceChangedError extends Error {
  constructor(
    readonly path: string,
    readonly expected: string,
    readonly actual: string,
  ) {
    super(`${path} has sha256 ${actual}, but ${expected} was recorded for it (pulled or pinned): the file changed after it was pulled; refusing to compile it`);
    this.name = "SourceChangedError";
  }
}

/**
 * Hashes the GGUF at `path` and, when it is the first shard of a split model, the rest of its set.
 * `expected` (sha256 by base name) is checked file by file as each is hashed.
 */
export async function digestGgufSource(path: string, expected: Record<string, string | undefined> = {}): Promise<SourceDigest> {
  const paths = isShardName(path) ? ((await readGguf(path)).shards ?? [path]) : [path];
  const files: SourceFileDigest[] = [];
  for (const p of paths) {
    const sha256 = await sha256OfFile(p);
    const want = expected[basename(p)]?.toLowerCase();
    if (want !== undefined && want !== sha256) throw new SourceChangedError(p, want, sha256);
    files.push({ file: basename(p), sha256, bytes: statSync(p).size });
  }
  const bytes = files.reduce((n, f) => n + f.bytes, 0);
  if (files.length === 1) return { sha256: files[0].sha256, bytes, files };
  const sha256 = createHash("sha256")
    .update(files.map((f) => `${f.file} ${f.sha256}\n`).join(""))
    .digest("hex");
  return { sha256, bytes, files };
}
