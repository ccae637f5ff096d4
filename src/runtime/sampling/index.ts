export {
  MAX_ALLOWED_TOKEN_IDS,
  MAX_BAD_WORD_TOKENS,
  MAX_BAD_WORDS,
  MAX_STOP_TOKEN_IDS,
  REPETITION_PENALTY_LIMITS,
  SAMPLING_LIMITS,
  SamplingParamsError,
  resolveSamplingParams,
  usesPromptIds,
  validateSamplingParams,
  type ResolvedSamplingParams,
  type SamplingParams,
  type SamplingProblem,
  type ValidateSamplingOptions,
} from "./params.js";
export { SequenceSampler, argmax, type SampleResult, type SequenceSamplerOptions, type TokenIdLogprob } from "./sampler.js";
export { scorePositions, type PositionScores } from "./score.js";
export { SplitMix64, Xoshiro128ss, randomSeed } from "./prng.js";
export type { CandidateRow, LogitAdjustments } from "./candidates.js";
