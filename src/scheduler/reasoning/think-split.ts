/**
 * Splits a reasoning model's answer into its reasoning and its content as it streams. Such models
 * (Qwen3, the DeepSeek-R1 distills) think between `<think>` and `</think>` before they answer; the
 * reasoning goes to the client apart from the answer (`reasoning_content`), as vLLM's and llama.cpp's
 * reasoning parsers give it, so that clients show, keep or drop it and tool calls are read from the
 * answer alone.
 *
 * The same splitter runs over streamed deltas and over a whole answer, so streamed pieces always add
 * up to the non-streamed message. Text that may still be the start of a tag is held back.
 */

export const THINK_OPEN = "<think>";
export const THINK_CLOSE = "</think>";

/** A piece of a choice's output: reasoning, or content (the answer). */
export interface ReasoningPiece {
  type: "reasoning" | "content";
  text: string;
}

type State =
  /** Before the answer's first visible text: a `<think>` here opens the reasoning. */
  | "start"
  | "reasoning"
  /** Right after `</think>`: the line breaks that separate it from the answer are not content. */
  | "after-reasoning"
  | "content";

export class ThinkSplitter {
  private state: State;
  private held = "";

  /** @param opened the prompt already opened the reasoning (the template ends with `<think>`), so the output starts inside it. */
  constructor(opened: boolean) {
    this.state = opened ? "reasoning" : "start";
  }

  push(text: string): ReasoningPiece[] {
    this.held += text;
    const out: ReasoningPiece[] = [];
    while (this.step(out, false));
    return out;
  }

  /** `push`, then with `end` also `finish`: the pieces of the output's next text, or of its last. */
  feed(text: string, end: boolean): ReasoningPiece[] {
    return end ? [...this.push(text), ...this.finish()] : this.push(text);
  }

  /** What was held back, at the end of the output (a partial tag is text). */
  finish(): ReasoningPiece[] {
    const out: ReasoningPiece[] = [];
    while (this.step(out, true));
    if (this.held !== "") emit(out, this.state === "reasoning" ? "reasoning" : "content", this.held);
    this.held = "";
    return out;
  }

  /** Advances over the held text; returns whether it should be called again. */
  private step(out: ReasoningPiece[], end: boolean): boolean {
    const text = this.held;
    switch (this.state) {
      case "start": {
        const lead = text.length - text.trimStart().length;
        const rest = text.slice(lead);
        if (rest.startsWith(THINK_OPEN)) {
          this.held = rest.slice(THINK_OPEN.length);
          this.state = "reasoning";
          return true;
        }
        if (!end && THINK_OPEN.startsWith(rest)) return false; // white space, or a tag begun
        this.state = "content";
        return true;
      }
      case "reasoning": {
        const close = text.indexOf(THINK_CLOSE);
        if (close >= 0) {
          emit(out, "reasoning", text.slice(0, close));
          this.held = text.slice(close + THINK_CLOSE.length);
          this.state = "after-reasoning";
          return true;
        }
        const keep = end ? 0 : partialTagLength(text, THINK_CLOSE);
        emit(out, "reasoning", text.slice(0, text.length - keep));
        this.held = text.slice(text.length - keep);
        return false;
      }
      case "after-reasoning": {
        // Line breaks only: an answer held to a grammar (a choice " yes") may itself start with a blank.
        const rest = text.replace(/^[\r\n]+/, "");
        if (rest === "" && !end) {
          this.held = "";
          return false;
        }
        this.held = rest;
        this.state = "content";
        return true;
      }
      case "content":
        emit(out, "content", text);
        this.held = "";
        return false;
    }
  }
}

/** Characters at the end of `text` that begin `tag` (and so may be its start). */
function partialTagLength(text: string, tag: string): number {
  for (let n = Math.min(tag.length - 1, text.length); n > 0; n--) {
    if (text.endsWith(tag.slice(0, n))) return n;
  }
  return 0;
}

function emit(out: ReasoningPiece[], type: ReasoningPiece["type"], text: string): void {
  if (text === "") return;
  const last = out[out.length - 1];
  if (last?.type === type) last.text += text;
  else out.push({ type, text });
}

/** A whole answer split at once: its reasoning (null when it has none) and its content. */
export function splitThinking(text: string, opened: boolean): { reasoning: string | null; content: string } {
  let reasoning: string | null = null;
  let content = "";
  for (const piece of new ThinkSplitter(opened).feed(text, true)) {
    if (piece.type === "reasoning") reasoning = (reasoning ?? "") + piece.text;
    else content += piece.text;
  }
  return { reasoning, content };
}

/** The part of an answer's text that is reasoning, its tags included, as the model wrote it ("" when it did not reason). */
export function reasoningPart(text: string, opened: boolean): string {
  if (!opened && !text.trimStart().startsWith(THINK_OPEN)) return "";
  const close = text.indexOf(THINK_CLOSE);
  return close < 0 ? text : text.slice(0, close + THINK_CLOSE.length);
}

/**
 * Whether a rendered prompt ends by opening the reasoning (DeepSeek-R1 distills' templates end with
 * `<think>\n`), so that the answer starts inside it. `decode` gives the text of token ids.
 */
export function promptOpensThinking(decode: (ids: readonly number[]) => string, promptIds: readonly number[]): boolean {
  // Enough tokens to hold the tag however it tokenizes (one added token on those models, several on others).
  return decode(promptIds.slice(-16)).trimEnd().endsWith(THINK_OPEN);
}
