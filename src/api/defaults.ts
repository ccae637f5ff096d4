/** The API's defaults, in a module of their own: \`kiln serve\`'s help shows them without loading the server. */

/** Milliseconds a drain gives running requests before ending them: 30 s. */
export const DEFAULT_DRAIN_TIMEOUT_MS = 30_000;

/** What a Batch API request pays in cloud mode, as a fraction of the model's prices: 0.5, the reference API's batch discount. */
export const DEFAULT_BATCH_PRICE = 0.5;

/** Engine priority of a batch's requests that name none: behind clients' own requests (priority 0) while they wait for a slot. */
export const BATCH_PRIORITY = 1;

/** Most requests of all batches answered at once: 8 (the engine's other slots stay free for interactive requests). */
export const DEFAULT_BATCH_CONCURRENCY = 8;
