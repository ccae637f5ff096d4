/** A loaded speech model in service: its engine and transcriber behind the `ServedSpeechModel` the API sees. */
import type { LoadedSpeechModel } from "../../runtime/loaded-speech-model.js";
import type { ComputeGate } from "../compute-gate.js";
import { SpeechEngine, type SpeechRunner } from "./speech-engine.js";
import { Transcriber } from "./transcriber.js";
import type { ServedSpeechModel, TranscribeOptions } from "./types.js";
import { transcribeSpeechOnly, type SpeechDetector, VadUnavailableError } from "./vad-filter.js";
import { languageName } from "../../runtime/speech/index.js";

/** How a speech model is served (the `kiln serve` flags it shares with text). */
export interface SpeechServeOptions {
  /** Transcriptions waiting for a slot before new ones get 503. Default 64. */
  maxWaiting?: number;
  /** Transcriptions running at once. Default: the loaded model's slots. */
  maxRunning?: number;
  /** Turns on the machine shared with the other models of this process. Default: none. */
  gate?: ComputeGate;
  /**
   * Beams of a transcription's beam search unless it asks otherwise, and the most it may ask for:
   * each running transcription holds this many of the worker's slots. 1 is greedy decoding. Default 1.
   */
  beamSize?: number;
  /** Voice activity detection for transcriptions that ask for it (`vadFilter`). Default: none (asking is an error). */
  vad?: SpeechVad;
}

/** The server's voice activity detection. */
export interface SpeechVad {
  /** The detector, loaded (and its model pulled) on first use; rejects when it cannot be had. */
  detector: () => Promise<SpeechDetector>;
  /** Whether a transcription that does not say is filtered (`kiln serve --vad-filter`). */
  byDefault: boolean;
}

export function serveSpeechModel(loaded: LoadedSpeechModel, options: SpeechServeOptions = {}): ServedSpeechModel & { engine: SpeechEngine } {
  const m = loaded.manifest;
  return serveSpeechRunner(
    loaded.worker,
    {
      slug: m.slug,
      artifactId: m.id,
      artifactCreatedAt: m.createdAt,
      model: { shape: m.speech, tokens: m.tokens, tokenizer: loaded.tokenizer, multilingual: Object.keys(m.tokens.languages).length > 0 },
      close: () => loaded.close(),
    },
    options,
  );
}

/** The served model over any runner (the worker, or a fake in unit tests). */
export function serveSpeechRunner(
  runner: SpeechRunner,
  meta: { slug: string; artifactId: string; artifactCreatedAt: string; model: ConstructorParameters<typeof Transcriber>[1]; close: () => Promise<void> },
  options: SpeechServeOptions = {},
): ServedSpeechModel & { engine: SpeechEngine } {
  const beamSize = options.beamSize ?? 1;
  const engine = new SpeechEngine(runner, {
    name: meta.slug,
    maxWaiting: options.maxWaiting,
    maxRunning: options.maxRunning,
    gate: options.gate,
    rowsPerTranscription: beamSize,
  });
  const transcriber = new Transcriber(engine, meta.model, { beamSize: Math.min(beamSize, engine.rowsPerTranscription) });
  const languages = meta.model.multilingual ? Object.keys(meta.model.tokens.languages) : ["en"];
  return {
    kind: "transcription",
    slug: meta.slug,
    artifactId: meta.artifactId,
    artifactCreatedAt: meta.artifactCreatedAt,
    multilingual: meta.model.multilingual,
    languages,
    beamSize: Math.min(beamSize, engine.rowsPerTranscription),
    maxBeamSize: transcriber.maxBeamSize,
    engine,
    transcribe: (samples, request: TranscribeOptions = {}) => {
      const filter = request.vadFilter ?? options.vad?.byDefault ?? false;
      if (filter === false) return transcriber.transcribe(samples, request);
      return withVad(options.vad, meta.slug, (detector) =>
        transcribeSpeechOnly(
          (speech, o) => transcriber.transcribe(speech, o),
          detector,
          samples,
          filter === true ? {} : filter,
          request,
          languageName(request.language ?? "en"),
        ),
      );
    },
    async close() {
      await engine.close();
      await meta.close();
    },
  };
}

/** Runs `work` with the server's detector, or says why there is none. */
async function withVad<T>(vad: SpeechVad | undefined, slug: string, work: (detector: SpeechDetector) => Promise<T>): Promise<T> {
  if (!vad) throw new VadUnavailableError(`voice activity detection is not set up for ${slug}`);
  let detector: SpeechDetector;
  try {
    detector = await vad.detector();
  } catch (err) {
    throw new VadUnavailableError(`the voice activity detector could not be loaded (${err instanceof Error ? err.message : String(err)})`);
  }
  return work(detector);
}
