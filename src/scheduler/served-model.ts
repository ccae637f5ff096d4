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
  /**
   * Most bytes the KV cache may take, all slots together. Every slot holds as many positions as the
   * longest sequence, so the budget caps each sequence's context (prompt plus completion) at
   * budget / (slots x bytes per position), rounded down to the cache's growth step; prompts past it
   * get `context_length_exceeded` and generation stops there with `length`. Default: no cap beyond
   * the model's own context.
   */
  kvMemoryBytes?: number;
}

/** Positions one slot's cache grows by (KvPool's default chunk). */
const KV_GROWTH = 128;

/** The context each sequence may use so that every slot's KV cache fits the budget. */
export function servedContextLength(
  shape: { layers: number; kvHeads: number; headDim: number; contextLength: number },
  slots: number,
  kvMemoryBytes?: number,
): number {
  if (kvMemoryBytes === undefined) return shape.contextLength;
  const bytesPerPosition = 2 * shape.layers * shape.kvHeads * shape.headDim * 4 * slots;
  const fits = Math.floor(kvMemoryBytes / bytesPerPosition / KV_GROWTH) * KV_GROWTH;
  if (fits < KV_GROWTH) throw new RangeError(`a KV budget of ${kvMemoryBytes} bytes does not hold ${KV_GROWTH} positions for ${slots} slots`);
  return Math.min(shape.contextLength, fits);
}

/** Serves a loaded runtime with a {@link BatchEngine} (or a {@link SerialEngine}) in front of it. */
export function textModel(runtime: TextRuntime, options: TextModelServeOptions = {}): ServedModel {
  const slug = runtime.manifest.slug;
  const contextLength = servedContextLength(runtime.worker.info.shape, runtime.worker.info.slots, options.kvMemoryBytes);
  const engine: Engine =
    options.engine === "serial"
      ? new SerialEngine(runtimeBackend(runtime), { name: slug, maxWaiting: options.maxWaiting })
      : new BatchEngine(workerStepBackend(runtime, contextLength), {
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
    contextLength,
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
