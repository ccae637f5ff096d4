/**
 * Provisioning: pull -> compile -> record -> load, above the compiler and the catalogue. The CLI
 * calls it; the compiler stays a transform from weights to an artifact folder.
 */
export { loadModel, type LoadModelOptions } from "./load-model.js";
export { OnDemandLoader, type OnDemandLoaderOptions } from "./on-demand-loader.js";
export { ArtifactIntegrityError, NotCompilableError, provisionArtifact, type ProvisionOptions, SourceHashError, WrongKindError } from "./provision-artifact.js";
export { DEFAULT_BEAM_SIZE, DEFAULT_SPEECH_SLOTS, loadSpeechModel, type LoadSpeechModelOptions, loadSpeechWorker } from "./load-speech-model.js";
export { DEFAULT_PROMOTION_POLL_MS, PromotionWatcher, type PromotionWatcherOptions, type SwitchLog } from "./live-switch.js";
export { PromotedArtifactError, promotedArtifactDir, type PromotedSettings, promotedSettings } from "./promoted-artifact.js";
export { checkLocalGguf, isLocalModelPath, loadLocalGguf, type LocalGguf, LocalModelError, localGgufSlug, provisionLocalGguf } from "./local-gguf.js";
