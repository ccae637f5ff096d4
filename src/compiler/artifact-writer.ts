import { createHash } from "node:crypto";
import { createReadStream, existsSync, mkdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ARTIFACT_FILES, type ArtifactManifest, type TokenizerSpec } from "../runtime/artifact/index.js";

export async function sha256File(path: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path, { highWaterMark: 1 << 22 })) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

/** Same source, compiler and options give the same id, so a compile is reused instead of redone. */
export function artifactId(slug: string, sourceSha256: string, compilerVersion: string, options: object): string {
  const h = createHash("sha256").update(`${sourceSha256}\n${compilerVersion}\n${JSON.stringify(options)}`).digest("hex");
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

  commit(manifest: ArtifactManifest): void {
    writeFileSync(this.path(ARTIFACT_FILES.manifest), JSON.stringify(manifest, null, 2));
    if (existsSync(this.finalDir)) rmSync(this.finalDir, { recursive: true, force: true });
    renameSync(this.tmpDir, this.finalDir);
  }

  abandon(): void {
    rmSync(this.tmpDir, { recursive: true, force: true });
  }
}
