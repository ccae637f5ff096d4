/**
 * Artifacts nothing will serve again: built by an earlier compiler (artifact ids include the
 * compiler's version, so provisioning never finds them again) and not promoted, now or as the one a
 * rollback returns to. Each compiler upgrade would otherwise leave a model's artifacts behind.
 */
import { join } from "node:path";
import type { KilnDatabase } from "../catalogue/db.js";
import type { LocalFootprint } from "../catalogue/local-store.js";
import { promotionHistory } from "../catalogue/promotions.js";
import { artifactsDir } from "../catalogue/paths.js";
import { COMPILER_VERSION } from "../compiler/compile.js";
import { readManifest } from "../runtime/artifact/index.js";

/**
 * The ids among `kept`'s artifacts that are stale. A folder without a readable manifest (a compile
 * still writing it) is not judged.
 */
export function staleArtifactIds(kept: LocalFootprint, home: string, db: KilnDatabase): string[] {
  const promoted = new Set(
    promotionHistory(db, kept.slug)
      .filter((p) => p.promoted)
      .map((p) => p.artifactId),
  );
  return kept.artifacts
    .map((a) => a.id)
    .filter((id) => {
      if (promoted.has(id)) return false;
      try {
        return readManifest(join(artifactsDir(kept.slug, home), id)).compilerVersion !== COMPILER_VERSION;
      } catch {
        return false;
      }
    });
}
