/**
 * Who runs in the next step: pure decisions, no I/O and no tensors (the engine executes them).
 *
 * A step decodes one token for every running sequence, then spends what is left of the step's
 * token budget on prompt chunks of prefilling sequences, oldest first. A chunk always covers the
 * positions [k * prefillChunk, (k + 1) * prefillChunk) of its prompt (or the prompt's end), never a
 * piece cut to fit the budget: the same prompt is then computed the same way whatever else runs,
 * so a request's result does not depend on the load. Background prompts (embeddings) yield to
 * decoding: one chunk a step while sequences decode. Admission is first come first served: no
 * request overtakes the head of the queue, so none starves.
 */
import { DEFAULT_PREFILL_CHUNK, DEFAULT_STEP_TOKENS } from "../defaults.js";

/** Step limits. */
export interface StepLimits {
  /** Most tokens computed in one step, decode rows and prompt tokens together. Default 512. */
  stepTokens: number;
  /** Most prompt tokens in one prefill call (bounds its activation memory), in tokens. Default 256. */
  prefillChunk: number;
}

export { DEFAULT_PREFILL_CHUNK, DEFAULT_STEP_TOKENS };

/** A prefilling sequence as the planner sees it. */
export interface PrefillCandidate {
  /** Prompt positions already cached. */
  cached: number;
  /** Prompt length. */
  promptLength: number;
  /** False while it waits for something else (a sibling's prefill): it gets no chunk. */
  eligible: boolean;
  /**
   * Background work (an embedding): while sequences decode, background prompts get one chunk a step
   * between them. A step's time is its model calls', and a short input's call costs two or three
   * decode steps, so a large embedding request beside a chat slows the chat's tokens by about one
   * such call. Default false.
   */
  background?: boolean;
}

/** One prefill call: `count` prompt tokens of candidate `index`, from position `start`. */
export interface PrefillChunk {
  index: number;
  start: number;
  count: number;
  /** The chunk ends the prompt: its last position's logits are sampled. */
  last: boolean;
}

/** The work of one step. */
export interface StepPlan {
  /** Running sequences that decode one token each. */
  decodeRows: number;
  prefill: PrefillChunk[];
  /** Tokens computed in all: decode rows plus prompt tokens. */
  tokens: number;
}

/** Length of the next chunk of a prompt cached up to `cached`: up to the next multiple of `chunk`. */
export function nextChunk(cached: number, promptLength: number, chunk: number): number {
  const boundary = (Math.floor(cached / chunk) + 1) * chunk;
  return Math.min(boundary, promptLength) - cached;
}

/**
 * Plans one step. Candidates come oldest first; each takes whole chunks while they fit in the
 * budget left after decoding, and a younger one may use what an older one cannot. If nothing would
 * fit at all, the oldest eligible candidate still gets one chunk, so prefill always progresses.
 */
export function planStep(decodeRows: number, candidates: readonly PrefillCandidate[], limits: StepLimits): StepPlan {
  let budget = limits.stepTokens - decodeRows;
  let backgroundChunks = decodeRows > 0 ? 1 : Infinity;
  const prefill: PrefillChunk[] = [];
  const take = (index: number, start: number, count: number) => {
    prefill.push({ index, start, count, last: start + count === candidates[index].promptLength });
    budget -= count;
    if (candidates[index].background) backgroundChunks--;
  };
  for (let index = 0; index < candidates.length && budget > 0; index++) {
    const c = candidates[index];
    if (!c.eligible) continue;
    for (let at = c.cached; at < c.promptLength; at += prefill[prefill.length - 1].count) {
      const count = nextChunk(at, c.promptLength, limits.prefillChunk);
      if (count > budget) break;
      if (c.background && backgroundChunks === 0) break;
      take(index, at, count);
    }
  }
  if (prefill.length === 0) {
    const oldest = candidates.findIndex((c) => c.eligible && c.cached < c.promptLength);
    if (oldest !== -1) take(oldest, candidates[oldest].cached, nextChunk(candidates[oldest].cached, candidates[oldest].promptLength, limits.prefillChunk));
  }
  return { decodeRows, prefill, tokens: decodeRows + prefill.reduce((n, p) => n + p.count, 0) };
}

/** A queued request as admission sees it. */
export interface QueuedRequest {
  /** Choices still waiting for a slot (one slot each). */
  waitingChoices: number;
}

/**
 * How many sequences start now: choices of the queued requests in order, one per free slot, and
 * never one of a later request while an earlier one still has a waiting choice.
 */
export function admissions(queue: readonly QueuedRequest[], freeSlots: number): number {
  let admitted = 0;
  for (const q of queue) {
    const take = Math.min(q.waitingChoices, freeSlots - admitted);
    admitted += take;
    if (take < q.waitingChoices) break;
  }
  return admitted;
}

/**
 * Requests that would still wait after admitting what fits in `freeSlots`: the number a bounded
 * waiting queue compares with its limit.
 */
export function waitingAfterAdmission(queue: readonly QueuedRequest[], freeSlots: number): number {
  let free = freeSlots;
  let started = 0;
  for (const q of queue) {
    if (free <= 0) break;
    free -= q.waitingChoices;
    started++; // a request with at least one choice admitted no longer waits
  }
  return queue.length - started;
}
