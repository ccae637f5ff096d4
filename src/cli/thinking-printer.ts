/**
 * A reasoning model's answer at the command line, as `ollama run` prints one: the thinking between
 * "Thinking..." and "...done thinking." on its own stream (stderr, so that stdout holds the answer
 * alone), then the answer.
 */
import { ThinkSplitter, type ReasoningPiece } from "../scheduler/index.js";

export const THINKING_START = "Thinking...\n";
export const THINKING_END = "\n...done thinking.\n\n";

/** Where the thinking goes: a stream, or nowhere (`--hide-thinking`). */
type Sink = { write(chunk: string): unknown } | null;

export class ThinkingPrinter {
  private readonly splitter: ThinkSplitter;
  private state: "before" | "thinking" | "answering" = "before";

  /** @param opened the prompt opened the reasoning, so the answer starts inside it. */
  constructor(
    opened: boolean,
    private readonly thinking: Sink,
  ) {
    this.splitter = new ThinkSplitter(opened);
  }

  /** Prints a piece of the answer's text: thinking to its sink, the rest through `answer`. */
  push(text: string, answer: (text: string) => void): void {
    this.print(this.splitter.feed(text, false), answer);
  }

  /** Prints what was held back, at the end of the answer. */
  finish(answer: (text: string) => void): void {
    this.print(this.splitter.feed("", true), answer);
    if (this.state === "thinking") this.thinking?.write(THINKING_END);
    this.state = "answering";
  }

  private print(pieces: readonly ReasoningPiece[], answer: (text: string) => void): void {
    for (const piece of pieces) {
      if (piece.type === "reasoning") {
        if (this.state === "before") {
          this.thinking?.write(THINKING_START);
          this.state = "thinking";
          // The line break after the opening tag is the header's.
          const text = piece.text.replace(/^\n/, "");
          if (text !== "") this.thinking?.write(text);
          continue;
        }
        this.thinking?.write(piece.text);
      } else {
        if (this.state === "thinking") this.thinking?.write(THINKING_END);
        this.state = "answering";
        answer(piece.text);
      }
    }
  }
}
