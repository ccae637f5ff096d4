/** Tool calling as the scheduler sees it: the functions a request offers, and the calls parsed from output. */

/** One function a request offers the model (the reference API's `tools[].function`). */
export interface ToolFunction {
  /** 1-64 letters, digits, underscores or dashes; unique within a request. */
  name: string;
  description?: string;
  /** JSON schema of the arguments object (checked enforceable by the API); `{type:"object",properties:{}}` when the client gave none. */
  parameters: Record<string, unknown>;
}

/** What a request asks of tool calling (absent when the model must not call tools). */
export interface ToolUse {
  tools: ToolFunction[];
  /** "auto": the model decides, a call is constrained once it starts; "required": at least one call; `{name}`: exactly that function. */
  choice: "auto" | "required" | { name: string };
  /** Whether more than one call may come in one answer (false: at most one). */
  parallel: boolean;
}

/**
 * A piece of a choice's output, parsed: text for `content`, or part of a tool call. A call comes as
 * one `call-start` (its index, id and name) followed by `call-arguments` pieces whose texts
 * concatenate to the arguments' JSON text, exactly as the model wrote it.
 */
export type ToolOutputPiece =
  | { type: "content"; text: string }
  | { type: "call-start"; index: number; id: string; name: string }
  | { type: "call-arguments"; index: number; text: string };

/** Parses one choice's output text as it streams: feed text, then finish once. */
export interface ToolCallParser {
  /** The pieces `text` completes (text that may still turn out to start a call is held back). */
  push(text: string): ToolOutputPiece[];
  /** What was held back, at the end of the output (text that never became a call is content). */
  finish(): ToolOutputPiece[];
  /** Calls started so far. */
  readonly calls: number;
}
