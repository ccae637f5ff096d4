/** The scheduler: who generates next on each model. The API talks to models only through this. */
export { EngineClosedError, OverloadedError } from "./errors.js";
export { ModelRegistry, type ModelState } from "./model-registry.js";
export { textModel, type ServedModel, type TextModelServeOptions } from "./served-model.js";
export { DEFAULT_MAX_WAITING, SerialEngine, type SerialEngineOptions } from "./serial-engine.js";
export { StopMatcher } from "./stop-matcher.js";
export { validateSamplingParams, type SamplingProblem } from "../runtime/sampling/index.js";
export { ChatTemplateError } from "../runtime/text/index.js";
export type * from "./types.js";
