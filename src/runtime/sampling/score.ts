/**
 * Prompt scoring: how likely the model found each token that actually came next, as the raw
 * log-softmax of its logits, with the same arithmetic as a sampler's logprobs (so a scored token
 * and the same token sampled greedily report the same number, and a token that is the top choice
 * reports exactly its top entry's value).
 */
import { rawLogSumExp, rawTop } from "./sampler.js";

/** Scores of consecutive positions: only these numbers cross the worker boundary, never the logits. */
export interface PositionScores {
  /** Alternatives per position. */
  top: number;
  /** Per position: the log probability of the token that followed it. */
  logprobs: Float64Array;
  /** Per position, `top` ids, most likely first (lowest id first on ties). */
  topIds: Int32Array;
  /** Their log probabilities, in the same layout. */
  topLogprobs: Float64Array;
  /** Per position: the token that followed, ranked among the vocabulary by raw logit (1 = likeliest; ties share the better rank); 0 where not counted. */
  ranks: Int32Array;
}

/**
 * Scores `targets.length` positions whose logits are the consecutive rows of `logits` (each
 * `vocab` wide): row p is the distribution that `targets[p]` was drawn from. `ranks` counts each
 * target's rank too (one more pass over the row; 0 in {@link PositionScores.ranks} otherwise).
 */
export function scorePositions(logits: Float32Array, vocab: number, targets: ArrayLike<number>, top: number, ranks = false): PositionScores {
  const n = targets.length;
  const k = Math.min(top, vocab);
  const out: PositionScores = {
    top: k,
    logprobs: new Float64Array(n),
    topIds: new Int32Array(n * k),
    topLogprobs: new Float64Array(n * k),
    ranks: new Int32Array(n),
  };
  const ids = new Int32Array(k);
  const vals = new Float64Array(k);
  for (let p = 0; p < n; p++) {
    const row = logits.subarray(p * vocab, (p + 1) * vocab);
    const lse = rawLogSumExp(row);
    const target = row[targets[p]];
    out.logprobs[p] = target - lse;
    if (ranks) {
      let above = 0;
      for (let i = 0; i < vocab; i++) if (row[i] > target) above++;
      out.ranks[p] = above + 1;
    }
    const found = rawTop(row, ids, vals);
    for (let i = 0; i < k; i++) {
      // A row of NaNs keeps fewer than k: the rest read as impossible tokens.
      out.topIds[p * k + i] = i < found ? ids[i] : 0;
      out.topLogprobs[p * k + i] = i < found ? vals[i] - lse : -Infinity;
    }
  }
  return out;
}
