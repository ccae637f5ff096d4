/**
 * Ollama's answer shapes for `/api/chat` and `/api/generate`: lines of JSON while streaming (each
 * with `done: false`, then a last one with `done: true`, the reason and the counts and durations),
 * or one object. A reasoning model's thinking goes under `thinking`, apart from the text; on chat,
 * tool calls are read out of the text as on `/v1/chat/completions` and given whole, with their
 * arguments as an object, once the choice has finished.
 */
import { CallParser, ThinkSplitter, type EmittedTokenLogprob, type ServedModel, type ToolCallParser, type ToolOutputPiece } from "../../scheduler/index.js";
import type { Usage } from "../protocol/chat-completions.js";
import type { AnswerFormat, CollectedChoice } from "./generation.js";

/** A call the model made, as Ollama gives it. */
export interface OllamaToolCall {
  id: string;
  function: { index: number; name: string; arguments: Record<string, unknown> };
}

interface OllamaLogprob {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs?: Array<{ token: string; logprob: number; bytes: number[] }>;
}

/** The counts and durations (nanoseconds) of Ollama's last line. */
interface OllamaMetrics {
  total_duration: number;
  load_duration: number;
  prompt_eval_count: number;
  prompt_eval_duration: number;
  eval_count: number;
  eval_duration: number;
}

export interface OllamaFormatOptions {
  /** `/api/chat` answers a `message`; `/api/generate` a `response`. */
  route: "chat" | "generate";
  /** When the request arrived (`performance.now()` milliseconds). */
  startedAt: number;
  /** Milliseconds spent waiting for the model to load for this request. */
  loadMs: number;
  /** Split a reasoning model's thinking off; `opened`: the prompt opened it, so the answer starts inside. Absent: no split. */
  reasoning?: { opened: boolean };
  /** Read tool calls out of the text (chat with tools on offer). */
  tools: boolean;
  /** Report each token's log probability (and this many alternatives). Null: none. */
  topLogprobs: number | null;
}

/** One choice's parsers and what it has produced so far. */
interface Stream {
  thinking?: ThinkSplitter;
  tools?: ToolCallParser;
  calls: OllamaToolCall[];
  argumentTexts: string[];
  firstTokenAt: number | null;
  lastTokenAt: number;
  reason: "stop" | "length";
}

export function ollamaFormat(model: ServedModel, options: OllamaFormatOptions): AnswerFormat {
  const stream: Stream = { calls: [], argumentTexts: [], firstTokenAt: null, lastTokenAt: 0, reason: "stop" };
  if (options.reasoning) stream.thinking = new ThinkSplitter(options.reasoning.opened);
  if (options.tools) stream.tools = new CallParser(model.toolDialect.syntax, () => model.toolDialect.newId());
  const line = (text: string, thinking: string, extra: Record<string, unknown> = {}) => ({
    model: model.slug,
    created_at: new Date().toISOString(),
    ...(options.route === "chat"
      ? { message: { role: "assistant", content: text, ...(thinking !== "" ? { thinking } : {}), ...extra } }
      : { response: text, ...(thinking !== "" ? { thinking } : {}), ...extra }),
    done: false,
  });
  /** The lines of a piece of a choice's text: thinking as it is, the rest through the tool-call parser. */
  const linesOf = (text: string, end: boolean): unknown[] => {
    const out: unknown[] = [];
    const pieces = stream.thinking ? stream.thinking.feed(text, end) : [{ type: "content" as const, text }];
    let content = "";
    for (const piece of pieces) {
      if (piece.type === "reasoning") {
        if (piece.text !== "") out.push(line("", piece.text));
      } else content += stream.tools ? textOf(stream.tools.push(piece.text), stream) : piece.text;
    }
    if (end && stream.tools) content += textOf(stream.tools.finish(), stream);
    if (content !== "") out.push(line(content, ""));
    return out;
  };
  const metrics = (usage: Usage, decodeMs: number): OllamaMetrics => {
    const totalMs = performance.now() - options.startedAt;
    return {
      total_duration: nanoseconds(totalMs),
      load_duration: nanoseconds(options.loadMs),
      prompt_eval_count: usage.prompt_tokens,
      prompt_eval_duration: nanoseconds(Math.max(0, totalMs - options.loadMs - decodeMs)),
      eval_count: usage.completion_tokens,
      eval_duration: nanoseconds(decodeMs),
    };
  };
  const last = (reason: string, usage: Usage, decodeMs: number, text = "", thinking = "", extra: Record<string, unknown> = {}) => ({
    ...line(text, thinking, extra),
    done: true,
    done_reason: reason,
    ...metrics(usage, decodeMs),
  });

  return {
    framing: { lines: true, end: "last-event", failure: (error) => [{ error: error.message }] },
    start: () => null,
    delta: (_index, text, logprobs) => {
      const now = performance.now();
      stream.firstTokenAt ??= now;
      stream.lastTokenAt = now;
      const lines = linesOf(text, false);
      if (options.topLogprobs !== null && logprobs?.length) {
        // Log probabilities ride on the first line of their text, or on a line of their own while a parser holds it.
        const lp = ollamaLogprobs(logprobs, options.topLogprobs);
        if (lines.length > 0) (lines[0] as Record<string, unknown>).logprobs = lp;
        else lines.push({ ...line("", ""), logprobs: lp });
      }
      return lines;
    },
    finish: (_index, reason) => {
      stream.reason = reason;
      const lines = linesOf("", true);
      if (stream.calls.length > 0) lines.push(line("", "", { tool_calls: whole(stream) }));
      return lines;
    },
    usage: (usage) => last(stream.reason, usage, stream.firstTokenAt === null ? 0 : stream.lastTokenAt - stream.firstTokenAt),
    complete: (choices: CollectedChoice[], usage: Usage) => {
      const choice = choices[0];
      const split = stream.thinking ? splitWhole(stream, choice.text) : { thinking: "", content: choice.text };
      let content = split.content;
      if (stream.tools) content = textOf([...stream.tools.push(content), ...stream.tools.finish()], stream);
      const extra: Record<string, unknown> = stream.calls.length > 0 ? { tool_calls: whole(stream) } : {};
      const answer = last(choice.finishReason === "length" ? "length" : "stop", usage, (choice.decodeSeconds ?? 0) * 1000, content, split.thinking, extra);
      return options.topLogprobs !== null ? { ...answer, logprobs: ollamaLogprobs(choice.logprobs, options.topLogprobs) } : answer;
    },
  };
}

/** A whole answer's thinking and text. */
function splitWhole(stream: Stream, text: string): { thinking: string; content: string } {
  let thinking = "";
  let content = "";
  for (const piece of stream.thinking!.feed(text, true)) {
    if (piece.type === "reasoning") thinking += piece.text;
    else content += piece.text;
  }
  return { thinking, content };
}

/** The text among parser pieces; calls are gathered into the stream (their arguments as text until the end). */
function textOf(pieces: ToolOutputPiece[], stream: Stream): string {
  let text = "";
  for (const piece of pieces) {
    if (piece.type === "content") text += piece.text;
    else if (piece.type === "call-start") {
      stream.calls.push({ id: piece.id, function: { index: piece.index, name: piece.name, arguments: {} } });
      stream.argumentTexts.push("");
    } else stream.argumentTexts[piece.index] += piece.text;
  }
  return text;
}

/** The calls with their arguments read as objects (arguments cut short by the budget, or not an object, are given as `{}`). */
function whole(stream: Stream): OllamaToolCall[] {
  return stream.calls.map((call, i) => ({ ...call, function: { ...call.function, arguments: argumentsObject(stream.argumentTexts[i]) } }));
}

function argumentsObject(text: string): Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(text);
    return value !== null && typeof value === "object" && !Array.isArray(value) ? (value as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

function ollamaLogprobs(entries: readonly EmittedTokenLogprob[], top: number): OllamaLogprob[] {
  return entries.map((e) => ({
    token: e.token,
    logprob: e.logprob,
    bytes: e.bytes,
    ...(top > 0 ? { top_logprobs: e.top.slice(0, top).map((t) => ({ token: t.token, logprob: t.logprob, bytes: t.bytes })) } : {}),
  }));
}

function nanoseconds(ms: number): number {
  return Math.round(ms * 1e6);
}
