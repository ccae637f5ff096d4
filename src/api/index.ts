/** The HTTP API service. */
export { buildApp, DEFAULT_BODY_LIMIT, DEFAULT_DRAIN_TIMEOUT_MS, drainApp, type AppOptions, type DrainOptions } from "./app.js";
export { exposureWarning, isLoopbackHost } from "./exposure.js";
export { originProblem } from "./cors.js";
export { Lifecycle } from "./context.js";
export { ApiError, apiError, ERRORS, type ErrorBody, type ErrorCode } from "./errors.js";
export type { ApiKeyInfo, KeyVerifier, Metering, UsageRecord, UsageRecorder } from "./cloud-port.js";
export { checksKeys, type AuthMode } from "./auth/auth.js";
export type { TrackRecords, UsageDay, UsageReport } from "./console.js";
export { KilnMetrics } from "./metrics/kiln-metrics.js";
export type { SseOptions } from "./sse.js";
export { formatTranscript } from "./protocol/transcription-formats.js";
export { RESPONSE_FORMATS as TRANSCRIPT_FORMATS, type TranscriptionResponseFormat } from "./protocol/transcriptions.js";
export { billedSeconds } from "./routes/transcriptions.js";
