/**
 * A model the server answers with: how to turn a request into prompt tokens, and the engine that
 * generates from them. The API layer only sees this interface; `textModel()` builds it from a
 * loaded {@link TextRuntime}, tests build fakes.
 */
import type { TextRuntime } from "../runtime/text-runtime.js";
import { BatchEngine } from "./batch-engine.js";
import type { PrefixReuse } from "./kv-slots.js";
import { runtimeBackend } from "./runtime-backend.js";
import { SerialEngine } from "./serial-engine.js";
import { workerStepBackend } from "./step-backend.js";
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
  /**
   * "batch" (default): continuous batching over every KV slot the runtime was loaded with
   * (`TextModelOptions.slots`); "serial": one sequence at a time on slot 0.
   */
  engine?: "batch" | "serial";
  /** Most requests waiting per model before new ones get 503. Default 64. */
  maxWaiting?: number;
  /** Batch engine: most sequences running at once. Default: the runtime's slots. */
  maxRunning?: number;
  /** Batch engine: prompt tokens per prefill call. Default 256. */
  prefillChunk?: number;
  /** Batch engine: most tokens computed per step (decode rows + prompt tokens). Default 512. */
  stepTokens?: number;
  /** Batch engine: prompt prefix reuse across sequences. Default "exact". */
  prefixReuse?: PrefixReuse;
}

/** Serves a loaded runtime with a {@link BatchEngine} (or a {@link SerialEngine}) in front of it. */
export function textModel(runtime: TextRuntime, options: TextModelServeOptions = {}): ServedModel {
  const slug = runtime.manifest.slug;
  const engine: Engine =
    options.engine === "serial"
      ? new SerialEngine(runtimeBackend(runtime), { name: slug, maxWaiting: options.maxWaiting })
      : new BatchEngine(workerStepBackend(runtime), {
          name: slug,
          maxWaiting: options.maxWaiting,
          maxRunning: options.maxRunning,
          prefillChunk: options.prefillChunk,
          stepTokens: options.stepTokens,
          prefixReuse: options.prefixReuse,
        });
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
