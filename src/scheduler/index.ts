/** The scheduler: who generates next on each model. The API talks to models only through this. */
export { EngineClosedError, OverloadedError } from "./errors.js";
export { ModelRegistry, type ModelState } from "./model-registry.js";
export { textModel, type ServedModel, type TextModelServeOptions } from "./served-model.js";
export { DEFAULT_MAX_WAITING, SerialEngine, type SerialEngineOptions } from "./serial-engine.js";
export { BatchEngine, DEFAULT_MAX_RUNNING, type BatchEngineOptions } from "./batch-engine.js";
export { DEFAULT_PREFILL_CHUNK, DEFAULT_STEP_TOKENS } from "./scheduler.js";
export type { PrefixReuse } from "./kv-slots.js";
export type { EngineObserver, EngineStatsReader, EngineStatsSnapshot, HistogramSnapshot, StepRecord } from "./engine-stats.js";
export { StopMatcher } from "./stop-matcher.js";
export { validateSamplingParams, type SamplingProblem } from "../runtime/sampling/index.js";
export { ChatTemplateError } from "../runtime/text/index.js";
export type * from "./types.js";
