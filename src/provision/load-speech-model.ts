/** Pull -> compile -> record -> load -> serve for a speech model. */
import type { AdapterMemory } from "../runtime/device/gpu-memory.js";
import type { ComputeDevice } from "../runtime/device/index.js";
import { prepareFfmpeg } from "../runtime/audio/index.js";
import { LoadedSpeechModel } from "../runtime/loaded-speech-model.js";
import { type ServedSpeechModel, serveSpeechModel, type SpeechServeOptions } from "../scheduler/speech/index.js";
import { getModel } from "../catalogue/catalogue.js";
import { provisionArtifact, type ProvisionOptions, WrongKindError } from "./provision-artifact.js";
import { loadVad, speechVad } from "./vad.js";
import { DEFAULT_BEAM_SIZE, DEFAULT_SPEECH_SLOTS } from "./defaults.js";

export interface LoadSpeechModelOptions extends ProvisionOptions, SpeechServeOptions {
  /** ONNX Runtime threads of the model's sessions. Default 2. */
  threads?: number;
  /** Where the encoder and decoder run (`kiln serve --device`, resolved). Default "cpu". */
  device?: ComputeDevice;
  /** Aborting stops after the current stage; a model already loaded is closed again. */
  signal?: AbortSignal;
  /** Skip silence in transcriptions that do not say (`vad_filter`). Default false, as faster-whisper's `WhisperModel`. */
  vadFilter?: boolean;
  /**
   * The GPU adapter's memory now, when it can be read (NVIDIA's): on a GPU a model whose weights and
   * caches would not fit the free part is refused with the figures before it allocates. Default: not checked.
   */
  adapterMemory?: () => AdapterMemory | null;
}

export { DEFAULT_BEAM_SIZE, DEFAULT_SPEECH_SLOTS };

/**
 * Provisions a speech model's artifact and loads it on its worker thread, with a decoder row per
 * beam of `maxRunning` transcriptions (default {@link DEFAULT_SPEECH_SLOTS}), unserved.
 */
export async function loadSpeechWorker(slug: string, options: LoadSpeechModelOptions = {}): Promise<LoadedSpeechModel> {
  const { kind } = getModel(slug);
  if (kind !== "transcription") throw new WrongKindError(slug, kind, "a transcription model");
  const compiled = await provisionArtifact(slug, { ...options, pull: { ...options.pull, signal: options.signal ?? options.pull?.signal } });
  options.signal?.throwIfAborted();
  options.onStage?.("loading the model");
  const device = options.device ?? "cpu";
  const beamSize = options.beamSize ?? DEFAULT_BEAM_SIZE;
  // Read at load, not at startup: the models loaded since then hold their part of the adapter.
  const memory = device === "cpu" ? null : (options.adapterMemory?.() ?? null);
  // Each running transcription holds a decoder row per beam.
  return LoadedSpeechModel.load(compiled.dir, {
    device,
    threads: options.threads ?? 2,
    slots: (options.maxRunning ?? DEFAULT_SPEECH_SLOTS) * beamSize,
    rowsPerWindow: beamSize,
    ...(memory ? { adapterFreeBytes: memory.totalBytes - memory.usedBytes } : {}),
  });
}

/**
 * Provisions a speech model's artifact and serves it: encoder and decoder on their own worker
 * thread, `maxRunning` transcriptions (default {@link DEFAULT_SPEECH_SLOTS}) decoded together.
 */
export async function loadSpeechModel(slug: string, options: LoadSpeechModelOptions = {}): Promise<ServedSpeechModel> {
  const device = options.device ?? "cpu";
  const slots = options.maxRunning ?? DEFAULT_SPEECH_SLOTS;
  const beamSize = options.beamSize ?? DEFAULT_BEAM_SIZE;
  const loaded = await loadSpeechWorker(slug, options);
  if (options.signal?.aborted) {
    await loaded.close();
    options.signal.throwIfAborted();
  }
  if (options.vadFilter) {
    // Pulled now, so that the first transcription does not wait for it and a missing model shows at start.
    options.onStage?.("loading the voice activity detector");
    await loadVad(options.home);
  }
  // The first upload's decoding then finds an ffmpeg already started.
  prepareFfmpeg();
  const vad = speechVad(options.vadFilter ?? false, options.home);
  const served = serveSpeechModel(loaded, { maxWaiting: options.maxWaiting, maxRunning: slots, gate: options.gate, vad, beamSize });
  served.device = device;
  return served;
}
