export { Tokenizer, TokenizerError, unsupportedTokenizer, type EncodeOptions, type DecodeOptions, type DetokenizeOptions, type Literals } from "./tokenizer.js";
export { StreamDecoder } from "./stream-decoder.js";
export { PreTokenizer, UnsupportedPreTokenizerError, preTokenizerKind } from "./pre-tokenizer.js";
export {
  ChatTemplate,
  ChatTemplateError,
  renderChat,
  type ChatMessage,
  type ContentPart,
  type RenderChatOptions,
  type TemplateReasoning,
  type ToolHistoryCaps,
} from "./chat-template.js";
