/** The speech front end: decoding uploads with ffmpeg, and Whisper's log-mel features. */
export { AudioDecodeError, type AudioProblem, decodeAudio, type DecodeOptions, ffmpegAvailable, prepareFfmpeg } from "./decode.js";
export { ComplexFft, RealFft } from "./fft.js";
export { contentFrames, type LogMel, logMel, logMelAsync, melFrameCount, melWindow } from "./log-mel.js";
export { melFilterBank, type MelFilter } from "./mel-filters.js";
export { SileroVad, VAD_CONTEXT, VAD_WINDOW, VadModelError } from "./vad.js";
export { collectSpeech, type SpeechChunk, SpeechTimeMap, speechTimestamps, VAD_DEFAULTS, type VadOptions } from "./speech-timestamps.js";
