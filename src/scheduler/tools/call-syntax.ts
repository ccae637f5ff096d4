/**
 * How a family writes tool calls, as data: every dialect is one {@link CallSyntax}, from which both
 * the constraint that makes the model write calls that way (an xgrammar structural tag) and the
 * parser that reads them back are derived, so the two can never disagree.
 */
import type { ConstraintSpec } from "../../runtime/constrain/index.js";
import type { ToolFunction, ToolUse } from "./types.js";

/**
 * The written form of calls. A call is always the JSON object `{"name": <name>, "<argumentsKey>": <arguments>}`;
 * calls come in blocks that `open` starts and `close` ends, one call per block or (`array`) a JSON
 * array of calls per block.
 */
export interface CallSyntax {
  /** Text that starts a block ("<tool_call>", "[TOOL_CALLS]"); "" when a call is the message itself (Llama 3). */
  open: string;
  /** Text that ends a block ("</tool_call>"); "" for none. */
  close: string;
  /** Text the constraint puts right after `open` and right before `close` (Hermes writes each on its own line). */
  pad: string;
  /** A block holds a JSON array of calls rather than one call. */
  array: boolean;
  /** What the constraint puts between blocks (one call per block) or between the calls of an array. */
  separator: string;
  /** The key of the arguments object. */
  argumentsKey: "arguments" | "parameters";
  /**
   * Calls count only at the very start of the message (after white space): text that merely looks
   * like a call later in prose is text. Otherwise a block may follow prose.
   */
  atStartOnly: boolean;
  /** Most calls per answer whatever `parallel_tool_calls` says (Llama 3 makes one). Default unlimited. */
  maxCalls?: number;
}

/** The beginning of a call up to its arguments, as the constraint writes it. */
export function callHead(syntax: CallSyntax, name: string): string {
  return `{"name": ${JSON.stringify(name)}, "${syntax.argumentsKey}": `;
}

/** A structural-tag element for one call of `fn`: head, arguments valid against its parameters, closing brace. */
function callTag(syntax: CallSyntax, fn: ToolFunction, before = "", after = "") {
  return { type: "tag", begin: before + callHead(syntax, fn.name), content: { type: "json_schema", json_schema: fn.parameters }, end: "}" + after };
}

/**
 * The constraint for a tool use: with "auto", text is free until the block opener (the trigger),
 * then the block must hold valid calls; with "required" or a named function, the answer is calls
 * and nothing else. `parallel: false` (or the syntax's `maxCalls` of 1) allows one call.
 */
export function toolConstraint(syntax: CallSyntax, use: ToolUse): ConstraintSpec {
  const tools = typeof use.choice === "object" ? use.tools.filter((t) => t.name === (use.choice as { name: string }).name) : use.tools;
  const single = !use.parallel || syntax.maxCalls === 1;
  const forced = use.choice !== "auto";
  const opener = syntax.open + syntax.pad;
  const closer = syntax.pad + syntax.close;
  let format: Record<string, unknown>;
  if (syntax.array) {
    const calls = {
      type: "tags_with_separator",
      tags: tools.map((fn) => callTag(syntax, fn)),
      separator: syntax.separator,
      at_least_one: true,
      stop_after_first: single,
    };
    const block = { type: "tag", begin: opener + "[", content: calls, end: "]" + closer };
    format = forced ? block : { type: "triggered_tags", triggers: [syntax.open], tags: [block], stop_after_first: true };
  } else if (syntax.open === "") {
    // The call is the message: it opens with the call's own head.
    const tags = tools.map((fn) => callTag(syntax, fn));
    format = forced
      ? { type: "tags_with_separator", tags, separator: syntax.separator, at_least_one: true, stop_after_first: single }
      : { type: "triggered_tags", triggers: [`{"name": `], tags, stop_after_first: single };
  } else {
    const tags = tools.map((fn) => callTag(syntax, fn, opener, closer));
    format = forced
      ? { type: "tags_with_separator", tags, separator: syntax.separator, at_least_one: true, stop_after_first: single }
      : { type: "triggered_tags", triggers: [syntax.open], tags, stop_after_first: single };
  }
  return { type: "structural_tag", format: JSON.stringify(format) };
}
