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
 *
 * With an output `format` beside "auto", the answer is either calls alone or content in that format
 * alone, as the reference API's structured outputs beside tools. A forced choice makes calls, so
 * the format waits for a later answer.
 */
export function toolConstraint(syntax: CallSyntax, use: ToolUse, format?: ConstraintSpec): ConstraintSpec {
  const tools = typeof use.choice === "object" ? use.tools.filter((t) => t.name === (use.choice as { name: string }).name) : use.tools;
  const single = !use.parallel || syntax.maxCalls === 1;
  const forced = use.choice !== "auto";
  if (format !== undefined && !forced) {
    const answer = { type: "or", elements: [formatElement(format), boundedCalls(syntax, tools, single)] };
    return { type: "structural_tag", format: JSON.stringify(answer) };
  }
  const opener = syntax.open + syntax.pad;
  const closer = syntax.pad + syntax.close;
  let calls: Record<string, unknown>;
  if (syntax.array) {
    const list = {
      type: "tags_with_separator",
      tags: tools.map((fn) => callTag(syntax, fn)),
      separator: syntax.separator,
      at_least_one: true,
      stop_after_first: single,
    };
    const block = { type: "tag", begin: opener + "[", content: list, end: "]" + closer };
    calls = forced ? block : { type: "triggered_tags", triggers: [syntax.open], tags: [block], stop_after_first: true };
  } else if (syntax.open === "") {
    // The call is the message: it opens with the call's own head.
    const tags = tools.map((fn) => callTag(syntax, fn));
    calls = forced
      ? { type: "tags_with_separator", tags, separator: syntax.separator, at_least_one: true, stop_after_first: single }
      : { type: "triggered_tags", triggers: [`{"name": `], tags, stop_after_first: single };
  } else {
    const tags = tools.map((fn) => callTag(syntax, fn, opener, closer));
    calls = forced
      ? { type: "tags_with_separator", tags, separator: syntax.separator, at_least_one: true, stop_after_first: single }
      : { type: "triggered_tags", triggers: [syntax.open], tags, stop_after_first: single };
  }
  return { type: "structural_tag", format: JSON.stringify(calls) };
}

/**
 * Forced calls as a format that ends by itself, which the engine needs beside another alternative:
 * a block's calls go inside one tag whose end is the block's closer, the text between calls being
 * the separator between blocks. A syntax without an opener or a closer writes one call here (Llama
 * 3's makes one anyway).
 */
function boundedCalls(syntax: CallSyntax, tools: ToolFunction[], single: boolean): Record<string, unknown> {
  const opener = syntax.open + syntax.pad;
  const closer = syntax.pad + syntax.close;
  const tags = tools.map((fn) => callTag(syntax, fn));
  if (syntax.array) {
    const calls = { type: "tags_with_separator", tags, separator: syntax.separator, at_least_one: true, stop_after_first: single };
    return { type: "tag", begin: opener + "[", content: calls, end: "]" + closer };
  }
  if (syntax.open === "" || closer === "") return { type: "or", elements: tools.map((fn) => callTag(syntax, fn, opener, closer)) };
  const between = closer + syntax.separator + opener;
  return {
    type: "tag",
    begin: opener,
    content: { type: "tags_with_separator", tags, separator: between, at_least_one: true, stop_after_first: single },
    end: closer,
  };
}

/**
 * An output constraint as a structural-tag element. A JSON object is the schema `{"type": "object"}`
 * (any members under kiln's schema settings); a choice is a grammar of its literals, which, unlike
 * const strings, may hold an empty one.
 */
function formatElement(spec: ConstraintSpec): Record<string, unknown> {
  switch (spec.type) {
    case "json_object":
      return { type: "json_schema", json_schema: { type: "object" } };
    case "json_schema":
      return { type: "json_schema", json_schema: JSON.parse(spec.schema) as unknown };
    case "regex":
      return { type: "regex", pattern: spec.pattern };
    case "choice":
      return { type: "grammar", grammar: "root ::= " + [...new Set(spec.choices)].map(gbnfLiteral).join(" | ") + "\n" };
    case "grammar":
      return { type: "grammar", grammar: spec.grammar };
    case "structural_tag":
      return JSON.parse(spec.format) as Record<string, unknown>;
  }
}

/** A GBNF string literal of `text`: quotes and backslashes escaped, everything outside printable ASCII as \u or \U escapes. */
function gbnfLiteral(text: string): string {
  let out = '"';
  for (const ch of text) {
    const cp = ch.codePointAt(0)!;
    if (ch === '"' || ch === "\\") out += "\\" + ch;
    else if (cp >= 0x20 && cp < 0x7f) out += ch;
    else if (cp <= 0xffff) out += "\\u" + cp.toString(16).padStart(4, "0");
    else out += "\\U" + cp.toString(16).padStart(8, "0");
  }
  return out + '"';
}
