/** The speech runtime: Whisper's two graphs on a worker thread, its decoding rules and word alignment. */
export { LoadedSpeechModel } from "./loaded-speech-model.js";
export { SpeechWorker } from "./speech-worker.js";
export { languageName, LANGUAGE_NAMES } from "./languages.js";
export type * from "./speech-protocol.js";
