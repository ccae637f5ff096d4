/**
 * "The same as alone, up to rounding": how batched results are compared with solo runs. A prompt is
 * always prefilled one sequence per call, so a request's first token is exactly what it gets alone;
 * decode rows share model calls, and on some CPUs onnxruntime's int8-activation kernels round a row
 * differently depending on how many rows share the call (up to about one logit on this project's
 * AMD EPYC machines), and a rounding flip compounds over the layers. So the batched tokens must
 * equal the solo run's until a near-tie, and there the batched token must be one of the solo run's
 * close alternatives. A request read from the wrong slot, a bad cache copy or a mixed-up sampler
 * gives unrelated distributions and fails.
 */

/** One generated token with its log-probability and the most likely alternatives at its position. */
export interface TokenStep {
  token: string;
  logprob: number;
  top: ReadonlyArray<{ token: string; logprob: number }>;
}

/** Nats: how far a log-probability may move under batching, and how close a near-tie is. */
export const ROUNDING_NATS = 1.5;

/** Why `batched` is not `alone` up to rounding, or null when it is. */
export function beyondRounding(alone: readonly TokenStep[], batched: readonly TokenStep[]): string | null {
  let k = 0;
  for (; k < alone.length && k < batched.length && alone[k].token === batched[k].token; k++) {
    const moved = Math.abs(alone[k].logprob - batched[k].logprob);
    if (moved > ROUNDING_NATS) return `token ${k} (${JSON.stringify(alone[k].token)}): log-probability moved by ${moved.toFixed(2)} nats`;
  }
  if (k === alone.length || k === batched.length) return null; // the same, or one ended (its end token carries no log-probability): nothing to weigh
  const alt = alone[k].top.find((t) => t.token === batched[k].token);
  if (!alt) return `token ${k}: ${JSON.stringify(batched[k].token)} is not among the solo run's top ${alone[k].top.length}`;
  const behind = alone[k].logprob - alt.logprob;
  if (behind > ROUNDING_NATS) return `token ${k}: ${JSON.stringify(batched[k].token)} trails the solo choice by ${behind.toFixed(2)} nats`;
  return null;
}

/** The steps of a chat answer's `logprobs.content` (streamed chunks concatenated, or one message). */
export function chatSteps(content: ReadonlyArray<{ token: string; logprob: number; top_logprobs: Array<{ token: string; logprob: number }> }>): TokenStep[] {
  return content.map((c) => ({ token: c.token, logprob: c.logprob, top: c.top_logprobs }));
}
