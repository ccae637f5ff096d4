/** Pull -> compile -> record -> load -> serve: one catalogue model, ready for requests. */
import { freemem, totalmem } from "node:os";
import type { AdapterMemory } from "../runtime/device/gpu-memory.js";
import { defaultKvMemoryBytes, kvBytesPerSlot, type MemoryAvailability, readManifest } from "../runtime/artifact/index.js";
import { LoadedModel } from "../runtime/loaded-model.js";
import type { TextSessionOptions } from "../runtime/text-worker/protocol.js";
import { deviceKvPositions } from "../runtime/text-worker/webgpu-session.js";
import { DEFAULT_MAX_RUNNING, serveLoadedModel, type ServedModel, type ServeOptions } from "../scheduler/index.js";
import { getModel } from "../catalogue/catalogue.js";
import { openDatabase } from "../catalogue/db.js";
import { kilnHome } from "../catalogue/paths.js";
import { currentPromotion, type Promotion } from "../catalogue/promotions.js";
import { PromotedArtifactError, promotedArtifactDir, type PromotedSettings, promotedSettings } from "./promoted-artifact.js";
import { provisionArtifact, type ProvisionOptions, WrongKindError } from "./provision-artifact.js";

export interface LoadModelOptions extends ProvisionOptions, ServeOptions {
  /** ONNX Runtime threads of the model's session. Default 2. */
  threads?: number;
  /** Session options beyond threads and slots (profiling, graph optimizations). */
  session?: Omit<TextSessionOptions, "threads" | "slots">;
  /** Aborting stops after the current stage; a model already loaded is closed again. */
  signal?: AbortSignal;
  /**
   * Bytes of KV budget already promised to other models of this process (their caches grow later):
   * taken off the available memory that the default `kvMemoryBytes` is sized from. Default 0.
   */
  kvMemoryReservedBytes?: number;
  /**
   * The promotion to serve: its artifact, with its settings where these options leave them unset.
   * Default: the model's current promotion in the database; null serves the default compile.
   * Ignored (the default compile serves) when `compile` options are given: they ask for one build.
   */
  promotion?: Promotion | null;
  /**
   * When the promoted artifact cannot be served (missing, or not matching its manifest): true (the
   * default) warns and serves the default compile; false throws, for a live switch that would
   * rather keep the artifact already in service.
   */
  fallback?: boolean;
  /** Where problems that do not stop the load are reported. Default: a line on stderr. */
  onWarning?: (message: string) => void;
  /**
   * Reads the WebGPU adapter's memory now, where the device probe knows how (an NVIDIA GPU): on
   * webgpu without `kvMemoryBytes` the device KV pool is then sized from its free memory less the
   * weights (see `deviceKvPositions`). Default: none, the pool takes the model's context up to 1024 positions.
   */
  adapterMemory?: () => AdapterMemory | null;
}

/**
 * This process's memory now, in bytes: available is MemAvailable (`os.freemem()`), or what the
 * process's cgroup leaves it where that is less; total is the machine's memory, or the cgroup limit
 * where that is lower.
 */
export function memoryAvailability(): MemoryAvailability {
  const machine = totalmem();
  const limit = process.constrainedMemory?.() ?? 0; // 0, or a huge number, when there is no limit
  const left = typeof process.availableMemory === "function" ? process.availableMemory() : Infinity;
  return { availableBytes: Math.min(freemem(), left), totalBytes: limit > 0 && limit < machine ? limit : machine };
}

/**
 * Provisions a model's artifact and serves it: a session with one KV slot per running sequence
 * (`maxRunning`, default {@link DEFAULT_MAX_RUNNING}) on its own worker thread, behind a batch engine.
 * Without `kvMemoryBytes` the KV budget is {@link defaultKvMemoryBytes}, sized from the memory
 * available once the weights are loaded (less `kvMemoryReservedBytes`) and the model's shape.
 *
 * The artifact is the model's promoted one when there is a promotion (see `promotion`), verified
 * against its manifest; its settings (`threads`, `maxRunning`, `prefillChunk`, `stepTokens`,
 * `prefixReuse`, `graphOptimizationLevel`) apply where the options leave them undefined. Without a
 * promotion, or when the promoted artifact is broken, the default compile serves.
 */
export async function loadModel(slug: string, options: LoadModelOptions = {}): Promise<ServedModel> {
  const { kind } = getModel(slug);
  if (kind !== "text") throw new WrongKindError(slug, kind, "a text model (chat and completions)");
  const warn = options.onWarning ?? ((message: string) => process.stderr.write(`kiln: WARNING: ${message}\n`));
  const home = options.home ?? kilnHome();
  // Promotions are per device: a GPU model serves the GPU's promotion (a GPU artifact), else its default GPU compile.
  const device = options.session?.device ?? "cpu";
  const promotion = options.compile !== undefined ? null : options.promotion === undefined ? readPromotion(slug, home, device, warn) : options.promotion;
  if (promotion) {
    try {
      options.onStage?.(`verifying the promoted artifact ${promotion.artifactId}`);
      return await serveArtifact(await promotedArtifactDir(slug, promotion.artifactId, home), promotion, options, warn);
    } catch (err) {
      // A promoted artifact that does not load (its graph refused by the runtime, say) is as broken as a missing one.
      if (options.fallback === false || options.signal?.aborted) throw err;
      warn(
        `${err instanceof PromotedArtifactError ? err.message : `the artifact ${promotion.artifactId} promoted for ${slug} failed to load: ${(err as Error).message}`}; serving the default compile instead`,
      );
    }
  }
  const compiled = await provisionArtifact(slug, {
    ...options,
    device: options.session?.device,
    pull: { ...options.pull, signal: options.signal ?? options.pull?.signal },
  });
  return serveArtifact(compiled.dir, null, options, warn);
}

/** Loads the artifact in `dir` and serves it, with `promotion`'s settings where `options` leave them unset. */
export async function serveArtifact(
  dir: string,
  promotion: Promotion | null,
  options: LoadModelOptions,
  warn: (message: string) => void,
): Promise<ServedModel> {
  options.signal?.throwIfAborted();
  const promoted = promotion ? promotedSettings(promotion.settings) : { settings: {}, ignored: [] };
  if (promoted.ignored.length > 0)
    warn(`${promotion!.slug}: settings of the promoted artifact ${promotion!.artifactId} that kiln does not apply: ${promoted.ignored.join(", ")}`);
  const settings: PromotedSettings = promoted.settings;
  options.onStage?.("loading the model");
  const slots = options.maxRunning ?? settings.maxRunning ?? DEFAULT_MAX_RUNNING;
  const session = { graphOptimizationLevel: settings.graphOptimizationLevel, ...options.session };
  // A device KV pool is allocated whole at load: sized from the KV budget, and the budget then says what it holds.
  if (session.device === "webgpu" && session.deviceKvPositions === undefined) {
    const manifest = readManifest(dir);
    // Read at load, not at startup: the models loaded since then hold their part of the adapter.
    const memory = options.kvMemoryBytes === undefined ? options.adapterMemory?.() : null;
    const room = memory ? { memory, weightsBytes: manifest.files.reduce((n, f) => n + f.bytes, 0) } : undefined;
    session.deviceKvPositions = deviceKvPositions(manifest.shape, slots, options.kvMemoryBytes, room);
  }
  const loaded = await LoadedModel.load(dir, { ...session, threads: options.threads ?? settings.threads ?? 2, slots });
  if (options.signal?.aborted) {
    await loaded.close();
    options.signal.throwIfAborted();
  }
  try {
    let kvMemoryBytes = options.kvMemoryBytes;
    if (kvMemoryBytes === undefined) {
      const memory = memoryAvailability();
      memory.availableBytes -= options.kvMemoryReservedBytes ?? 0;
      kvMemoryBytes =
        session.device === "webgpu" && session.deviceKvPositions !== undefined
          ? loaded.worker.slots * kvBytesPerSlot(loaded.manifest.shape, session.deviceKvPositions)
          : defaultKvMemoryBytes(loaded.manifest.shape, loaded.worker.slots, memory);
    }
    const served = serveLoadedModel(loaded, {
      ...options,
      maxRunning: slots,
      prefillChunk: options.prefillChunk ?? settings.prefillChunk,
      stepTokens: options.stepTokens ?? settings.stepTokens,
      prefixReuse: options.prefixReuse ?? settings.prefixReuse,
      kvMemoryBytes,
    });
    served.promotion = promotion;
    served.device = loaded.worker.info.device;
    return served;
  } catch (err) {
    await loaded.close();
    throw err;
  }
}

/** The model's current promotion; a database that cannot be read serves the default compile, with a warning. */
function readPromotion(slug: string, home: string, device: string, warn: (message: string) => void): Promotion | null {
  try {
    const db = openDatabase({ home, readOnlyFallback: true });
    try {
      return currentPromotion(db, slug, device);
    } finally {
      db.close();
    }
  } catch (err) {
    warn(`${slug}: cannot read its promotion from the database (${(err as Error).message}); serving the default compile`);
    return null;
  }
}
