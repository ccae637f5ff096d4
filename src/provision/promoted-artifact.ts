/**
 * A promoted artifact as it is served: its folder, checked against its manifest the way provisioning
 * checks a reused compile, and the runtime and serving settings it was promoted with.
 */
import { join } from "node:path";
import { artifactsDir } from "../catalogue/paths.js";
import { describeProblems, readManifest, verifyArtifact } from "../runtime/artifact/index.js";
import type { TextSessionOptions } from "../runtime/text-worker/protocol.js";
import type { PrefixReuse } from "../scheduler/index.js";

/**
 * The settings of a promotion that kiln applies when it serves the artifact (the `settings` of an
 * `artifacts_promoted` row, in these names). Each stands in for the default of its `kiln serve`
 * flag; a flag the operator gives wins.
 */
export interface PromotedSettings {
  /** ONNX Runtime threads (`--threads`). */
  threads?: number;
  /** Sequences generating at once, the KV slots (`--max-running`). */
  maxRunning?: number;
  /** Prompt tokens per model call (`--prefill-chunk`). */
  prefillChunk?: number;
  /** Most tokens computed per engine step (no flag). */
  stepTokens?: number;
  /** Prompt prefix reuse (`--prefix-reuse`). */
  prefixReuse?: PrefixReuse;
  /** onnxruntime graph optimizations at session load (no flag). */
  graphOptimizationLevel?: NonNullable<TextSessionOptions["graphOptimizationLevel"]>;
}

const integerIn = (min: number, max: number) => (v: unknown) => Number.isSafeInteger(v) && (v as number) >= min && (v as number) <= max;
const oneOf = (values: readonly string[]) => (v: unknown) => typeof v === "string" && values.includes(v);

/** What each setting accepts: the ranges of the matching `kiln serve` flags. */
const ACCEPTS: { [K in keyof PromotedSettings]-?: (value: unknown) => boolean } = {
  threads: integerIn(1, 256),
  maxRunning: integerIn(1, 256),
  prefillChunk: integerIn(1, 8192),
  stepTokens: integerIn(1, 65_536),
  prefixReuse: oneOf(["exact", "any", "off"]),
  graphOptimizationLevel: oneOf(["disabled", "basic", "extended", "all"]),
};

/**
 * The settings kiln applies out of a promotion's, and the ones it leaves out: names it does not know
 * and values outside their ranges (a promotion written by a newer track, or by hand), which would
 * otherwise be mistaken for applied.
 */
export function promotedSettings(settings: Record<string, unknown>): { settings: PromotedSettings; ignored: string[] } {
  const applied: Record<string, unknown> = {};
  const ignored: string[] = [];
  for (const [name, value] of Object.entries(settings)) {
    // The device chose the promotion (promotions are per device); it is not a setting to apply.
    if (name === "device") continue;
    const accepts = (ACCEPTS as Record<string, ((v: unknown) => boolean) | undefined>)[name];
    if (accepts?.(value)) applied[name] = value;
    else ignored.push(`${name}=${JSON.stringify(value)}`);
  }
  return { settings: applied as PromotedSettings, ignored };
}

/** A promoted artifact that cannot be served: missing, another model's, or not matching its manifest. */
export class PromotedArtifactError extends Error {
  constructor(slug: string, artifactId: string, why: string) {
    super(`the artifact ${artifactId} promoted for ${slug} cannot be served: ${why}`);
    this.name = "PromotedArtifactError";
  }
}

/** An id is one folder name: a row written by hand must not point outside the model's artifacts. */
const ARTIFACT_ID = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

/**
 * The folder of `slug`'s promoted artifact `artifactId`, once its manifest names it and its files
 * match the manifest (sizes always, sha256 where the verification stamp does not vouch for a file).
 * A promoted artifact is never rebuilt: its compile options may be a track's candidate that the
 * default provisioning does not know how to make. Throws {@link PromotedArtifactError}.
 */
export async function promotedArtifactDir(slug: string, artifactId: string, home: string): Promise<string> {
  if (!ARTIFACT_ID.test(artifactId)) throw new PromotedArtifactError(slug, artifactId, "that is not an artifact id");
  const dir = join(artifactsDir(slug, home), artifactId);
  let manifest;
  try {
    manifest = readManifest(dir);
  } catch (err) {
    const missing = (err as NodeJS.ErrnoException).code === "ENOENT";
    throw new PromotedArtifactError(
      slug,
      artifactId,
      missing ? `${dir} has no manifest (it was never compiled here, or was deleted)` : `its manifest is unreadable (${(err as Error).message})`,
    );
  }
  if (manifest.id !== artifactId || manifest.slug !== slug) {
    throw new PromotedArtifactError(slug, artifactId, `${dir} holds the artifact ${manifest.id} of ${manifest.slug}`);
  }
  if ((manifest.kind ?? "text") !== "text") throw new PromotedArtifactError(slug, artifactId, `it is a ${manifest.kind} artifact, not a text one`);
  const problems = await verifyArtifact(dir, manifest);
  if (problems.length > 0) throw new PromotedArtifactError(slug, artifactId, `its files differ from its manifest: ${describeProblems(problems)}`);
  return dir;
}
