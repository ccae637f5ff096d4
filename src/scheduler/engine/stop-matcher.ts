/**
 * Stop strings over streamed text. Text that could be the start of a stop string is held back
 * until the next piece shows whether it is; a full match ends the stream and neither the stop
 * string nor anything after it is ever released.
 */
export interface StopMatch {
  /** Text safe to emit now. */
  text: string;
  /** True once a stop string has matched (the stream is over). */
  stopped: boolean;
}

export class StopMatcher {
  private readonly stops: string[];
  private held = "";
  private done = false;
  /** Characters released so far. */
  private released = 0;
  /** The stop string that matched; null before a match. */
  matched: string | null = null;

  /**
   * @param stops stop strings; empty ones are ignored.
   * @param keep a matched stop string is released with the text before it (vLLM's `include_stop_str_in_output`). Default false.
   */
  constructor(
    stops: readonly string[] = [],
    private readonly keep = false,
  ) {
    this.stops = [...new Set(stops.filter((s) => s.length > 0))];
  }

  /** Adds a stop string from now on (text already released is not searched again). */
  add(stop: string): void {
    if (stop.length > 0 && !this.stops.includes(stop)) this.stops.push(stop);
  }

  /** Characters of text released so far (offsets into the generated text). */
  get emitted(): number {
    return this.released;
  }

  /** Feeds the next piece of text; returns what can be released. */
  push(piece: string): StopMatch {
    if (this.done) return { text: "", stopped: true };
    const text = this.held + piece;
    if (this.stops.length === 0) return this.release(text, "");
    let first = -1;
    let end = -1;
    for (const stop of this.stops) {
      const at = text.indexOf(stop);
      // At one place the longest stop string is the match, so that `keep` releases all of it.
      if (at !== -1 && (first === -1 || at < first || (at === first && at + stop.length > end))) {
        [first, end] = [at, at + stop.length];
        this.matched = stop;
      }
    }
    if (first !== -1) {
      this.done = true;
      this.held = "";
      const out = text.slice(0, this.keep ? end : first);
      this.released += out.length;
      return { text: out, stopped: true };
    }
    const keep = this.partialSuffix(text);
    return this.release(text.slice(0, text.length - keep), text.slice(text.length - keep));
  }

  /** Feeds the next piece of text without looking for stop strings in it: all of it is released. */
  pass(piece: string): StopMatch {
    if (this.done) return { text: "", stopped: true };
    return this.release(this.held + piece, "");
  }

  /** Ends the stream without a match: releases the held-back text. */
  flush(): string {
    if (this.done) return "";
    this.done = true;
    const out = this.held;
    this.held = "";
    this.released += out.length;
    return out;
  }

  private release(out: string, held: string): StopMatch {
    this.held = held;
    this.released += out.length;
    return { text: out, stopped: false };
  }

  /** Length of the longest suffix of `text` that is a proper prefix of some stop string. */
  private partialSuffix(text: string): number {
    let best = 0;
    for (const stop of this.stops) {
      for (let n = Math.min(stop.length - 1, text.length); n > best; n--) {
        if (text.endsWith(stop.slice(0, n))) {
          best = n;
          break;
        }
      }
    }
    return best;
  }
}
