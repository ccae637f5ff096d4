/** The API's defaults, in a module of their own: \`kiln serve\`'s help shows them without loading the server. */

/** Milliseconds a drain gives running requests before ending them: 30 s. */
export const DEFAULT_DRAIN_TIMEOUT_MS = 30_000;

/** Most requests of all batches answered at once: 8 (the engine's other slots stay free for interactive requests). */
export const DEFAULT_BATCH_CONCURRENCY = 8;
