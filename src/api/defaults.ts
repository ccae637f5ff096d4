/** The API's defaults, in a module of their own: \`kiln serve\`'s help shows them without loading the server. */

/** Milliseconds a drain gives running requests before ending them: 30 s. */
export const DEFAULT_DRAIN_TIMEOUT_MS = 30_000;
