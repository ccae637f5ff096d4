/**
 * Prompt-lookup drafts: a guess at a sequence's next tokens taken from its own tokens (prompt and
 * completion), for the engine to verify in one model call. When the last few tokens also occur
 * earlier, what followed them there is proposed (as vLLM's n-gram proposer and llama.cpp's lookup
 * decoding do). Answers that quote or rework their prompt (code edits, extraction, summaries with
 * quotes) repeat long runs of it, and the model then confirms several tokens per weight read.
 */

/** How drafts are looked up. */
export interface DraftLookup {
  /** Most tokens proposed per draft. */
  maxTokens: number;
  /** Shortest run of last tokens that must match earlier, in tokens. Default 3. */
  minMatch?: number;
  /** Longest run tried first, in tokens. Default 4. */
  maxMatch?: number;
}

export const DEFAULT_DRAFT_MIN_MATCH = 3;
export const DEFAULT_DRAFT_MAX_MATCH = 4;
/** A prediction is the answer's own expected text: a shorter run of it is enough to pick up where the output rejoins it. */
export const DEFAULT_PREDICTION_MIN_MATCH = 2;

/**
 * The tokens that followed the latest earlier occurrence of the sequence's last `n` tokens, for the
 * longest `n` from `maxMatch` down to `minMatch` that occurs; at most `maxTokens` of them. Empty
 * when nothing matches.
 */
export function lookupDraft(tokens: readonly number[], lookup: DraftLookup): number[] {
  const minMatch = Math.max(1, lookup.minMatch ?? DEFAULT_DRAFT_MIN_MATCH);
  const maxMatch = Math.max(minMatch, lookup.maxMatch ?? DEFAULT_DRAFT_MAX_MATCH);
  const end = tokens.length;
  if (lookup.maxTokens < 1) return [];
  for (let n = Math.min(maxMatch, end - 1); n >= minMatch; n--) {
    const at = latestEarlierMatch(tokens, n);
    if (at >= 0) return tokens.slice(at + n, Math.min(at + n + lookup.maxTokens, end));
  }
  return [];
}

/** Start of the latest occurrence of the last `n` tokens that ends before the last token, or -1. */
function latestEarlierMatch(tokens: readonly number[], n: number): number {
  const end = tokens.length;
  const last = tokens[end - 1];
  for (let start = end - n - 1; start >= 0; start--) {
    if (tokens[start + n - 1] !== last) continue;
    let k = 0;
    while (k < n - 1 && tokens[start + k] === tokens[end - n + k]) k++;
    if (k === n - 1) return start;
  }
  return -1;
}

/**
 * A draft from a predicted output (the reference API's predicted outputs): while the output so far
 * is the prediction's beginning, the prediction's next tokens; else what follows the output's last
 * tokens (the longest run of `maxMatch` down to `minMatch`) where they occur in the prediction, at the
 * occurrence nearest the output's own length (an edit shifts the rest of a file only a little).
 * Empty when neither holds.
 */
export function predictedDraft(prediction: readonly number[], output: readonly number[], lookup: DraftLookup): number[] {
  if (lookup.maxTokens < 1) return [];
  let follows = output.length < prediction.length;
  for (let i = 0; follows && i < output.length; i++) follows = output[i] === prediction[i];
  if (follows) return prediction.slice(output.length, output.length + lookup.maxTokens);
  const minMatch = Math.max(1, lookup.minMatch ?? DEFAULT_PREDICTION_MIN_MATCH);
  const maxMatch = Math.max(minMatch, lookup.maxMatch ?? DEFAULT_DRAFT_MAX_MATCH);
  for (let n = Math.min(maxMatch, output.length); n >= minMatch; n--) {
    let best = -1;
    for (let start = 0; start + n < prediction.length; start++) {
      let k = 0;
      while (k < n && prediction[start + k] === output[output.length - n + k]) k++;
      if (k === n && (best < 0 || Math.abs(start + n - output.length) < Math.abs(best + n - output.length))) best = start;
    }
    if (best >= 0) return prediction.slice(best + n, best + n + lookup.maxTokens);
  }
  return [];
}
