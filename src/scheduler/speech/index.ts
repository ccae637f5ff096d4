/** Speech in the scheduler: the speech engine (who runs), the transcriber (Whisper's window loop) and the served speech model. */
export { serveSpeechModel, serveSpeechRunner, type SpeechServeOptions, type SpeechVad } from "./served-speech-model.js";
export { findSpeech, restoreTimes, type SpeechDetector, transcribeSpeechOnly, VadUnavailableError } from "./vad-filter.js";
export { SpeechEngine, type SpeechEngineOptions, type SpeechEngineStats, type SpeechRunner } from "./speech-engine.js";
export { compressionRatio, Transcriber, WHISPER_DEFAULTS } from "./transcriber.js";
export { joinSegmentTexts, splitWindow } from "./segments.js";
export type * from "./types.js";
