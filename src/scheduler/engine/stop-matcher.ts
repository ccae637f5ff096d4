/**
 * Stop strings over streamed text. Text that could be the start of a stop string is held back
 * until the next piece shows whether it is; a full match ends the stream and neither the stop
 * string nor anything after it is ever released.
 *
 * With a minimum indentation, a line that starts after a line break is held back until its first
 * character after spaces and tabs shows its indentation; one indented less ends the stream after its
 * indentation (llama.cpp's `n_indent`, for code completion that stops where a block ends).
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
  /** The stream ended at a line indented less than the minimum. */
  dedented = false;
  /** The released text ends with a line break: what comes next starts a line. */
  private afterBreak = false;

  /**
   * @param stops stop strings; empty ones are ignored.
   * @param keep a matched stop string is released with the text before it (vLLM's `include_stop_str_in_output`). Default false.
   * @param minIndent spaces and tabs a line after a line break needs, else the stream ends there. Default 0: none.
   */
  constructor(
    stops: readonly string[] = [],
    private readonly keep = false,
    private readonly minIndent = 0,
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
    const lines = this.minIndent > 0 ? this.scanLines(text) : { cut: -1, open: text.length };
    if (this.stops.length === 0 && lines.cut === -1) return this.release(text.slice(0, lines.open), text.slice(lines.open));
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
    if (lines.cut !== -1 && (first === -1 || lines.cut <= first)) {
      this.done = true;
      this.held = "";
      this.matched = null;
      this.dedented = true;
      const out = text.slice(0, lines.cut);
      this.released += out.length;
      return { text: out, stopped: true };
    }
    if (first !== -1) {
      this.done = true;
      this.held = "";
      const out = text.slice(0, this.keep ? end : first);
      this.released += out.length;
      return { text: out, stopped: true };
    }
    const keep = Math.max(this.partialSuffix(text), text.length - lines.open);
    return this.release(text.slice(0, text.length - keep), text.slice(text.length - keep));
  }

  /**
   * The lines of `text` that start after a line break: `cut`, where the first one indented less
   * than the minimum ends (after its indentation; -1 when none does), and `open`, where the last one
   * starts when nothing but spaces and tabs has come of it yet (its indentation is still unknown;
   * `text.length` when there is none).
   */
  private scanLines(text: string): { cut: number; open: number } {
    const starts = this.afterBreak ? [0] : [];
    for (let i = text.indexOf("\n"); i !== -1; i = text.indexOf("\n", i + 1)) starts.push(i + 1);
    for (const start of starts) {
      let j = start;
      while (j < text.length && (text[j] === " " || text[j] === "\t")) j++;
      if (j === text.length) return { cut: -1, open: start };
      if (j - start < this.minIndent) return { cut: j, open: text.length };
    }
    return { cut: -1, open: text.length };
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
    if (out.length > 0) this.afterBreak = out.endsWith("\n");
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
