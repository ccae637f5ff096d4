/**
 * Provisioning: pull -> compile -> record -> load, above the compiler and the catalogue. The CLI
 * calls it; the compiler stays a transform from weights to an artifact folder.
 */
export { loadModel, type LoadModelOptions } from "./load-model.js";
export { NotCompilableError, provisionArtifact, type ProvisionOptions } from "./provision-artifact.js";
