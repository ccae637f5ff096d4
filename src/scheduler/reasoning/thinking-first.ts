/**
 * A constraint that lets a reasoning model think first. Its thinking is free text up to `</think>`,
 * and the constraint holds only after it, as vLLM applies structured output past a reasoning
 * parser's end:
 * - a JSON schema, a regex, a choice, a grammar or a forced tool call would otherwise hold from the first token,
 *   leaving a model that always thinks (the DeepSeek-R1 distills) no room to;
 * - tool calls on `auto` are held to their grammar once their opening tag appears, and a model that
 *   writes that tag while it thinks ("I could use <tool_call> here") must not be forced into a call
 *   there, since its thinking is not read for calls.
 */
import type { ConstraintSpec } from "../../runtime/constrain/index.js";
import { THINK_CLOSE, THINK_OPEN } from "./think-split.js";

/** What may separate `</think>` from the answer: the line breaks such models write there. */
const AFTER_THINKING = { type: "regex", pattern: "\\n{0,2}" };

/**
 * `spec` behind the thinking, as one structural tag: when the prompt `opened` the thinking, the
 * output's free text up to `</think>` comes first; otherwise the output may start with
 * `<think>`…`</think>` (and up to two line breaks) or not. What follows is held to `spec` as it would be alone.
 */
export function thinkingFirst(spec: ConstraintSpec, opened: boolean): ConstraintSpec {
  const format = structuralFormat(spec);
  const thinking = { type: "tag", begin: opened ? "" : THINK_OPEN, content: { type: "any_text" }, end: THINK_CLOSE };
  const after = { type: "sequence", elements: [thinking, AFTER_THINKING, format] };
  return { type: "structural_tag", format: JSON.stringify(opened ? after : { type: "or", elements: [after, format] }) };
}

/** `spec` as a structural-tag format that accepts the same outputs. */
function structuralFormat(spec: ConstraintSpec): unknown {
  switch (spec.type) {
    case "structural_tag":
      return JSON.parse(spec.format);
    case "json_schema":
      return { type: "json_schema", json_schema: JSON.parse(spec.schema) };
    case "json_object":
      // Any object: the engine's schemas are strict, so unlisted properties must be let in by name.
      return { type: "json_schema", json_schema: { type: "object", additionalProperties: true } };
    case "regex":
      return { type: "regex", pattern: spec.pattern };
    case "grammar":
      return { type: "grammar", grammar: spec.grammar };
    case "choice":
      return spec.choices.includes("")
        ? { type: "regex", pattern: optionalChoice(spec.choices) }
        : { type: "or", elements: spec.choices.map((value) => ({ type: "const_string", value })) };
  }
}

/** A regex of the choices where one is empty, which a const string cannot be: the others, optional. */
function optionalChoice(choices: readonly string[]): string {
  const others = choices.filter((c) => c !== "");
  return others.length === 0 ? "(?:)" : `(?:${others.map(literalPattern).join("|")})?`;
}

/** A regex matching `text` exactly: its punctuation escaped. */
function literalPattern(text: string): string {
  return text.replace(/[\\^$.*+?()[\]{}|/-]/g, "\\$&");
}
