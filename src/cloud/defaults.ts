/** Cloud mode's defaults, in a module of their own: \`kiln serve\`'s help shows them without loading the stores. */

/** Milliseconds a replica may be silent before another charges its reservations: 15 s. */
export const DEFAULT_ORPHAN_AFTER_MS = 15_000;
