/**
 * The Messages API's answer: one `message` object of content blocks (thinking, text, tool use), or
 * its named server-sent events (`message_start`, then each block's `content_block_start`, deltas and
 * `content_block_stop`, then `message_delta` with the stop reason and `message_stop`). Thinking and
 * tool calls are read out of the text as on `/v1/chat/completions`.
 */
import { CallParser, ThinkSplitter, type ServedModel, type ToolCallParser, type ToolOutputPiece } from "../../scheduler/index.js";
import type { Usage } from "../protocol/chat-completions.js";
import type { MessageResponse, MessagesUsage, ResponseBlock, StopReason } from "../protocol/messages.js";
import type { AnswerFormat, CollectedChoice } from "./generation.js";
import { anthropicId } from "./ids.js";

export interface MessagesFormatOptions {
  id: string;
  /** Prompt tokens, for `message_start` (the usage comes only at the end). */
  inputTokens: number;
  /** Split a reasoning model's thinking off; `opened`: the prompt opened it. Absent: no split. */
  reasoning?: { opened: boolean };
  /** Read tool calls out of the text (tools on offer). */
  tools: boolean;
}

type BlockType = ResponseBlock["type"];

/** A streamed answer's state: the block open now and what ended the answer. */
interface StreamState {
  thinking?: ThinkSplitter;
  tools?: ToolCallParser;
  open: { type: BlockType; index: number } | null;
  blocks: number;
  calls: number;
  stop: { reason: StopReason; sequence: string | null };
}

export function messagesFormat(model: ServedModel, options: MessagesFormatOptions): AnswerFormat {
  const newParser = () => new CallParser(model.toolDialect.syntax, () => anthropicId("toolu"));
  const state: StreamState = { open: null, blocks: 0, calls: 0, stop: { reason: "end_turn", sequence: null } };
  if (options.reasoning) state.thinking = new ThinkSplitter(options.reasoning.opened);
  if (options.tools) state.tools = newParser();

  /** Events that close the open block (if it is not of `type`) and open one of `type`. */
  const enter = (type: BlockType, start: ResponseBlock): unknown[] => {
    if (state.open?.type === type && type !== "tool_use") return [];
    const events = close();
    state.open = { type, index: state.blocks++ };
    events.push({ type: "content_block_start", index: state.open.index, content_block: start });
    return events;
  };
  const close = (): unknown[] => {
    if (state.open === null) return [];
    const event = { type: "content_block_stop", index: state.open.index };
    state.open = null;
    return [event];
  };
  const delta = (delta: Record<string, unknown>) => ({ type: "content_block_delta", index: state.open!.index, delta });
  const piecesEvents = (pieces: ToolOutputPiece[]): unknown[] => {
    const events: unknown[] = [];
    for (const piece of pieces) {
      if (piece.type === "content") {
        if (piece.text === "") continue;
        events.push(...enter("text", { type: "text", text: "" }), delta({ type: "text_delta", text: piece.text }));
      } else if (piece.type === "call-start") {
        state.calls++;
        events.push(...enter("tool_use", { type: "tool_use", id: piece.id, name: piece.name, input: {} }));
      } else {
        events.push(delta({ type: "input_json_delta", partial_json: piece.text }));
      }
    }
    return events;
  };
  const textEvents = (text: string, end: boolean): unknown[] => {
    const events: unknown[] = [];
    const pieces = state.thinking ? state.thinking.feed(text, end) : [{ type: "content" as const, text }];
    for (const piece of pieces) {
      if (piece.type === "reasoning") {
        if (piece.text !== "")
          events.push(...enter("thinking", { type: "thinking", thinking: "", signature: "" }), delta({ type: "thinking_delta", thinking: piece.text }));
      } else events.push(...piecesEvents(state.tools ? state.tools.push(piece.text) : [{ type: "content", text: piece.text }]));
    }
    if (end && state.tools) events.push(...piecesEvents(state.tools.finish()));
    return events;
  };

  return {
    framing: {
      named: true,
      end: "last-event",
      failure: (error) => [{ type: "error", error: { type: error.status >= 500 ? "api_error" : "invalid_request_error", message: error.message } }],
    },
    begin: () => [
      {
        type: "message_start",
        message: {
          id: options.id,
          type: "message",
          role: "assistant",
          model: model.slug,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: { input_tokens: options.inputTokens, output_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
        },
      },
    ],
    start: () => null,
    delta: (_index, text) => textEvents(text, false),
    finish: (_index, reason, stopReason) => {
      const events = [...textEvents("", true), ...close()];
      state.stop = stopOf(reason, stopReason, state.calls);
      return events;
    },
    usage: (usage) => [
      {
        type: "message_delta",
        delta: { stop_reason: state.stop.reason, stop_sequence: state.stop.sequence },
        // The whole usage, as Anthropic's API sends it: its clients take these totals over message_start's.
        usage: messagesUsage(usage),
      },
      { type: "message_stop" },
    ],
    complete: (choices: CollectedChoice[], usage: Usage): MessageResponse => {
      const choice = choices[0];
      const blocks: ResponseBlock[] = [];
      const pieces = options.reasoning
        ? new ThinkSplitter(options.reasoning.opened).feed(choice.text, true)
        : [{ type: "content" as const, text: choice.text }];
      let calls = 0;
      const parser = options.tools ? newParser() : undefined;
      const arguments_: string[] = [];
      const addText = (text: string) => {
        const last = blocks.at(-1);
        if (last?.type === "text") last.text += text;
        else if (text !== "") blocks.push({ type: "text", text });
      };
      const add = (list: ToolOutputPiece[]) => {
        for (const p of list) {
          if (p.type === "content") addText(p.text);
          else if (p.type === "call-start") {
            calls++;
            arguments_.push("");
            blocks.push({ type: "tool_use", id: p.id, name: p.name, input: {} });
          } else arguments_[p.index] += p.text;
        }
      };
      for (const piece of pieces) {
        if (piece.type === "reasoning") blocks.push({ type: "thinking", thinking: piece.text, signature: "" });
        else if (parser) add(parser.push(piece.text));
        else addText(piece.text);
      }
      if (parser) add(parser.finish());
      let call = 0;
      for (const block of blocks) if (block.type === "tool_use") block.input = inputObject(arguments_[call++]);
      const stop = stopOf(choice.finishReason === "length" ? "length" : "stop", choice.stopReason, calls);
      return {
        id: options.id,
        type: "message",
        role: "assistant",
        model: model.slug,
        content: blocks.length > 0 ? blocks : [{ type: "text", text: "" }],
        stop_reason: stop.reason,
        stop_sequence: stop.sequence,
        usage: messagesUsage(usage),
      };
    },
  };
}

/** Anthropic's stop reason: the budget, a stop sequence (named), tool use, or the model's own end. */
function stopOf(
  reason: CollectedChoice["finishReason"],
  stopReason: string | number | undefined,
  calls: number,
): { reason: StopReason; sequence: string | null } {
  if (reason === "length") return { reason: "max_tokens", sequence: null };
  if (typeof stopReason === "string") return { reason: "stop_sequence", sequence: stopReason };
  return { reason: calls > 0 ? "tool_use" : "end_turn", sequence: null };
}

/** The usage as Anthropic counts it: prompt tokens served from the prefix cache are cache reads, not input. */
export function messagesUsage(usage: Usage): MessagesUsage {
  const cached = usage.prompt_tokens_details.cached_tokens;
  return {
    input_tokens: usage.prompt_tokens - cached,
    output_tokens: usage.completion_tokens,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: cached,
  };
}

/** A call's arguments as an object (cut short by the budget, or not an object: `{}`). */
function inputObject(text: string | undefined): Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(text ?? "");
    return value !== null && typeof value === "object" && !Array.isArray(value) ? (value as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}
