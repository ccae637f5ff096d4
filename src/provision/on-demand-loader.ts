/**
 * The scheduler's {@link ModelLoader} filled with provisioning: whether a model is pulled, what it
 * takes in memory, pull -> compile -> load on a request for a model the server has not loaded, and
 * a model's weights pulled or deleted on request.
 */
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { getModel, hasModel } from "../catalogue/catalogue.js";
import { artifactsDir, kilnHome, modelDir } from "../catalogue/paths.js";
import { removeLocal } from "../catalogue/local-store.js";
import { pullModel, type PullProgress } from "../catalogue/pull/index.js";
import { RECORD_FILE } from "../catalogue/pull/store.js";
import type { ModelEntry } from "../catalogue/types.js";
import { type ArtifactManifest, defaultKvMemoryBytes, type MemoryAvailability, readManifest } from "../runtime/artifact/index.js";
import { DEFAULT_MAX_RUNNING, hostKvMemoryBytes, type AnyServedModel, type ModelLoader } from "../scheduler/index.js";
import { loadModel, memoryAvailability, type LoadModelOptions } from "./load-model.js";
import { loadSpeechModel, type LoadSpeechModelOptions } from "./load-speech-model.js";

export interface OnDemandLoaderOptions {
  /** KILN_HOME. Default `kilnHome()`. */
  home?: string;
  /** Pull a model that is not pulled on its first request. Default false. */
  pullOnDemand?: boolean;
  /** How text models load (the server's flags); `kvMemoryBytes` unset sizes each one's KV budget by default. */
  text: LoadModelOptions;
  /** How speech models load. */
  speech: LoadSpeechModelOptions;
  /**
   * The memory budget the operator set, in bytes: a text model's default KV budget is then sized
   * within it (as if it were the machine's memory) rather than from the machine's.
   */
  memoryBudgetBytes?: number;
  /** KV budgets already promised to the loaded text models (taken off the memory a default KV budget is sized from). */
  reservedKvBytes?: () => number;
  /** Each stage of each load ("pulling weights", "compiling"...). */
  onStage?: (slug: string, stage: string) => void;
}

/** Bytes a speech model takes beyond its weights (decoder cache, cross-attention of its slots), as a share of them. */
const SPEECH_OVERHEAD = 0.25;
/** Artifact bytes per source byte before a model is compiled (the compiler's repacking of Q4_K_M; CTranslate2 float16 -> float32). */
const TEXT_ARTIFACT_RATIO = 1.35;
const SPEECH_ARTIFACT_RATIO = 2;

export class OnDemandLoader implements ModelLoader {
  readonly pullOnDemand: boolean;
  private readonly home: string;

  constructor(private readonly options: OnDemandLoaderOptions) {
    this.home = options.home ?? kilnHome();
    this.pullOnDemand = options.pullOnDemand ?? false;
  }

  isPulled(slug: string): boolean {
    return existsSync(join(modelDir(slug, this.home), RECORD_FILE));
  }

  memoryBytes(slug: string, model?: AnyServedModel): number {
    // A model served from a local file is in no catalogue: its artifact alone says what it takes.
    const entry = hasModel(slug) ? getModel(slug) : undefined;
    const manifest = newestManifest(artifactsDir(slug, this.home), model?.artifactId);
    const weights = manifest ? manifest.files.reduce((n, f) => n + f.bytes, 0) : entry ? estimatedArtifactBytes(entry) : 0;
    if (entry?.kind === "transcription") return Math.round(weights * (1 + SPEECH_OVERHEAD));
    // A GPU model's KV pool lives in the adapter's memory, not the host's the budget bounds.
    if (model?.kind === "text" && (model.device === "webgpu" || model.kvMemoryBytes !== undefined)) return weights + hostKvMemoryBytes(model);
    if (!model && this.options.text.session?.device === "webgpu") return weights;
    const kv = this.kvMemoryBytes(manifest);
    // Before its first compile the model's shape is unknown: its KV budget is at most an eighth of memory.
    return weights + (kv ?? Math.floor(this.memory().totalBytes / 8));
  }

  async pull(slug: string, signal: AbortSignal, onProgress: (progress: PullProgress) => void): Promise<void> {
    await pullModel(slug, { home: this.home, signal, onProgress });
  }

  remove(slug: string): boolean {
    return removeLocal(slug, this.home, "all") !== null;
  }

  async load(slug: string, signal: AbortSignal, onStage: (stage: string) => void): Promise<AnyServedModel> {
    const stage = (s: string) => {
      onStage(s);
      this.options.onStage?.(slug, s);
    };
    if (getModel(slug).kind === "transcription") return loadSpeechModel(slug, { ...this.options.speech, home: this.home, onStage: stage, signal });
    const manifest = newestManifest(artifactsDir(slug, this.home));
    return loadModel(slug, {
      ...this.options.text,
      home: this.home,
      onStage: stage,
      signal,
      kvMemoryBytes: this.options.text.kvMemoryBytes ?? (this.options.memoryBudgetBytes !== undefined ? this.kvMemoryBytes(manifest) : undefined),
      kvMemoryReservedBytes: this.options.reservedKvBytes?.() ?? 0,
    });
  }

  /** The KV budget a text model gets: the flag's, else the default sized from the budget (or the machine); undefined without its shape. */
  private kvMemoryBytes(manifest: ArtifactManifest | undefined): number | undefined {
    if (this.options.text.kvMemoryBytes !== undefined) return this.options.text.kvMemoryBytes;
    if (!manifest) return undefined;
    return defaultKvMemoryBytes(manifest.shape, this.options.text.maxRunning ?? DEFAULT_MAX_RUNNING, this.memory());
  }

  private memory(): MemoryAvailability {
    const budget = this.options.memoryBudgetBytes;
    return budget !== undefined ? { availableBytes: budget, totalBytes: budget } : memoryAvailability();
  }
}

/** The manifest of `id` among the model's artifacts, else of the newest one; undefined when none is compiled. */
function newestManifest(dir: string, id?: string): ArtifactManifest | undefined {
  let newest: ArtifactManifest | undefined;
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return undefined;
  }
  for (const name of names) {
    let manifest: ArtifactManifest;
    try {
      manifest = readManifest(join(dir, name));
    } catch {
      continue; // a folder being written, or not an artifact
    }
    if (!Array.isArray(manifest.files)) continue;
    if (id !== undefined && manifest.id === id) return manifest;
    if (!newest || manifest.createdAt > newest.createdAt) newest = manifest;
  }
  return newest;
}

/** The artifact's size from the catalogue's pinned source sizes, before the model is compiled. */
function estimatedArtifactBytes(entry: ModelEntry): number {
  const source = entry.sources[0];
  const files = source.type === "hub" ? source.files : (source.members ?? [{ bytes: source.bytes }]);
  const sourceBytes = files.reduce((n, f) => n + (f.bytes ?? 0), 0) || Math.round((entry.parameters * 4.85) / 8);
  return Math.round(sourceBytes * (entry.kind === "transcription" ? SPEECH_ARTIFACT_RATIO : TEXT_ARTIFACT_RATIO));
}
