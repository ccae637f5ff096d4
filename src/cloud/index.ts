/**
 * Cloud mode: API keys, per-key limits, the reservations and the usage ledger, and the stores that
 * keep them. It knows nothing of HTTP: the API's key check and admission (`api/cloud-port.ts`)
 * take these objects as they are, and `kiln serve` wires them.
 */
export { hashKey, KeyStore, NO_LIMITS, type ApiKeyInfo, type KeyOptions } from "./keys/key-store.js";
export { loadKeySecret } from "./keys/key-secret.js";
export type { KeyLimits, LimitCounters } from "./limits/limiter.js";
export { MemoryLimits } from "./limits/memory-limits.js";
export { createRedisLimits } from "./limits/redis-limits.js";
export { CloudMeter, DEFAULT_HEARTBEAT_MS, DEFAULT_ORPHAN_AFTER_MS, type CloudMeterOptions } from "./meter.js";
export { formatNanoUsd, parseUsdToNano } from "./money.js";
export { isPostgresUrl, openCloudStore } from "./store/open-store.js";
export type { CloudStore, KeyListing, KeyRecord, SharedStores, UsageGrouping, UsageLine } from "./store/store.js";
export { sqliteUsageRecorder, storeUsageLedger, type UsageRecorder } from "./usage.js";
export { SpooledUsageRecorder, usageSpoolPath, USAGE_SPOOL_FILE } from "./usage-spool.js";
