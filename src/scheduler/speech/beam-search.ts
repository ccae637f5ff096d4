/**
 * Beam search bookkeeping, as CTranslate2 runs it for faster-whisper: every step ranks the alive
 * hypotheses' continuations by cumulative log-probability and keeps the best `2 × beamSize`; of
 * the first `beamSize`, those that end (<|endoftext|>, or the last allowed step) are finished and
 * their places go to the next unfinished candidates; the search stops once `beamSize × patience`
 * hypotheses have finished, and the best of them is the one with the highest cumulative
 * log-probability divided by (its length ^ lengthPenalty). Ties go to the earlier beam, then the
 * lower token id. No model calls here: the caller runs the decoder for the alive hypotheses.
 */

export interface BeamSearchOptions {
  /** Hypotheses kept alive per step (the decoder rows a step takes). */
  beamSize: number;
  /** Finished hypotheses to collect before stopping, as a multiple of `beamSize`. faster-whisper's default 1. */
  patience: number;
  /** Exponent of the length in the final ranking: score = sum of log-probabilities / length^this. faster-whisper's default 1. */
  lengthPenalty: number;
  endOfText: number;
}

export interface Hypothesis {
  /** Tokens chosen after the prompt; a finished hypothesis leaves its <|endoftext|> out. */
  tokens: number[];
  /** Log-probability of each chosen token, <|endoftext|>'s included when it ended the hypothesis. */
  logprobs: number[];
  /** Sum of `logprobs`. */
  score: number;
}

/** One alive hypothesis's continuations, likeliest first (what the decoder row reports). */
export interface Continuations {
  tokens: number[];
  logprobs: number[];
}

interface Candidate {
  beam: number;
  token: number;
  logprob: number;
  score: number;
}

export class BeamSearch {
  /** Hypotheses to extend next, in beam order (row order). */
  alive: Hypothesis[] = [{ tokens: [], logprobs: [], score: 0 }];
  /** For each alive hypothesis, the index of the hypothesis it extends in the previous `alive`. */
  parents: number[] = [0];
  readonly finished: Hypothesis[] = [];
  done = false;
  private readonly maxFinished: number;

  constructor(private readonly options: BeamSearchOptions) {
    if (!Number.isInteger(options.beamSize) || options.beamSize < 1) throw new RangeError(`a beam holds at least 1 hypothesis, not ${options.beamSize}`);
    this.maxFinished = Math.round(options.beamSize * options.patience);
  }

  /** How many continuations each alive hypothesis must report per step. */
  get candidatesPerStep(): number {
    return 2 * this.options.beamSize;
  }

  /**
   * Takes the alive hypotheses' continuations (`continuations[b]` for `alive[b]`) and moves on one
   * step; `last` marks the step after which no hypothesis may grow (every kept one finishes).
   */
  step(continuations: readonly Continuations[], last: boolean): void {
    if (this.done) throw new Error("the beam search is over");
    if (continuations.length !== this.alive.length) throw new RangeError(`${this.alive.length} hypotheses are alive, ${continuations.length} continued`);
    const { beamSize, endOfText } = this.options;
    const ranked = this.rank(continuations);
    const next: Candidate[] = [];
    let spare = beamSize;
    for (let k = 0; k < Math.min(beamSize, ranked.length); k++) {
      const c = ranked[k];
      let kept = c;
      if (c.token === endOfText || last) {
        this.finished.push(this.extend(c, c.token !== endOfText));
        // The place goes to the next candidate that does not end (it stays with this one when none is left).
        for (let j = spare; j < ranked.length; j++) {
          if (ranked[j].token === endOfText) continue;
          kept = ranked[j];
          spare = j + 1;
          break;
        }
      }
      next.push(kept);
    }
    if (last || this.finished.length >= this.maxFinished) {
      this.done = true;
      return;
    }
    this.alive = next.map((c) => this.extend(c, true));
    this.parents = next.map((c) => c.beam);
  }

  /** The best finished hypothesis by length-normalized score (the first one on a tie). */
  best(): Hypothesis {
    if (this.finished.length === 0) throw new Error("no hypothesis has finished");
    let best = this.finished[0];
    let bestScore = this.normalized(best);
    for (const h of this.finished.slice(1)) {
      const s = this.normalized(h);
      if (s > bestScore) [best, bestScore] = [h, s];
    }
    return best;
  }

  /** score / length^lengthPenalty; an empty hypothesis ranks last. */
  normalized(h: Hypothesis): number {
    const length = h.tokens.length;
    if (length === 0) return this.options.lengthPenalty === 0 ? h.score : -Infinity;
    return h.score / Math.pow(length, this.options.lengthPenalty);
  }

  private rank(continuations: readonly Continuations[]): Candidate[] {
    const all: Candidate[] = [];
    continuations.forEach((c, beam) => {
      for (let i = 0; i < c.tokens.length; i++) {
        all.push({ beam, token: c.tokens[i], logprob: c.logprobs[i], score: this.alive[beam].score + c.logprobs[i] });
      }
    });
    all.sort((a, b) => b.score - a.score || a.beam - b.beam || a.token - b.token || 0);
    return all.slice(0, this.candidatesPerStep);
  }

  private extend(c: Candidate, withToken: boolean): Hypothesis {
    const parent = this.alive[c.beam];
    return {
      tokens: withToken ? [...parent.tokens, c.token] : parent.tokens,
      logprobs: [...parent.logprobs, c.logprob],
      score: c.score,
    };
  }
}
