/**
 * Sampling from a device's candidates instead of a whole row of logits: the GPU graph applies the
 * constraint mask and the logit adjustments (bias, penalties) itself and returns only each row's
 * top candidates, its top alternatives and its log-normalizer.
 */

/** One row (one position) of a device step's results. */
export interface CandidateRow {
  /** The candidates' token ids, by adjusted logit descending (lowest id first on ties). */
  ids: ArrayLike<number>;
  /** Their logits after the constraint mask and the adjustments ({@link LogitAdjustments}): what is sampled. */
  adjusted: ArrayLike<number>;
  /** Their logits after the mask only: what a log probability reports. */
  raw: ArrayLike<number>;
  /** log(sum(exp(logit))) over the whole vocabulary of the masked logits, before adjustments. */
  logNormalizer: number;
  /** The top alternatives of the masked logits before adjustments, descending (for top_logprobs). */
  topIds: ArrayLike<number>;
  topLogits: ArrayLike<number>;
}

/**
 * One sequence's logit adjustments as sparse entries, one per distinct token: its logit becomes
 * ((logit + bias) / repetition when positive, * repetition otherwise) - subtract, the order of
 * {@link SequenceSampler.sample}'s steps 1-3.
 */
export interface LogitAdjustments {
  ids: number[];
  bias: number[];
  repetition: number[];
  subtract: number[];
}

// A row of the vocabulary's width at -inf but for the candidates, for the dense sampler's draw;
// shared by every sampler of the thread (sampling is synchronous) and restored after each use.
let dense = new Float32Array(0);

/** A vocabulary-wide row holding only `row`'s adjusted candidates; `restore` puts it back to -inf. */
export function denseCandidates(row: CandidateRow, vocab: number): Float32Array {
  if (dense.length !== vocab) dense = new Float32Array(vocab).fill(-Infinity);
  for (let i = 0; i < row.ids.length; i++) dense[row.ids[i]] = row.adjusted[i];
  return dense;
}

export function restoreDense(row: CandidateRow): void {
  for (let i = 0; i < row.ids.length; i++) dense[row.ids[i]] = -Infinity;
}
