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

/**
 * The wire's messages as the chat template sees them ({@link templateMessage}), with deprecated
 * function-calling turns in today's shape, which templates are written for: an assistant's
 * `function_call` becomes its one tool call, under an id from `newId` (the model's own form of
 * call id), and a `function` message the `tool` result of the call before it.
 */
export function templateMessages(messages: readonly ChatMessageIn[], newId: () => string): ChatMessage[] {
  let lastCallId: string | undefined;
  return messages.map((m) => {
    if (m.role === "assistant" && m.function_call) {
      lastCallId = newId();
      const call = { id: lastCallId, type: "function", function: { name: m.function_call.name, arguments: m.function_call.arguments } };
      return { ...templateMessage(m), tool_calls: [call] };
    }
    if (m.role === "function") return { ...templateMessage({ ...m, role: "tool" }), tool_call_id: lastCallId ?? newId() };
    return templateMessage(m);
  });
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
