/** A scored prompt as vLLM's `prompt_logprobs` gives it. */
import type { PromptTokenLogprob } from "../../scheduler/index.js";
import type { PromptLogprobs } from "../protocol/common.js";

/**
 * Per prompt token, null for the first (nothing came before it), else an entry per token id: the
 * `top` likeliest alternatives (ranked 1..top) and the prompt's own token with its rank.
 */
export function vllmPromptLogprobs(scored: readonly PromptTokenLogprob[], top: number): PromptLogprobs {
  return scored.map((e) => {
    if (e.logprob === null) return null;
    const entries = (e.top ?? []).slice(0, top).map((t, i) => [String(t.id), { logprob: t.logprob, rank: i + 1, decoded_token: t.token }] as const);
    return Object.fromEntries([...entries, [String(e.id), { logprob: e.logprob, rank: e.rank, decoded_token: e.token }]]);
  });
}
