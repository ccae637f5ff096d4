/** The artifact contract: files, manifest and the text graph's names and KV geometry. */
export { ARTIFACT_FILES } from "./files.js";
export { readManifest, readTokenizerSpec, type ArtifactManifest, type GraphIo, type ModelShape, type TokenizerSpec } from "./manifest.js";
export { checkTextGraphIo, KV_GROWTH_POSITIONS, kvBytesPerPosition, servedContextLength, TEXT_GRAPH, textGraphIo } from "./text-graph.js";
