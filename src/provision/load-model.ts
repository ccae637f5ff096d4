/** Pull -> compile -> record -> load -> serve: one catalogue model, ready for requests. */
import { LoadedModel } from "../runtime/loaded-model.js";
import type { SessionOptions } from "../runtime/worker/model-session.js";
import { DEFAULT_MAX_RUNNING, serveLoadedModel, type ServedModel, type ServeOptions } from "../scheduler/index.js";
import { provisionArtifact, type ProvisionOptions } from "./provision-artifact.js";

export interface LoadModelOptions extends ProvisionOptions, ServeOptions {
  /** ONNX Runtime threads of the model's session. Default 2. */
  threads?: number;
  /** Session options beyond threads and slots (profiling, graph optimizations). */
  session?: Omit<SessionOptions, "threads" | "slots">;
  /** Aborting stops after the current stage; a model already loaded is closed again. */
  signal?: AbortSignal;
}

/**
 * Provisions a model's artifact and serves it: a session with one KV slot per running sequence
 * (`maxRunning`, default {@link DEFAULT_MAX_RUNNING}) on its own worker thread, behind a batch engine.
 */
export async function loadModel(slug: string, options: LoadModelOptions = {}): Promise<ServedModel> {
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
    return serveLoadedModel(loaded, { ...options, maxRunning: slots });
  } catch (err) {
    await loaded.close();
    throw err;
  }
}
