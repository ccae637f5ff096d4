/**
 * Finds the tool calls a choice completes in its raw output, so that the engine can end the choice
 * when it starts writing one of them again: held to a call constraint, a small model that has made
 * its call tends to make the very same call again and again until max_tokens, and a call that
 * repeats an earlier one of the same answer exactly is never worth making.
 *
 * A call is the JSON object that begins with `{"name": "` (every dialect writes calls so, and the
 * constraint writes that head itself), up to its closing brace.
 */

const HEAD = '{"name": "';

export class CallTexts {
  private text = "";
  /** Where the next search or scan starts. */
  private at = 0;
  /** The call being read: where it began, and the JSON nesting so far; null outside a call. */
  private call: { start: number; depth: number; inString: boolean; escaped: boolean } | null = null;

  /** Feeds the next piece of raw output; returns the whole text of each call it completes. */
  push(piece: string): string[] {
    this.text += piece;
    const done: string[] = [];
    for (;;) {
      if (this.call === null) {
        const found = this.text.indexOf(HEAD, this.at);
        if (found < 0) {
          // Keep only what may still be the start of a head.
          const keep = Math.min(HEAD.length - 1, this.text.length);
          this.text = this.text.slice(this.text.length - keep);
          this.at = 0;
          return done;
        }
        this.call = { start: found, depth: 0, inString: false, escaped: false };
        this.at = found;
      }
      const c = this.call;
      let i = this.at;
      let end = -1;
      for (; i < this.text.length; i++) {
        const ch = this.text[i];
        if (c.inString) {
          if (c.escaped) c.escaped = false;
          else if (ch === "\\") c.escaped = true;
          else if (ch === '"') c.inString = false;
        } else if (ch === '"') c.inString = true;
        else if (ch === "{" || ch === "[") c.depth++;
        else if ((ch === "}" || ch === "]") && --c.depth === 0) {
          end = i + 1;
          break;
        }
      }
      if (end < 0) {
        this.at = i;
        return done;
      }
      done.push(this.text.slice(c.start, end));
      this.text = this.text.slice(end);
      this.at = 0;
      this.call = null;
    }
  }
}
