/**
 * The chat answer's wire shapes: the whole `chat.completion`, and its `chat.completion.chunk`s.
 * A reasoning model's thinking is split from its answer first (`reasoning_content`, streamed as
 * its own deltas). With tools on offer, the answer goes through the model's tool-call parser:
 * content stays content, calls become `tool_calls` (streamed as the API contract frames them: a
 * call's first fragment carries index, id, type and name, later ones only argument text), and an
 * answer that made calls finishes with `tool_calls`.
 */
import {
  CallParser,
  splitThinking,
  ThinkSplitter,
  type EmittedTokenLogprob,
  type ServedModel,
  type ToolCallParser,
  type ToolOutputPiece,
} from "../../scheduler/index.js";
import type {
  ChatCompletion,
  ChatCompletionChunk,
  ChatFinishReason,
  ChatLogprobs,
  Usage,
  WireToolCall,
  WireToolCallDelta,
} from "../protocol/chat-completions.js";
import { stopReasonField, type AnswerFormat, type CollectedChoice } from "./generation.js";
import { unixNow } from "./ids.js";
import { vllmPromptLogprobs } from "./prompt-logprobs.js";
import { withReasoningTokens } from "./reasoning.js";

export interface ChatFormatOptions {
  /** Streaming: chunks carry `usage: null` until the usage chunk. */
  includeUsage: boolean;
  /** Report log probabilities. */
  logprobs: boolean;
  /** Alternatives of vLLM's `prompt_logprobs` (at the answer's top level, as vLLM puts them on chat), or null for none. Default none. */
  promptLogprobs?: number | null;
  /**
   * Read tool calls out of the text (the request offered tools the model may call) and answer them as
   * `tool_calls` ("tools"), or as the deprecated `function_call` ("legacy": the request offered
   * `functions`); false: no calls.
   */
  tools: "tools" | "legacy" | false;
  /**
   * Split a reasoning model's thinking from its answer; `opened`: the prompt ended by opening it, so
   * the answer starts inside. Absent: no split (a model that does not reason, or a constrained answer).
   */
  reasoning?: { opened: boolean };
}

type Delta = ChatCompletionChunk["choices"][number]["delta"];

/** One streamed choice's parsers, and its text so far (for the reasoning tokens in `usage`). */
interface ChoiceStream {
  thinking?: ThinkSplitter;
  tools?: ToolCallParser;
  text: string;
}

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
  const streams = new Map<number, ChoiceStream>();
  const streamOf = (index: number): ChoiceStream => {
    let stream = streams.get(index);
    if (!stream) {
      stream = { text: "" };
      if (options.reasoning) stream.thinking = new ThinkSplitter(options.reasoning.opened);
      if (options.tools) stream.tools = newParser();
      streams.set(index, stream);
    }
    return stream;
  };
  /** The deltas of a choice's text: reasoning as it is, the answer through the tool-call parser when tools are on offer. */
  const deltasOf = (stream: ChoiceStream, text: string, end: boolean): Delta[] => {
    const pieces = stream.thinking ? stream.thinking.feed(text, end) : [{ type: "content" as const, text }];
    const deltas: Delta[] = [];
    for (const piece of pieces) {
      if (piece.type === "reasoning") deltas.push({ reasoning_content: piece.text });
      else if (!stream.tools) deltas.push({ content: piece.text });
      else deltas.push(...stream.tools.push(piece.text).map(callDelta));
    }
    if (end && stream.tools) deltas.push(...stream.tools.finish().map(callDelta));
    return deltas.filter((d) => d.tool_calls !== undefined || d.function_call !== undefined || (d.content ?? d.reasoning_content) !== "");
  };
  const legacy = options.tools === "legacy";
  const callDelta = legacy ? legacyPieceDelta : pieceDelta;
  const withReasoning = (usage: Usage, texts: string[]): Usage =>
    options.reasoning ? withReasoningTokens(usage, model, texts, options.reasoning.opened) : usage;

  return {
    start: (index) => deltaChunk(index, { role: "assistant", content: "" }),
    delta: (index, text, logprobs) => {
      const lp = options.logprobs && logprobs ? chatLogprobs(logprobs) : null;
      if (!options.tools && !options.reasoning) return deltaChunk(index, { content: text }, lp);
      const stream = streamOf(index);
      stream.text += text;
      const chunks = deltasOf(stream, text, false).map((delta) => deltaChunk(index, delta));
      // Log probabilities ride on the first chunk of their text; text a parser still holds gets an empty delta.
      if (lp) {
        if (chunks.length > 0) chunks[0].choices[0].logprobs = lp;
        else chunks.push(deltaChunk(index, {}, lp));
      }
      return chunks;
    },
    finish: (index, reason, stopReason) => {
      const stream = options.tools || options.reasoning ? streamOf(index) : undefined;
      const chunks = stream ? deltasOf(stream, "", true).map((delta) => deltaChunk(index, delta)) : [];
      chunks.push(
        chunk([{ index, delta: {}, logprobs: null, finish_reason: finishReason(reason, stream?.tools?.calls ?? 0, legacy), ...stopReasonField(stopReason) }]),
      );
      return chunks;
    },
    usage: (usage) => ({
      ...chunk([]),
      usage: withReasoning(
        usage,
        [...streams.values()].map((s) => s.text),
      ),
    }),
    complete: (choices, usage): ChatCompletion => ({
      id,
      object: "chat.completion",
      created,
      model: model.slug,
      system_fingerprint: model.artifactId,
      choices: choices.map((c) => {
        const split = options.reasoning ? splitThinking(c.text, options.reasoning.opened) : { reasoning: null, content: c.text };
        const message = options.tools ? toolMessage(split.content, newParser()) : { content: split.content, calls: [] };
        return {
          index: c.index,
          message: {
            role: "assistant",
            content: message.content,
            ...(options.reasoning ? { reasoning_content: split.reasoning } : {}),
            refusal: null,
            ...(message.calls.length === 0 ? {} : legacy ? { function_call: message.calls[0].function } : { tool_calls: message.calls }),
          },
          logprobs: options.logprobs ? chatLogprobs(c.logprobs) : null,
          finish_reason: finishReason(c.finishReason, message.calls.length, legacy),
          ...stopReasonField(c.stopReason),
        };
      }),
      usage: withReasoning(
        usage,
        choices.map((c) => c.text),
      ),
      ...(options.promptLogprobs != null ? { prompt_logprobs: vllmPromptLogprobs(choices[0]?.promptLogprobs ?? [], options.promptLogprobs) } : {}),
    }),
  };
}

function finishReason(reason: CollectedChoice["finishReason"], calls: number, legacy: boolean): ChatFinishReason {
  if (reason === "length") return "length";
  if (calls === 0) return "stop";
  return legacy ? "function_call" : "tool_calls";
}

/** A piece in the deprecated shape: the call's name first, then its argument text (one call only: the offer allows no more). */
function legacyPieceDelta(piece: ToolOutputPiece): Delta {
  if (piece.type === "content") return { content: piece.text };
  return { function_call: piece.type === "call-start" ? { name: piece.name, arguments: "" } : { arguments: piece.text } };
}

function pieceDelta(piece: ToolOutputPiece): Delta {
  if (piece.type === "content") return { content: piece.text };
  const call: WireToolCallDelta =
    piece.type === "call-start"
      ? { index: piece.index, id: piece.id, type: "function", function: { name: piece.name, arguments: "" } }
      : { index: piece.index, function: { arguments: piece.text } };
  return { tool_calls: [call] };
}

/** A whole answer read the way its stream would have been: content (null when there is none beside calls) and calls. */
function toolMessage(text: string, parser: ToolCallParser): { content: string | null; calls: WireToolCall[] } {
  let content = "";
  const calls: WireToolCall[] = [];
  for (const piece of [...parser.push(text), ...parser.finish()]) {
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
