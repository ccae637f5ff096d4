/** A segment's text tokens with their log-probabilities, in the reference API's `logprobs` shape. */
import type { Tokenizer } from "../../runtime/text/index.js";
import type { TranscriptTokenLogprob } from "./types.js";

/**
 * The text tokens of `tokens` (timestamps and other special tokens left out) with the log-probability
 * each was sampled with (`logprobs[i]` belongs to `tokens[i]`).
 */
export function textTokenLogprobs(tokenizer: Tokenizer, tokens: readonly number[], logprobs: readonly number[], endOfText: number): TranscriptTokenLogprob[] {
  const out: TranscriptTokenLogprob[] = [];
  tokens.forEach((id, i) => {
    if (id >= endOfText) return;
    const bytes = tokenizer.tokenBytes(id);
    out.push({ token: Buffer.from(bytes).toString("utf8"), logprob: logprobs[i] ?? 0, bytes: [...bytes] });
  });
  return out;
}
