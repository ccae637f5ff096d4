import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  ARTIFACT_FILES,
  type ArtifactFileRecord,
  type ArtifactManifest,
  sha256OfFile,
  type TokenizerSpec,
  UNLISTED_FILES,
  writeVerifiedStamp,
} from "../runtime/artifact/index.js";

/** Hex SHA-256 of a file's content, read in 4 MiB chunks. */
export const sha256File = sha256OfFile;

/** Same source, compiler and options give the same id, so a compile is reused instead of redone. */
export function artifactId(slug: string, sourceSha256: string, compilerVersion: string, options: object): string {
  const h = createHash("sha256")
    .update(`${sourceSha256}\n${compilerVersion}\n${JSON.stringify(options)}`)
    .digest("hex");
  return `${slug}-${h.slice(0, 12)}`;
}

/** A folder that becomes the artifact only when complete (rename is atomic), so a crash leaves no half artifact. */
export class ArtifactFolder {
  readonly tmpDir: string;
  constructor(readonly finalDir: string) {
    this.tmpDir = `${finalDir}.tmp-${process.pid}`;
    rmSync(this.tmpDir, { recursive: true, force: true });
    mkdirSync(this.tmpDir, { recursive: true });
  }

  path(file: string): string {
    return join(this.tmpDir, file);
  }

  writeTokenizer(spec: TokenizerSpec, chatTemplate: string | null): void {
    writeFileSync(this.path(ARTIFACT_FILES.tokenizer), JSON.stringify(spec));
    if (chatTemplate !== null) writeFileSync(this.path(ARTIFACT_FILES.chatTemplate), chatTemplate);
  }

  /** Size and SHA-256 of every file written so far (the manifest's `files`), by name. */
  async fileRecords(): Promise<ArtifactFileRecord[]> {
    const names = readdirSync(this.tmpDir)
      .filter((name) => !UNLISTED_FILES.includes(name) && statSync(this.path(name)).isFile())
      .sort();
    const out: ArtifactFileRecord[] = [];
    for (const name of names) out.push({ path: name, bytes: statSync(this.path(name)).size, sha256: await sha256OfFile(this.path(name)) });
    return out;
  }

  /**
   * Records every file's size and hash in the manifest, writes it, and moves the folder into place
   * (replacing an older one); the verification stamp vouches for the files just hashed.
   */
  async commit(manifest: Omit<ArtifactManifest, "files">): Promise<ArtifactManifest> {
    const full: ArtifactManifest = { ...manifest, files: await this.fileRecords() };
    writeFileSync(this.path(ARTIFACT_FILES.manifest), JSON.stringify(full, null, 2));
    if (existsSync(this.finalDir)) rmSync(this.finalDir, { recursive: true, force: true });
    renameSync(this.tmpDir, this.finalDir);
    writeVerifiedStamp(this.finalDir, full.id, full.files);
    return full;
  }

  abandon(): void {
    rmSync(this.tmpDir, { recursive: true, force: true });
  }
}
