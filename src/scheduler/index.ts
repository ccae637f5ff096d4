/**
 * The scheduler: who generates next on each model. Two parts: the serving facade (`serving/`: the
 * registry of models, the served model, prompt rendering), which is all the API sees; and the
 * engine (`engine/`: the batch engine, its step planner, KV slots and sequences).
 */
export { EngineClosedError, ModelTooLargeError, OverloadedError } from "./errors.js";
export { ComputeGate, type ComputeGateOptions, type GateLane } from "./compute-gate.js";
export {
  DEFAULT_KEEP_ALIVE_MS,
  DEFAULT_LOAD_WAIT_MS,
  DEFAULT_RETIRE_GRACE_MS,
  ModelRegistry,
  type AnyServedModel,
  type DemandedModel,
  type ModelAvailability,
  type ModelLoader,
  type ModelRegistryOptions,
  type ModelState,
  type ModelSwitch,
} from "./serving/model-registry.js";
export { type ChatOptions, type EmbeddingSupport, hostKvMemoryBytes, serveLoadedModel, type ServedModel, type ServeOptions } from "./serving/served-model.js";
export { benchPrompt, measureThroughput, type DecodeFigures, type ThroughputFigures, type ThroughputPlan } from "./serving/throughput.js";
export { type ChatEnding, chatPromptIds, encodePrompt, type InfillFile, type InfillRequest, renderChat, type SpecialTokenMode } from "./serving/prompt.js";
export { BatchEngine, DEFAULT_MAX_RUNNING, DEFAULT_MAX_WAITING, type BatchEngineOptions } from "./engine/batch-engine.js";
export { DEFAULT_PREFILL_CHUNK, DEFAULT_STEP_TOKENS } from "./engine/step-planner.js";
export type { PrefixReuse } from "./engine/kv-slots.js";
export type { EngineObserver, EngineStatsReader, EngineStatsSnapshot, HistogramSnapshot, StepRecord } from "./engine/engine-stats.js";
export { Histogram } from "./engine/histogram.js";
export type { StepRunner } from "./engine/step-runner.js";
export { StopMatcher } from "./engine/stop-matcher.js";
export { validateSamplingParams, type SamplingProblem } from "../runtime/sampling/index.js";
export { ChatTemplateError } from "../runtime/text/index.js";
export type * from "./types.js";
export type * from "./speech/types.js";
export { joinSegmentTexts } from "./speech/segments.js";
export { VadUnavailableError } from "./speech/vad-filter.js";
export {
  measureSpeechThroughput,
  type SpeechDecodeFigures,
  type SpeechThroughputFigures,
  type SpeechThroughputPlan,
  windowSeconds,
} from "./speech/throughput.js";
export type { ToolCallParser, ToolFunction, ToolOutputPiece, ToolUse } from "./tools/types.js";
export {
  ThinkSplitter,
  splitThinking,
  reasoningPart,
  promptOpensThinking,
  thinkingFirst,
  thinkingBudget,
  THINK_OPEN,
  THINK_CLOSE,
  type ReasoningPiece,
} from "./reasoning/index.js";
export { CallParser, chooseToolDialect, toolConstraint, type CallSyntax, type ToolDialect } from "./tools/index.js";
