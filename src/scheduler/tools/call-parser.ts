/**
 * Reads tool calls out of a choice's text as it streams, for any {@link CallSyntax}. The same parser
 * runs over streamed deltas and over a whole answer, so streamed pieces always add up to the
 * non-streamed message: content is emitted as soon as it cannot be the start of a call; a call's
 * start (index, id, name) as soon as its head is read; its arguments character by character as the
 * model writes them, ended by tracking the JSON value's nesting.
 *
 * White space around calls is not content: white space is held until text follows it, and dropped
 * when a call or the end of an answer that made calls follows it instead.
 */
import type { CallSyntax } from "./call-syntax.js";
import type { ToolCallParser, ToolOutputPiece } from "./types.js";

type State =
  | { kind: "text" }
  /** Text that can no longer hold a call (after prose, when calls count only at the start). */
  | { kind: "prose" }
  | { kind: "block" }
  | { kind: "call" }
  | { kind: "arguments"; depth: number; inString: boolean; escaped: boolean; started: boolean }
  | { kind: "after-call" }
  | { kind: "close" };

/** Outcome of matching an expected form against the text left: it matched (up to `end`), cannot, or needs more text to tell. */
type Match<T = undefined> = { ok: true; end: number; value: T } | { ok: false; more: boolean };

const WS = /\s/;
/** How every call's object begins (the constraint writes it so). */
const CALL_HEAD = '{"name"';

export class CallParser implements ToolCallParser {
  private text = "";
  private at = 0;
  private state: State = { kind: "text" };
  private heldSpace = "";
  private sawContent = false;
  private count = 0;
  /** Where the block being read began, so that a block that turns out not to be one is given back as text. */
  private blockStart = 0;
  /** Calls started before the block being read. */
  private callsBeforeBlock = 0;

  /** @param newId makes a call's id (`call_…`; 9 characters for Mistral). */
  constructor(
    private readonly syntax: CallSyntax,
    private readonly newId: () => string,
  ) {}

  get calls(): number {
    return this.count;
  }

  push(text: string): ToolOutputPiece[] {
    this.text += text;
    const out: ToolOutputPiece[] = [];
    while (this.step(out, false));
    return out;
  }

  finish(): ToolOutputPiece[] {
    const out: ToolOutputPiece[] = [];
    while (this.step(out, true));
    if (this.state.kind === "text" || this.state.kind === "prose") {
      this.content(out, this.text.slice(this.at), true);
      this.at = this.text.length;
    } else if (this.state.kind === "block" || this.state.kind === "call") {
      // A block cut off before a call's head was whole (by max_tokens, or where a repeated call was
      // left out): its opener was the constraint's, so it is never content. A call whose name was
      // written is a call, with the arguments it got (none); one without is nothing.
      const name = this.state.kind === "call" ? headName(this.text, skipSpace(this.text, this.at)) : undefined;
      if (name !== undefined) out.push({ type: "call-start", index: this.count++, id: this.newId(), name });
      this.heldSpace = "";
      this.at = this.text.length;
    }
    if (this.heldSpace !== "" && this.count === 0) out.push({ type: "content", text: this.heldSpace });
    this.heldSpace = "";
    return out;
  }

  /** Advances as far as the text allows; true when it made progress and may make more. */
  private step(out: ToolOutputPiece[], ending: boolean): boolean {
    const s = this.state;
    switch (s.kind) {
      case "prose": {
        if (this.at === this.text.length) return false;
        this.content(out, this.text.slice(this.at), ending);
        this.at = this.text.length;
        return false;
      }
      case "text":
        return this.readText(out, ending);
      case "block": {
        const open = this.literal(this.syntax.open);
        if (!open.ok) return open.more ? false : this.notABlock(out);
        let end = open.end;
        if (this.syntax.array) {
          const bracket = this.literalAt(skipSpace(this.text, end), "[");
          if (!bracket.ok) return bracket.more ? false : this.notABlock(out);
          end = bracket.end;
        }
        this.at = end;
        this.state = { kind: "call" };
        return true;
      }
      case "call": {
        const head = readHead(this.text, skipSpace(this.text, this.at), this.syntax.argumentsKey);
        if (!head.ok) return head.more ? false : this.notABlock(out);
        this.at = head.end;
        this.heldSpace = "";
        out.push({ type: "call-start", index: this.count++, id: this.newId(), name: head.value });
        this.state = { kind: "arguments", depth: 0, inString: false, escaped: false, started: false };
        return true;
      }
      case "arguments":
        return this.readArguments(out, s);
      case "after-call": {
        // The call object's own closing brace, then the next call of an array, or the block's end.
        const brace = this.literalAt(skipSpace(this.text, this.at), "}");
        if (!brace.ok) return brace.more ? false : this.toText();
        let end = skipSpace(this.text, brace.end);
        if (this.syntax.array) {
          if (end === this.text.length) return false;
          if (this.text[end] === ",") {
            this.at = end + 1;
            this.state = { kind: "call" };
            return true;
          }
          if (this.text[end] !== "]") return this.toText(brace.end);
          end += 1;
        }
        this.at = end;
        this.state = { kind: "close" };
        return true;
      }
      case "close": {
        if (this.syntax.close === "") return this.toText();
        const close = this.literalAt(skipSpace(this.text, this.at), this.syntax.close);
        if (!close.ok) return close.more ? false : this.toText();
        return this.toText(close.end);
      }
    }
  }

  /** Text: content up to the next block opener (or, at the start, a call), holding back what may still become one. */
  private readText(out: ToolOutputPiece[], ending: boolean): boolean {
    const { open, atStartOnly } = this.syntax;
    if (atStartOnly) {
      if (this.sawContent || this.count > 0) {
        this.state = { kind: "prose" };
        return true;
      }
      const start = skipSpace(this.text, this.at);
      const opening = open === "" ? readHead(this.text, start, this.syntax.argumentsKey) : literalAt(this.text, start, open);
      if (!opening.ok && opening.more && !ending) return false;
      if (!opening.ok && opening.more && open === "" && this.text.startsWith(CALL_HEAD, start)) {
        // A call that is the message, cut off inside its head: still a call (see finish).
        this.heldSpace += this.text.slice(this.at, start);
        this.at = start;
        this.openBlock(start);
        return true;
      }
      this.heldSpace += this.text.slice(this.at, start);
      this.at = start;
      if (opening.ok) {
        this.openBlock(start);
        return true;
      }
      this.state = { kind: "prose" };
      return true;
    }
    const found = this.text.indexOf(open, this.at);
    if (found >= 0) {
      this.content(out, this.text.slice(this.at, found), false);
      this.at = found;
      this.openBlock(found);
      return true;
    }
    const keep = ending ? 0 : partialSuffix(this.text, this.at, open);
    this.content(out, this.text.slice(this.at, this.text.length - keep), false);
    this.at = this.text.length - keep;
    return false;
  }

  private openBlock(at: number): void {
    this.blockStart = at;
    this.callsBeforeBlock = this.count;
    this.state = { kind: this.syntax.open === "" ? "call" : "block" };
  }

  /** Arguments: emitted as written until the JSON value they start is complete. */
  private readArguments(out: ToolOutputPiece[], s: Extract<State, { kind: "arguments" }>): boolean {
    const from = s.started ? this.at : skipSpace(this.text, this.at);
    let i = from;
    let done = false;
    for (; i < this.text.length && !done; i++) {
      const c = this.text[i];
      if (!s.started) s.started = true;
      if (s.inString) {
        if (s.escaped) s.escaped = false;
        else if (c === "\\") s.escaped = true;
        else if (c === '"') {
          s.inString = false;
          if (s.depth === 0) done = true;
        }
      } else if (c === '"') {
        s.inString = true;
      } else if (c === "{" || c === "[") {
        s.depth++;
      } else if (c === "}" || c === "]") {
        if (s.depth === 0) {
          // Closes the call, not the value: a bare scalar ends here.
          i--;
          done = true;
        } else if (--s.depth === 0) {
          done = true;
        }
      } else if (s.depth === 0 && (c === "," || WS.test(c))) {
        // A bare scalar (not an object) ended by what follows it.
        i--;
        done = true;
      }
    }
    if (i > from) out.push({ type: "call-arguments", index: this.count - 1, text: this.text.slice(from, i) });
    this.at = i;
    if (done) this.state = { kind: "after-call" };
    return done;
  }

  /** Emits content, holding white space until text follows it. */
  private content(out: ToolOutputPiece[], text: string, ending: boolean): void {
    if (text === "") return;
    if (text.trim() === "") {
      this.heldSpace += text;
      return;
    }
    const body = this.heldSpace + text;
    this.heldSpace = "";
    // Trailing white space may yet turn out to precede a call.
    const trimmed = ending ? body : body.trimEnd();
    this.heldSpace = body.slice(trimmed.length);
    this.sawContent = true;
    out.push({ type: "content", text: trimmed });
  }

  /** What looked like a block is not one (only possible without a constraint): its text is content. */
  private notABlock(out: ToolOutputPiece[]): boolean {
    if (this.count > this.callsBeforeBlock) return this.toText();
    const skip = this.syntax.open.length > 0 ? this.syntax.open.length : 1;
    const end = Math.min(this.blockStart + skip, this.text.length);
    this.content(out, this.text.slice(this.blockStart, end), false);
    this.at = end;
    this.state = { kind: this.syntax.atStartOnly ? "prose" : "text" };
    return true;
  }

  /** Back to text after a call or block, from `at`. */
  private toText(at = this.at): boolean {
    this.at = at;
    this.state = { kind: this.syntax.atStartOnly ? "prose" : "text" };
    if (this.syntax.atStartOnly) this.sawContent = true;
    return true;
  }

  private literal(expected: string): Match {
    return this.literalAt(this.at, expected);
  }

  private literalAt(at: number, expected: string): Match {
    return literalAt(this.text, at, expected);
  }
}

function literalAt(text: string, at: number, expected: string): Match {
  const have = text.slice(at, at + expected.length);
  if (have === expected) return { ok: true, end: at + expected.length, value: undefined };
  return { ok: false, more: expected.startsWith(have) };
}

function skipSpace(text: string, at: number): number {
  while (at < text.length && WS.test(text[at])) at++;
  return at;
}

/** Length of the longest suffix of text[from..] that is a proper prefix of `open`. */
function partialSuffix(text: string, from: number, open: string): number {
  for (let n = Math.min(open.length - 1, text.length - from); n > 0; n--) {
    if (open.startsWith(text.slice(text.length - n))) return n;
  }
  return 0;
}

/** The name in a call's head cut off after it (`{"name": "<name>"`, the rest missing), or undefined when the name is not whole. */
function headName(text: string, at: number): string | undefined {
  const m = /^\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")/.exec(text.slice(at));
  if (!m) return undefined;
  try {
    return JSON.parse(m[1]) as string;
  } catch {
    return undefined;
  }
}

/** `{"name": "<name>", "<key>":` with any white space, at `at`; the value is the name. */
function readHead(text: string, at: number, key: string): Match<string> {
  let i = at;
  const expect = (literal: string): Match | undefined => {
    i = skipSpace(text, i);
    const m = literalAt(text, i, literal);
    if (!m.ok) return m;
    i = m.end;
    return undefined;
  };
  for (const part of ["{", '"name"', ":"]) {
    const miss = expect(part);
    if (miss) return miss as Match<string>;
  }
  i = skipSpace(text, i);
  if (i === text.length) return { ok: false, more: true };
  if (text[i] !== '"') return { ok: false, more: false };
  let j = i + 1;
  for (; j < text.length; j++) {
    if (text[j] === "\\") j++;
    else if (text[j] === '"') break;
  }
  if (j >= text.length) return { ok: false, more: true };
  let name: string;
  try {
    name = JSON.parse(text.slice(i, j + 1)) as string;
  } catch {
    return { ok: false, more: false };
  }
  i = j + 1;
  for (const part of [",", `"${key}"`, ":"]) {
    const miss = expect(part);
    if (miss) return miss as Match<string>;
  }
  return { ok: true, end: i, value: name };
}
