/** The artifact contract: files, manifest and the text graph's names and KV geometry. */
export { ARTIFACT_FILES } from "./files.js";
export { readManifest, readTokenizerSpec, type ArtifactFileRecord, type ArtifactManifest, type GraphIo, type ModelShape, type SlidingWindowShape, type TokenizerSpec } from "./manifest.js";
export {
  checkTextGraphIo,
  DEFAULT_KV_AVAILABLE_SHARE,
  DEFAULT_KV_TOTAL_SHARE,
  defaultKvMemoryBytes,
  KV_GROWTH_POSITIONS,
  kvBytesPerPosition,
  type MemoryAvailability,
  NO_POSITION,
  servedContextLength,
  slidingCacheCapacity,
  TEXT_GRAPH,
  textGraphIo,
} from "./text-graph.js";
export {
  checkSpeechGraphIo,
  HOP_LENGTH,
  N_FFT,
  NotSpeechArtifactError,
  readSpeechManifest,
  SAMPLE_RATE,
  SPEECH_FILES,
  SPEECH_GRAPH,
  type SpeechArtifactManifest,
  type SpeechManifest,
  type SpeechManifestPart,
  speechGraphIo,
  TIME_PRECISION,
  type WhisperShape,
  type WhisperTokens,
  WINDOW_FRAMES,
  WINDOW_SAMPLES,
} from "./speech-graph.js";
export { type ArtifactProblem, checkArtifactSizes, describeProblems, sha256OfFile, UNLISTED_FILES, VERIFIED_STAMP, verifyArtifact, type VerifyOptions, writeVerifiedStamp } from "./verify.js";
