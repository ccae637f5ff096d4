/**
 * A model the server answers with: how to turn a request into prompt tokens, and the engine that
 * generates from them. The API layer only sees this interface; `textModel()` builds it from a
 * loaded {@link TextRuntime}, tests build fakes.
 */
import type { TextRuntime } from "../runtime/text-runtime.js";
import { runtimeBackend } from "./runtime-backend.js";
import { SerialEngine } from "./serial-engine.js";
import type { ChatMessage, Engine } from "./types.js";

export interface ServedModel {
  slug: string;
  /** Id of the compiled artifact in service (the API's `system_fingerprint`). */
  artifactId: string;
  /** When that artifact was built (ISO 8601). */
  artifactCreatedAt: string;
  /** Context window in tokens: prompt plus completion must fit in it. */
  contextLength: number;
  /** Token ids run 0..vocabSize-1 (bounds `logit_bias` keys). */
  vocabSize: number;
  /** Whether the model has a chat template (chat completions need one). */
  hasChatTemplate: boolean;
  /** Renders messages through the model's chat template and tokenizes the result. Throws `ChatTemplateError`. */
  chatPrompt(messages: readonly ChatMessage[]): number[];
  /** Tokenizes a raw completion prompt (special-token text is parsed, BOS added when the model wants it). */
  textPrompt(text: string): number[];
  /** Text of token ids (for `echo` of token prompts). */
  decode(ids: readonly number[]): string;
  engine: Engine;
  /** Lets running requests finish, then frees the model. */
  close(): Promise<void>;
}

export interface TextModelServeOptions {
  /** Most requests waiting per model before new ones get 503. Default 64. */
  maxWaiting?: number;
}

/** Serves a loaded runtime with a {@link SerialEngine} in front of it. */
export function textModel(runtime: TextRuntime, options: TextModelServeOptions = {}): ServedModel {
  const slug = runtime.manifest.slug;
  const engine = new SerialEngine(runtimeBackend(runtime), { name: slug, maxWaiting: options.maxWaiting });
  return {
    slug,
    artifactId: runtime.manifest.id,
    artifactCreatedAt: runtime.manifest.createdAt,
    contextLength: runtime.worker.info.shape.contextLength,
    vocabSize: runtime.tokenizer.vocabSize,
    hasChatTemplate: runtime.template !== null,
    chatPrompt: (messages) => runtime.encodePrompt(runtime.renderChat(messages)),
    textPrompt: (text) => runtime.encodePrompt(text),
    decode: (ids) => runtime.tokenizer.decode(ids),
    engine,
    async close() {
      await engine.close();
      await runtime.close();
    },
  };
}
