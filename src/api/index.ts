/** The HTTP API service. */
export { buildApp, DEFAULT_BODY_LIMIT, DEFAULT_DRAIN_TIMEOUT_MS, drainApp, type AppOptions, type DrainOptions } from "./app.js";
export { exposureWarning, isLoopbackHost } from "./exposure.js";
export { Lifecycle } from "./context.js";
export { ApiError, apiError, ERRORS, type ErrorBody, type ErrorCode } from "./errors.js";
export { KeyStore, hashKey, type ApiKeyInfo, type KeyOptions, type KeyVerifier } from "./auth/key-store.js";
export { CloudMeter, DEFAULT_HEARTBEAT_MS, DEFAULT_ORPHAN_AFTER_MS, type CloudMeterOptions } from "./cloud/meter.js";
export { loadKeySecret } from "./cloud/key-secret.js";
export { formatNanoUsd, parseUsdToNano } from "./cloud/money.js";
export { isPostgresUrl, openCloudStore } from "./cloud/open-store.js";
export type { CloudStore, KeyListing, KeyRecord, UsageGrouping, UsageLine } from "./cloud/store.js";
export { MemoryLimits } from "./cloud/limits/memory-limits.js";
export { createRedisLimits } from "./cloud/limits/redis-limits.js";
export type { AuthMode } from "./auth/auth.js";
export { KilnMetrics } from "./metrics/kiln-metrics.js";
export { sqliteUsageRecorder, storeUsageLedger, type UsageRecorder } from "./usage.js";
export { SpooledUsageRecorder, usageSpoolPath, USAGE_SPOOL_FILE } from "./usage-spool.js";
export type { SseOptions } from "./sse.js";
