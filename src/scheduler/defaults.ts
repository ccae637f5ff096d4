/**
 * The scheduler's defaults, in a module of their own: \`kiln serve\`'s option declarations show them
 * in its help, which must not load the engine to do so.
 */

/** Sequences generating at once per model (its KV slots). */
export const DEFAULT_MAX_RUNNING = 16;
/**
 * Milliseconds a waiting request's priority takes to come one nearer a newcomer's: 30 s. A Batch API
 * line (priority 1) yields to clients' own requests that arrive within 30 s of it, and no longer,
 * so a steady stream of them delays a batch without stopping it.
 */
export const DEFAULT_PRIORITY_AGING_MS = 30_000;
/** Requests queued per model before new ones get 503. */
export const DEFAULT_MAX_WAITING = 64;
/** Tokens a step computes at most (decode rows and prompt chunks together), unless the chunk and slots need more. */
export const DEFAULT_STEP_TOKENS = 512;
/** Prompt tokens computed per model call. */
export const DEFAULT_PREFILL_CHUNK = 256;
/** Keep-alive of a model loaded on demand: 5 minutes, as Ollama's. */
export const DEFAULT_KEEP_ALIVE_MS = 5 * 60_000;
/**
 * Most prompt-lookup draft tokens checked per step when one sequence decodes alone: 0, off, as in
 * vLLM and llama.cpp's server, because a draft's check computes its positions together, whose int8
 * activation rounding differs from one position's: greedy answers may part where two tokens nearly tie.
 */
export const DEFAULT_DRAFT_TOKENS = 0;
/**
 * Most draft tokens checked per step from a request's predicted output: more than a lookup's,
 * since a prediction is usually right (a check of 9 positions costs about 1.8 decode steps here).
 */
export const PREDICTION_DRAFT_TOKENS = 8;
/**
 * Most drafts checked in one step: each check is a model call of its own, beside the step's one
 * decode call for the other sequences, so several requests with predictions draft at once while a
 * batch of many does not turn into as many calls.
 */
export const MAX_DRAFT_CHECKS_PER_STEP = 4;
/** Steps a sequence beside others decodes without checking its prediction after a check that confirmed less than half its draft. */
export const CHECKS_HELD_STEPS = 8;
/**
 * How embeddings pool an input's final hidden states: the last position's, which alone has read
 * the whole input in a causal model, as vLLM, Ollama and llama.cpp's bindings embed with a
 * generative model (Qwen3-Embedding and the other last-token embedders are trained for it).
 */
export const DEFAULT_POOLING = "last" as const;
