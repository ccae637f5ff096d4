/**
 * The chat answer's wire shapes: the whole `chat.completion`, and its `chat.completion.chunk`s.
 * With tools on offer, each choice's text goes through the model's tool-call parser: content
 * stays content, calls become `tool_calls` (streamed as the API contract frames them: a call's
 * first fragment carries index, id, type and name, later ones only argument text), and an answer
 * that made calls finishes with `tool_calls`.
 */
import { CallParser, type EmittedTokenLogprob, type ServedModel, type ToolCallParser, type ToolOutputPiece } from "../../scheduler/index.js";
import type { ChatCompletion, ChatCompletionChunk, ChatFinishReason, ChatLogprobs, WireToolCall, WireToolCallDelta } from "../protocol/chat-completions.js";
import type { AnswerFormat, CollectedChoice } from "./generation.js";
import { unixNow } from "./ids.js";

export interface ChatFormatOptions {
  /** Streaming: chunks carry `usage: null` until the usage chunk. */
  includeUsage: boolean;
  /** Report log probabilities. */
  logprobs: boolean;
  /** Read tool calls out of the text (the request offered tools the model may call). */
  tools: boolean;
}

type Delta = ChatCompletionChunk["choices"][number]["delta"];

export function chatFormat(id: string, model: ServedModel, options: ChatFormatOptions): AnswerFormat {
  const created = unixNow();
  const chunk = (choices: ChatCompletionChunk["choices"]): ChatCompletionChunk => ({
    id,
    object: "chat.completion.chunk",
    created,
    model: model.slug,
    system_fingerprint: model.artifactId,
    choices,
    ...(options.includeUsage ? { usage: null } : {}),
  });
  const deltaChunk = (index: number, delta: Delta, logprobs: ChatLogprobs | null = null) => chunk([{ index, delta, logprobs, finish_reason: null }]);
  const newParser = (): ToolCallParser => new CallParser(model.toolDialect.syntax, () => model.toolDialect.newId());
  const streamParsers = new Map<number, ToolCallParser>();
  const streamParser = (index: number) => {
    let parser = streamParsers.get(index);
    if (!parser) streamParsers.set(index, (parser = newParser()));
    return parser;
  };

  return {
    start: (index) => deltaChunk(index, { role: "assistant", content: "" }),
    delta: (index, text, logprobs) => {
      const lp = options.logprobs && logprobs ? chatLogprobs(logprobs) : null;
      if (!options.tools) return deltaChunk(index, { content: text }, lp);
      const chunks = streamParser(index)
        .push(text)
        .map((piece) => deltaChunk(index, pieceDelta(piece)));
      // Log probabilities ride on the first chunk of their text; text the parser still holds gets an empty delta.
      if (lp) {
        if (chunks.length > 0) chunks[0].choices[0].logprobs = lp;
        else chunks.push(deltaChunk(index, {}, lp));
      }
      return chunks;
    },
    finish: (index, reason) => {
      const parser = options.tools ? streamParser(index) : undefined;
      const chunks = parser ? parser.finish().map((piece) => deltaChunk(index, pieceDelta(piece))) : [];
      chunks.push(chunk([{ index, delta: {}, logprobs: null, finish_reason: finishReason(reason, parser?.calls ?? 0) }]));
      return chunks;
    },
    usage: (usage) => ({ ...chunk([]), usage }),
    complete: (choices, usage): ChatCompletion => ({
      id,
      object: "chat.completion",
      created,
      model: model.slug,
      system_fingerprint: model.artifactId,
      choices: choices.map((c) => {
        const message = options.tools ? toolMessage(c, newParser()) : { content: c.text, calls: [] };
        return {
          index: c.index,
          message: {
            role: "assistant",
            content: message.content,
            refusal: null,
            ...(message.calls.length > 0 ? { tool_calls: message.calls } : {}),
          },
          logprobs: options.logprobs ? chatLogprobs(c.logprobs) : null,
          finish_reason: finishReason(c.finishReason, message.calls.length),
        };
      }),
      usage,
    }),
  };
}

function finishReason(reason: CollectedChoice["finishReason"], calls: number): ChatFinishReason {
  if (reason === "length") return "length";
  return calls > 0 ? "tool_calls" : "stop";
}

function pieceDelta(piece: ToolOutputPiece): Delta {
  if (piece.type === "content") return { content: piece.text };
  const call: WireToolCallDelta =
    piece.type === "call-start"
      ? { index: piece.index, id: piece.id, type: "function", function: { name: piece.name, arguments: "" } }
      : { index: piece.index, function: { arguments: piece.text } };
  return { tool_calls: [call] };
}

/** A whole choice's text read the way its stream would have been: content (null when there is none beside calls) and calls. */
function toolMessage(choice: CollectedChoice, parser: ToolCallParser): { content: string | null; calls: WireToolCall[] } {
  let content = "";
  const calls: WireToolCall[] = [];
  for (const piece of [...parser.push(choice.text), ...parser.finish()]) {
    if (piece.type === "content") content += piece.text;
    else if (piece.type === "call-start") calls.push({ id: piece.id, type: "function", function: { name: piece.name, arguments: "" } });
    else calls[piece.index].function.arguments += piece.text;
  }
  return { content: content === "" && calls.length > 0 ? null : content, calls };
}

export function chatLogprobs(entries: EmittedTokenLogprob[]): ChatLogprobs {
  return {
    content: entries.map((e) => ({
      token: e.token,
      logprob: e.logprob,
      bytes: e.bytes,
      top_logprobs: e.top.map((t) => ({ token: t.token, logprob: t.logprob, bytes: t.bytes })),
    })),
    refusal: null,
  };
}
