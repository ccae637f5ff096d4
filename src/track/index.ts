/**
 * The optimization track: per model, a job (`compiler-jobs/<slug>.json`) says what to try and how
 * to measure it; a run measures candidates around the current best, records every measurement,
 * and promotes a candidate that is faster beyond noise within the quality budget. A layer above
 * provision: it builds and loads candidates through provision, serves them (scheduler) and records
 * (catalogue); only cli imports it.
 */
export { builtOnLoser, generateCandidates, type CandidateOptions } from "./candidates.js";
export { trackHistory, trend, sparkline, type HistoryCandidate, type HistoryMetrics, type TrackHistory, type TrendPoint } from "./history.js";
export {
  batchMetric,
  jobPath,
  jobsDir,
  JobError,
  loadJob,
  loadJobs,
  parseJob,
  type PromotionPolicy,
  type QualityBudget,
  type SearchSpace,
  type TrackJob,
  type Workload,
} from "./job.js";
export {
  assertSameDevice,
  CrossDeviceComparisonError,
  GPU_DEFAULT_SETTINGS,
  type GpuPresence,
  type GpuProbe,
  probeHardwareGpu,
  skippedReason,
  wasSkipped,
} from "./devices.js";
export { createModelMeasurer, type ModelMeasurerOptions } from "./measure.js";
export { kilnBin, spawnTrackRun, startNightly, TRACK_NICENESS, type NightlyOptions, type SpawnTrackOptions } from "./nightly.js";
export { PROBE_TEXT, PROBE_TEXT_SHA256 } from "./probe-text.js";
export {
  claimRun,
  finishCandidate,
  latestRecordOfArtifact,
  listCandidates,
  losingChanges,
  lossSize,
  losingSettings,
  lost,
  markAbandoned,
  RunInProgressError,
  startCandidate,
  trackedSlugs,
  triedSettings,
  type CandidateRecord,
  type Verdict,
} from "./records.js";
export {
  gain,
  judge,
  meanMetrics,
  medianMetrics,
  qualityProblem,
  relativeSpread,
  sampleSpread,
  tooNoisy,
  winThreshold,
  type Judgement,
  type PromotionRule,
  type QualityMetrics,
  type SpeedMetrics,
} from "./rule.js";
export {
  runTrack,
  TimeSliceError,
  type Measurement,
  type MeasureRequest,
  type Measurer,
  type PairedMeasurement,
  type RunTrackOptions,
  type TrackRunSummary,
} from "./run.js";
export {
  compileOptionsOf,
  compileOptionsOfManifest,
  completeSettings,
  DEFAULT_SETTINGS,
  describeChange,
  measuredThreads,
  servingSettings,
  settingsKey,
  SETTING_NAMES,
  type TrackSettings,
} from "./settings.js";
