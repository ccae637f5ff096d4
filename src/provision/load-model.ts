/** Pull -> compile -> record -> load -> serve: one catalogue model, ready for requests. */
import { freemem, totalmem } from "node:os";
import { defaultKvMemoryBytes, type MemoryAvailability } from "../runtime/artifact/index.js";
import { LoadedModel } from "../runtime/loaded-model.js";
import type { SessionOptions } from "../runtime/worker/model-session.js";
import { DEFAULT_MAX_RUNNING, serveLoadedModel, type ServedModel, type ServeOptions } from "../scheduler/index.js";
import { getModel } from "../catalogue/catalogue.js";
import { provisionArtifact, type ProvisionOptions, WrongKindError } from "./provision-artifact.js";

export interface LoadModelOptions extends ProvisionOptions, ServeOptions {
  /** ONNX Runtime threads of the model's session. Default 2. */
  threads?: number;
  /** Session options beyond threads and slots (profiling, graph optimizations). */
  session?: Omit<SessionOptions, "threads" | "slots">;
  /** Aborting stops after the current stage; a model already loaded is closed again. */
  signal?: AbortSignal;
  /**
   * Bytes of KV budget already promised to other models of this process (their caches grow later):
   * taken off the available memory that the default `kvMemoryBytes` is sized from. Default 0.
   */
  kvMemoryReservedBytes?: number;
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
 */
export async function loadModel(slug: string, options: LoadModelOptions = {}): Promise<ServedModel> {
  const { kind } = getModel(slug);
  if (kind !== "text") throw new WrongKindError(slug, kind, "a text model (chat and completions)");
  const compiled = await provisionArtifact(slug, { ...options, pull: { ...options.pull, signal: options.signal ?? options.pull?.signal } });
  options.signal?.throwIfAborted();
  options.onStage?.("loading the model");
  const slots = options.maxRunning ?? DEFAULT_MAX_RUNNING;
  const loaded = await LoadedModel.load(compiled.dir, { ...options.session, threads: options.threads ?? 2, slots });
  if (options.signal?.aborted) {
    await loaded.close();
    options.signal.throwIfAborted();
  }
  try {
    let kvMemoryBytes = options.kvMemoryBytes;
    if (kvMemoryBytes === undefined) {
      const memory = memoryAvailability();
      memory.availableBytes -= options.kvMemoryReservedBytes ?? 0;
      kvMemoryBytes = defaultKvMemoryBytes(loaded.manifest.shape, loaded.worker.slots, memory);
    }
    return serveLoadedModel(loaded, { ...options, maxRunning: slots, kvMemoryBytes });
  } catch (err) {
    await loaded.close();
    throw err;
  }
}
