/**
 * The Responses API's wire shapes: the response object, and its typed stream events in the
 * reference order (`response.created`, `response.in_progress`, then per output item
 * `response.output_item.added`, its content part or arguments deltas and their `.done`,
 * `response.output_item.done`, and last `response.completed` or `response.incomplete`; `error` and
 * `response.failed` when the stream fails). One {@link OutputBuilder} turns a choice's text into
 * output items, streamed or not, so the streamed events always rebuild the non-streamed response.
 * A reasoning model's thinking becomes a `reasoning` item (its text streamed as
 * `response.reasoning_text.delta`s). With tools on offer the answer goes through the model's
 * tool-call parser: content becomes `message` items, calls `function_call` items.
 */
import {
  CallParser,
  ThinkSplitter,
  type EmittedTokenLogprob,
  type FinishReason,
  type ReasoningPiece,
  type ServedModel,
  type ToolOutputPiece,
} from "../../scheduler/index.js";
import type { ApiError } from "../errors.js";
import type { Usage } from "../protocol/chat-completions.js";
import type {
  EchoedFields,
  FunctionCallItem,
  ItemStatus,
  OutputItem,
  OutputMessage,
  OutputTextPart,
  ReasoningItem,
  ResponseObject,
  ResponseStatus,
  ResponsesLogprob,
  ResponsesUsage,
} from "../protocol/responses.js";
import type { AnswerFormat } from "./generation.js";
import { responsesId, unixNow } from "./ids.js";
import { withReasoningTokens } from "./reasoning.js";

export interface ResponsesFormatOptions {
  /** `resp_…`. */
  id: string;
  /** Unix seconds. */
  createdAt: number;
  /** The request's fields, as the response echoes them. */
  echo: EchoedFields;
  /** Read tool calls out of the text (the request offered tools the model may call). */
  tools: boolean;
  /** Report each token's log probability (`include: ["message.output_text.logprobs"]`). */
  logprobs: boolean;
  /** Split a reasoning model's thinking into a `reasoning` item; `opened`: the prompt opened it. Absent: no split. */
  reasoning?: { opened: boolean };
  /** Called once with the finished response (completed or incomplete, streamed or not), and awaited before the answer's end is sent; not for one cut short. Where it is stored. */
  onFinished?: (response: ResponseObject) => void | Promise<void>;
}

/** One stream event: its `type` first and its `sequence_number` last, as the reference API writes them. */
type StreamEvent = { type: string; sequence_number: number } & Record<string, unknown>;

/** Numbers a stream's events in the order they are made, which is the order they are sent. */
class Sequence {
  private next = 0;

  event(type: string, fields: Record<string, unknown>): StreamEvent {
    return { type, ...fields, sequence_number: this.next++ } as StreamEvent;
  }
}

const copy = <T>(value: T): T => structuredClone(value);

/**
 * A choice's output as items: content opens (or continues) a `message` item with one
 * `output_text` part, a call opens a `function_call` item, and each step returns the stream events
 * it makes. Events carry copies of the items, since the items keep changing after them.
 */
class OutputBuilder {
  readonly output: OutputItem[] = [];
  private open: OutputItem | null = null;
  /** Log probabilities whose text the tool-call parser still holds: they ride on the next text delta. */
  private pendingLogprobs: ResponsesLogprob[] = [];

  constructor(private readonly seq: Sequence) {}

  /** The text of every `output_text` part, joined (the SDKs' `output_text`). */
  get text(): string {
    return this.output.flatMap((item) => (item.type === "message" ? item.content.map((p) => p.text) : [])).join("");
  }

  /** The events of parsed output pieces, with the log probabilities of the tokens they came from. */
  push(pieces: readonly (ToolOutputPiece | ReasoningPiece)[], logprobs: readonly ResponsesLogprob[]): StreamEvent[] {
    const events: StreamEvent[] = [];
    this.pendingLogprobs.push(...logprobs);
    for (const piece of pieces) {
      if (piece.type === "reasoning") {
        const { item, part } = this.reasoning(events);
        part.text += piece.text;
        events.push(
          this.seq.event("response.reasoning_text.delta", { item_id: item.id, output_index: this.indexOf(item), content_index: 0, delta: piece.text }),
        );
      } else if (piece.type === "content") {
        if (piece.text === "") continue;
        const { item, part } = this.message(events);
        part.text += piece.text;
        const carried = this.pendingLogprobs.splice(0);
        part.logprobs.push(...carried);
        events.push(
          this.seq.event("response.output_text.delta", {
            item_id: item.id,
            output_index: this.indexOf(item),
            content_index: 0,
            delta: piece.text,
            logprobs: carried,
          }),
        );
      } else if (piece.type === "call-start") {
        this.close(events, "completed");
        const item: FunctionCallItem = {
          id: responsesId("fc"),
          type: "function_call",
          status: "in_progress",
          arguments: "",
          call_id: piece.id,
          name: piece.name,
        };
        this.output.push(item);
        this.open = item;
        events.push(this.seq.event("response.output_item.added", { output_index: this.indexOf(item), item: copy(item) }));
      } else {
        const item = this.open as FunctionCallItem;
        item.arguments += piece.text;
        events.push(this.seq.event("response.function_call_arguments.delta", { item_id: item.id, output_index: this.indexOf(item), delta: piece.text }));
      }
    }
    return events;
  }

  /** Closes the output: an answer without items, or only reasoning, ends with an empty message; the last item is incomplete when `max_output_tokens` cut it. */
  finish(reason: FinishReason): StreamEvent[] {
    const events: StreamEvent[] = [];
    if (this.output.every((item) => item.type === "reasoning") && (this.output.length === 0 || reason !== "length")) this.message(events);
    if (this.open?.type === "message") this.open.content[0].logprobs.push(...this.pendingLogprobs.splice(0));
    this.close(events, reason === "length" ? "incomplete" : "completed");
    return events;
  }

  /** The open message item and its text part, opening them (and closing a call before) when needed. */
  private message(events: StreamEvent[]): { item: OutputMessage; part: OutputTextPart } {
    if (this.open?.type === "message") return { item: this.open, part: this.open.content[0] };
    this.close(events, "completed");
    const item: OutputMessage = { id: responsesId("msg"), type: "message", status: "in_progress", role: "assistant", content: [] };
    this.output.push(item);
    this.open = item;
    const output_index = this.indexOf(item);
    events.push(this.seq.event("response.output_item.added", { output_index, item: copy(item) }));
    const part: OutputTextPart = { type: "output_text", text: "", annotations: [], logprobs: [] };
    item.content.push(part);
    events.push(this.seq.event("response.content_part.added", { item_id: item.id, output_index, content_index: 0, part: copy(part) }));
    return { item, part };
  }

  /** The open reasoning item and its text part, opening them (and closing what was open) when needed. */
  private reasoning(events: StreamEvent[]): { item: ReasoningItem; part: ReasoningItem["content"][number] } {
    if (this.open?.type === "reasoning") return { item: this.open, part: this.open.content[0] };
    this.close(events, "completed");
    const item: ReasoningItem = { id: responsesId("rs"), type: "reasoning", status: "in_progress", summary: [], content: [] };
    this.output.push(item);
    this.open = item;
    const output_index = this.indexOf(item);
    events.push(this.seq.event("response.output_item.added", { output_index, item: copy(item) }));
    const part = { type: "reasoning_text" as const, text: "" };
    item.content.push(part);
    events.push(this.seq.event("response.content_part.added", { item_id: item.id, output_index, content_index: 0, part: copy(part) }));
    return { item, part };
  }

  private close(events: StreamEvent[], status: ItemStatus): void {
    const item = this.open;
    if (!item) return;
    this.open = null;
    const output_index = this.indexOf(item);
    if (item.type === "message") {
      const part = item.content[0];
      events.push(
        this.seq.event("response.output_text.done", { item_id: item.id, output_index, content_index: 0, text: part.text, logprobs: copy(part.logprobs) }),
      );
      events.push(this.seq.event("response.content_part.done", { item_id: item.id, output_index, content_index: 0, part: copy(part) }));
    } else if (item.type === "reasoning") {
      const part = item.content[0];
      events.push(this.seq.event("response.reasoning_text.done", { item_id: item.id, output_index, content_index: 0, text: part.text }));
      events.push(this.seq.event("response.content_part.done", { item_id: item.id, output_index, content_index: 0, part: copy(part) }));
    } else {
      events.push(this.seq.event("response.function_call_arguments.done", { item_id: item.id, output_index, name: item.name, arguments: item.arguments }));
    }
    item.status = status;
    events.push(this.seq.event("response.output_item.done", { output_index, item: copy(item) }));
  }

  private indexOf(item: OutputItem): number {
    return this.output.indexOf(item);
  }
}

/** The Responses API's usage: the same counts as chat's, under its names. */
export function responsesUsage(usage: Usage): ResponsesUsage {
  return {
    input_tokens: usage.prompt_tokens,
    input_tokens_details: { cached_tokens: usage.prompt_tokens_details.cached_tokens },
    output_tokens: usage.completion_tokens,
    output_tokens_details: { reasoning_tokens: usage.completion_tokens_details.reasoning_tokens },
    total_tokens: usage.total_tokens,
  };
}

function responsesLogprobs(entries: readonly EmittedTokenLogprob[] | undefined): ResponsesLogprob[] {
  return (entries ?? []).map((e) => ({
    token: e.token,
    logprob: e.logprob,
    bytes: e.bytes,
    top_logprobs: e.top.map((t) => ({ token: t.token, logprob: t.logprob, bytes: t.bytes })),
  }));
}

export function responsesFormat(model: ServedModel, options: ResponsesFormatOptions): AnswerFormat {
  const seq = new Sequence();
  const builder = new OutputBuilder(seq);
  const parser = options.tools ? new CallParser(model.toolDialect.syntax, () => model.toolDialect.newId()) : null;
  const thinking = options.reasoning ? new ThinkSplitter(options.reasoning.opened) : null;
  let written = "";
  /** The answer's content through the tool-call parser, when tools are on offer. */
  const answer = (text: string): ToolOutputPiece[] => (parser ? parser.push(text) : [{ type: "content", text }]);
  /** A piece of the choice's text as output pieces: reasoning as it is, the rest as the answer. */
  const pieces = (text: string, end = false): (ToolOutputPiece | ReasoningPiece)[] => {
    written += text;
    const split: ReasoningPiece[] = thinking ? thinking.feed(text, end) : [{ type: "content", text }];
    const out = split.flatMap((piece): (ToolOutputPiece | ReasoningPiece)[] => (piece.type === "reasoning" ? [piece] : answer(piece.text)));
    return end && parser ? [...out, ...parser.finish()] : out;
  };
  let finishReason: FinishReason | null = null;

  const response = (status: ResponseStatus, fields: Partial<ResponseObject> = {}): ResponseObject => {
    const { metadata, user, ...echoed } = options.echo;
    return {
      id: options.id,
      object: "response",
      created_at: options.createdAt,
      status,
      background: false,
      completed_at: status === "completed" ? unixNow() : null,
      error: null,
      incomplete_details: status === "incomplete" ? { reason: "max_output_tokens" } : null,
      ...echoed,
      output: copy(builder.output),
      usage: null,
      user,
      metadata,
      output_text: builder.text,
      ...fields,
    };
  };
  /** The finished response, handed to `onFinished` once. */
  const finished = async (usage: Usage): Promise<ResponseObject> => {
    const counted = options.reasoning ? withReasoningTokens(usage, model, [written], options.reasoning.opened) : usage;
    const done = response(finishReason === "length" ? "incomplete" : "completed", { usage: responsesUsage(counted) });
    if (finishReason !== null && finishReason !== "cancelled") await options.onFinished?.(done);
    return done;
  };

  return {
    framing: {
      end: "last-event",
      named: true,
      failure: (error: ApiError) => [
        seq.event("error", { code: error.wireCode, message: error.message, param: error.param }),
        seq.event("response.failed", { response: response("failed", { error: { code: error.wireCode ?? "server_error", message: error.message } }) }),
      ],
    },
    begin: () => [
      seq.event("response.created", { response: response("in_progress") }),
      seq.event("response.in_progress", { response: response("in_progress") }),
    ],
    start: () => null,
    delta: (_choice, text, logprobs) => builder.push(pieces(text), options.logprobs ? responsesLogprobs(logprobs) : []),
    finish: (_choice, reason) => {
      finishReason = reason;
      return [...builder.push(pieces("", true), []), ...builder.finish(reason)];
    },
    usage: async (usage) => {
      const done = await finished(usage);
      return seq.event(done.status === "completed" ? "response.completed" : "response.incomplete", { response: done });
    },
    complete: (choices, usage) => {
      const choice = choices[0];
      builder.push(pieces(choice.text, true), options.logprobs ? responsesLogprobs(choice.logprobs) : []);
      builder.finish(choice.finishReason);
      finishReason = choice.finishReason;
      return finished(usage);
    },
  };
}
