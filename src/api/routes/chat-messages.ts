/** A chat's messages as the wire gives them, turned into what the model's chat template renders. */
import type { ChatMessage } from "../../scheduler/index.js";
import type { ChatMessageIn } from "../protocol/chat-completions.js";

/**
 * A validated wire message as the chat template sees it: `developer` is the system role to templates,
 * content parts are text only, tool calls are `{id, type, function: {name, arguments}}` with the
 * arguments still the JSON string (the template's own shape is the renderer's choice).
 */
export function templateMessage(m: ChatMessageIn): ChatMessage {
  const out: ChatMessage = {
    role: m.role === "developer" ? "system" : m.role,
    content: Array.isArray(m.content) ? m.content.map((p) => ({ type: "text", text: p.text ?? "" })) : (m.content ?? null),
  };
  if (m.name) out.name = m.name;
  if (m.tool_calls?.length) {
    out.tool_calls = m.tool_calls.map((c) => ({ id: c.id, type: c.type, function: { name: c.function.name, arguments: c.function.arguments } }));
  }
  if (m.tool_call_id) out.tool_call_id = m.tool_call_id;
  return out;
}

/** Characters of text in `messages` (contents and text parts): what their prompt holds at least, before the template adds its own. */
export function messageChars(messages: readonly ChatMessage[]): number {
  let chars = 0;
  for (const m of messages) {
    if (typeof m.content === "string") chars += m.content.length;
    else for (const part of m.content ?? []) chars += typeof part.text === "string" ? part.text.length : 0;
  }
  return chars;
}
