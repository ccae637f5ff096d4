/**
 * A conversation at the terminal, as `ollama run` and `llama-cli` hold one: each line typed is the
 * user's turn, the answer streams back, and the turns so far go with the next one. Ctrl-C stops an
 * answer (not the session); Ctrl-D or `/bye` ends it. Knows nothing of models: `reply` answers and
 * `fits` says whether a conversation leaves room for an answer in the model's context.
 */
import { createInterface } from "node:readline";
import type { ChatMessage } from "../scheduler/index.js";

export interface ChatSessionOptions {
  /** The keyboard (a TTY in `kiln run`; any stream in tests). */
  input: NodeJS.ReadableStream;
  /** Where prompts and answers go. */
  output: { write(chunk: string): unknown };
  /** Where notes about the session go (a turn forgotten, a line too long). */
  notes: { write(chunk: string): unknown };
  /** Whether `input` is a terminal: readline then edits lines, keeps a history and reports Ctrl-C. Default: false. */
  terminal?: boolean;
  /** The system message kept at the head of the conversation. Default: none (the template's own). */
  system?: string;
  /** Whether these messages leave room for an answer in the model's context. */
  fits(messages: readonly ChatMessage[]): boolean;
  /** Streams the answer to `messages` through `write` and resolves with its whole text; an aborted `signal` ends it early with the text so far. */
  reply(messages: readonly ChatMessage[], signal: AbortSignal, write: (text: string) => void): Promise<string>;
}

export const PROMPT = ">>> ";
const CONTINUATION = "... ";
/** Opens and closes a message of several lines, as in `ollama run`. */
const MULTILINE = '"""';

/** What can be typed besides messages (in `kiln run --help` and at `/?`). */
export const CHAT_COMMANDS = `  /clear   forget the conversation (the system message stays)
  /bye     end the session (or Ctrl-D)
  /?       this help
  """      starts a message of several lines, ended by a line ending with """
Ctrl-C stops an answer.`;

const CHAT_HELP = `Type a message and press Enter; the conversation so far goes with it.\n${CHAT_COMMANDS}\n`;

/** Runs the session until the input ends or `/bye`. */
export async function chatSession(o: ChatSessionOptions): Promise<void> {
  const head: ChatMessage[] = o.system ? [{ role: "system", content: o.system }] : [];
  let turns: ChatMessage[] = [];
  let answering: AbortController | null = null;
  const rl = createInterface({ input: o.input, output: o.terminal ? (o.output as NodeJS.WritableStream) : undefined, terminal: o.terminal ?? false });
  rl.on("SIGINT", () => {
    if (answering) answering.abort();
    else {
      o.output.write(`\nUse Ctrl-D or /bye to exit.\n`);
      prompt(PROMPT);
    }
  });
  const prompt = (text: string) => {
    if (o.terminal) {
      rl.setPrompt(text);
      rl.prompt();
    } else o.output.write(text);
  };

  let pending: string[] | null = null;
  prompt(PROMPT);
  for await (const line of rl) {
    const message: Gathered = pending ? gatherLine(pending, line) : startLine(line);
    if (message.kind === "more") {
      pending = message.lines;
      prompt(CONTINUATION);
      continue;
    }
    pending = null;
    const text = message.text;
    if (text === "/bye") break;
    if (text === "/clear") {
      turns = [];
      o.notes.write("(the conversation is forgotten)\n");
    } else if (text === "/?" || text === "/help") {
      o.output.write(CHAT_HELP);
    } else if (text !== "") {
      const asked: ChatMessage = { role: "user", content: text };
      const kept = fitTurns(head, [...turns, asked], o.fits);
      if (kept === null) {
        o.notes.write("(that message is too long for the model's context; nothing was sent)\n");
      } else {
        if (kept.length < turns.length + 1)
          o.notes.write(`(the oldest ${turns.length + 1 - kept.length} messages are forgotten, to fit the model's context)\n`);
        answering = new AbortController();
        const answer = await o.reply([...head, ...kept], answering.signal, (t) => o.output.write(t));
        const stopped = answering.signal.aborted;
        answering = null;
        o.output.write(stopped ? "\n(stopped)\n\n" : "\n\n");
        turns = [...kept, { role: "assistant", content: answer }];
      }
    }
    prompt(PROMPT);
  }
  rl.close();
  o.output.write("\n");
}

type Gathered = { kind: "more"; lines: string[] } | { kind: "done"; text: string };

/** A typed line: a command or message, or the opening of a message of several lines. */
function startLine(line: string): Gathered {
  const text = line.trim();
  if (!text.startsWith(MULTILINE)) return { kind: "done", text };
  const rest = text.slice(MULTILINE.length);
  if (rest.length > 0 && rest.endsWith(MULTILINE)) return { kind: "done", text: rest.slice(0, -MULTILINE.length).trim() };
  return { kind: "more", lines: rest.length > 0 ? [rest] : [] };
}

/** One more line of a message of several lines, which a line ending with `"""` closes. */
function gatherLine(lines: string[], line: string): Gathered {
  const closing = line.trimEnd().endsWith(MULTILINE);
  const kept = closing ? line.trimEnd().slice(0, -MULTILINE.length) : line;
  const all = [...lines, kept];
  return closing ? { kind: "done", text: all.join("\n").trim() } : { kind: "more", lines: all };
}

/**
 * The latest turns that fit beside `head`, dropping the oldest first, in whole exchanges so the
 * conversation still starts with the user; null when even the last message alone does not fit.
 */
export function fitTurns(
  head: readonly ChatMessage[],
  turns: readonly ChatMessage[],
  fits: (messages: readonly ChatMessage[]) => boolean,
): ChatMessage[] | null {
  for (let from = 0; from < turns.length; from++) {
    if (turns[from].role !== "user") continue;
    const kept = turns.slice(from);
    if (fits([...head, ...kept])) return kept;
  }
  return null;
}
