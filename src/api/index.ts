/** The HTTP API service. */
export { buildApp, DEFAULT_BODY_LIMIT, DEFAULT_DRAIN_TIMEOUT_MS, drainApp, type AppOptions, type DrainOptions } from "./app.js";
export { exposureWarning, isLoopbackHost } from "./exposure.js";
export { Lifecycle } from "./context.js";
export { ApiError, apiError, ERRORS, type ErrorBody, type ErrorCode } from "./errors.js";
export { KeyStore, hashKey, type ApiKeyInfo, type KeyVerifier, type StoredKey } from "./auth/key-store.js";
export type { AuthMode } from "./auth/auth.js";
export { KilnMetrics } from "./metrics/kiln-metrics.js";
export { sqliteUsageRecorder, type UsageRecorder } from "./usage.js";
export { SpooledUsageRecorder, usageSpoolPath, USAGE_SPOOL_FILE } from "./usage-spool.js";
export type { SseOptions } from "./sse.js";
