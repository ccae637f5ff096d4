/**
 * Prompt rendering: chat messages through the model's own chat template, and text to prompt
 * tokens the way llama.cpp's server does it (special-token text parsed, BOS added when the model
 * asks for it and the text lacks it).
 */
import type { ChatTemplate, Tokenizer } from "../../runtime/text/index.js";
import type { ChatMessage } from "../types.js";

/** Renders messages through the chat template, ready for the assistant's turn. */
export function renderChat(template: ChatTemplate, tokenizer: Tokenizer, messages: readonly ChatMessage[]): string {
  const text = (id: number | null) => (id === null ? undefined : tokenizer.tokenText(id));
  return template.render(messages, { addGenerationPrompt: true, bosToken: text(tokenizer.bosId), eosToken: text(tokenizer.eosId) });
}

/** Tokens of a prompt text. */
export function encodePrompt(tokenizer: Tokenizer, text: string): number[] {
  const ids = tokenizer.encode(text, { addSpecial: false, parseSpecial: true });
  const bos = tokenizer.bosId;
  if (tokenizer.addBos && bos !== null && ids[0] !== bos) ids.unshift(bos);
  return ids;
}
