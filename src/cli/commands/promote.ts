/** `kiln promote <slug> <artifact>`: put a compiled artifact in service for a model. */
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { getModel, hasModel, UnknownModelError } from "../../catalogue/catalogue.js";
import { openDatabase, type KilnDatabase } from "../../catalogue/db.js";
import { artifactsDir } from "../../catalogue/paths.js";
import { currentPromotion, promoteArtifact } from "../../catalogue/promotions.js";
import { latestRecordOfArtifact } from "../../track/records.js";
import { servingSettings } from "../../track/settings.js";
import { readManifest } from "../../runtime/artifact/index.js";
import { defineCommand } from "../command.js";
import { option, UsageError } from "../options.js";

export default defineCommand({
  name: "promote",
  description: "Serve a compiled artifact for a model (recorded; `kiln rollback` undoes it)",
  intro: `Makes <artifact> (its id, or the hash at its end, as \`kiln tracks\` shows it) the one serving
<slug>: a row of artifacts_promoted in $KILN_HOME/kiln.sqlite, which a running \`kiln serve\` picks
up and the next one loads. The artifact must be compiled for that model. Its runtime and serving
settings (threads, prefill chunk, ...) are the ones the track last measured it with, if it did;
otherwise the defaults.`,
  positionals: "<slug> <artifact>",
  options: {
    reason: option.string({ value: "<text>", default: "operator", description: "why, as `kiln tracks` shows it" }),
  },
  async run({ options, positionals }, io) {
    const [slug, artifact, ...extra] = positionals;
    if (!slug || !artifact) throw new UsageError("needs a model slug and an artifact id");
    if (extra.length > 0) throw new UsageError(`unexpected argument ${extra[0]}`);
    if (!hasModel(slug)) throw new UsageError(new UnknownModelError(slug).message);
    const db = openDatabase();
    try {
      io.stdout.write(`${promote(db, slug, artifact, options.reason)}\n`);
      return 0;
    } finally {
      db.close();
    }
  },
});

/**
 * Puts `slug`'s compiled artifact named by `artifact` in service with the settings the track last
 * measured it with; says what serves now and what served before. Shared with the web console's
 * track page (through `kiln serve`); throws a UsageError naming the artifacts when none matches.
 */
export function promote(db: KilnDatabase, slug: string, artifact: string, reason: string): string {
  if (getModel(slug).kind !== "text") throw new UsageError(`${slug} is a ${getModel(slug).kind} model; only text models are promoted`);
  const { artifactId, device } = resolveArtifact(slug, artifact);
  const measured = latestRecordOfArtifact(db, slug, artifactId);
  // A GPU artifact is promoted on the GPU (promotions are per device), whatever the record says.
  const settings = { ...(measured ? servingSettings(measured.settings) : {}), ...(device !== "cpu" ? { device } : {}) };
  const before = currentPromotion(db, slug, device);
  const promotion = promoteArtifact(db, {
    slug,
    artifactId,
    settings,
    metrics: measured?.metrics ?? {},
    quality: { ...(measured?.quality ?? {}) },
    reason,
  });
  const said = Object.entries(promotion.settings)
    .map(([k, v]) => `${k}=${String(v)}`)
    .join(", ");
  return `${slug}: serving ${artifactId}${said ? ` with ${said}` : " with the default settings"} (before: ${before ? before.artifactId : "the default compile"})`;
}

/** The full id of `slug`'s compiled artifact named by `text` (the whole id, or a unique end of it), and the device it was built for. */
function resolveArtifact(slug: string, text: string): { artifactId: string; device: string } {
  let ids: string[];
  try {
    ids = readdirSync(artifactsDir(slug), { withFileTypes: true })
      .filter((e) => e.isDirectory() && !e.name.startsWith("."))
      .map((e) => e.name);
  } catch {
    ids = [];
  }
  const matches = ids.includes(text) ? [text] : ids.filter((id) => id.endsWith(`-${text}`) || id.endsWith(text));
  if (matches.length === 0)
    throw new UsageError(`no compiled artifact ${text} of ${slug} in ${artifactsDir(slug)}${ids.length ? ` (there are: ${ids.join(", ")})` : ""}`);
  if (matches.length > 1) throw new UsageError(`${text} names several artifacts of ${slug}: ${matches.join(", ")}`);
  const [id] = matches;
  let manifest;
  try {
    manifest = readManifest(join(artifactsDir(slug), id));
  } catch (err) {
    throw new Error(`${id} has no readable manifest (${(err as Error).message}); compile it again with \`kiln compile\``);
  }
  if (manifest.id !== id || manifest.slug !== slug)
    throw new Error(`${join(artifactsDir(slug), id)} holds ${manifest.id} of ${manifest.slug}, not ${id} of ${slug}`);
  return { artifactId: id, device: manifest.device ?? "cpu" };
}
