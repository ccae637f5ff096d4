/**
 * A structural constraint that lets a reasoning model think first. Tool calls on `auto` are held to
 * their grammar once their opening tag appears; a model that writes that tag while it thinks
 * ("I could use <tool_call> here") must not be forced into a call there, since its thinking is not
 * read for calls. So the thinking is free text up to `</think>`, and the constraint applies after it,
 * as vLLM applies structured output past a reasoning parser's end.
 */
import type { ConstraintSpec } from "../../runtime/constrain/index.js";
import { THINK_CLOSE, THINK_OPEN } from "./think-split.js";

/**
 * `spec` behind an optional thinking: when the prompt `opened` it, the output's free text up to
 * `</think>` comes first; otherwise the output may start with `<think>`…`</think>` or not.
 * Other constraint types start at the first token, and come back as they are.
 */
export function thinkingFirst(spec: ConstraintSpec, opened: boolean): ConstraintSpec {
  if (spec.type !== "structural_tag") return spec;
  const format = JSON.parse(spec.format) as Record<string, unknown>;
  const thinking = { type: "tag", begin: opened ? "" : THINK_OPEN, content: { type: "any_text" }, end: THINK_CLOSE };
  const after = { type: "sequence", elements: [thinking, format] };
  return { type: "structural_tag", format: JSON.stringify(opened ? after : { type: "or", elements: [after, format] }) };
}
