/**
 * Provisioning: pull -> compile -> record -> load, above the compiler and the catalogue. The CLI
 * calls it; the compiler stays a transform from weights to an artifact folder.
 */
export { loadModel, type LoadModelOptions } from "./load-model.js";
export { ArtifactIntegrityError, NotCompilableError, provisionArtifact, type ProvisionOptions, SourceHashError, WrongKindError } from "./provision-artifact.js";
export { DEFAULT_SPEECH_SLOTS, loadSpeechModel, type LoadSpeechModelOptions } from "./load-speech-model.js";
