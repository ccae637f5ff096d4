/**
 * The served model: what the API answers with. It turns a request into prompt tokens and owns the
 * engine that generates from them. `serveLoadedModel()` builds it over a loaded model; API unit
 * tests build one over a fake step runner.
 */
import { kvBytesPerSlot, servedContextLength } from "../../runtime/artifact/index.js";
import type { ComputeDevice } from "../../runtime/device/index.js";
import type { LoadedModel } from "../../runtime/loaded-model.js";
import type { ComputeGate } from "../compute-gate.js";
import { BatchEngine } from "../engine/batch-engine.js";
import { DEFAULT_DRAFT_TOKENS, DEFAULT_POOLING } from "../defaults.js";
import type { PrefixReuse } from "../engine/kv-slots.js";
import type { ChatMessage, Pooling } from "../types.js";
import { ChatTemplate, type TemplateReasoning } from "../../runtime/text/index.js";
import { getModel, hasModel, type Promotion } from "../../catalogue/index.js";
import { chooseToolDialect, type ToolDialect, type ToolFunction } from "../tools/index.js";
import {
  type ChatEnding,
  chatPromptIds,
  encodePrompt,
  infillContextRoom,
  infillPrompt,
  type InfillRequest,
  repositoryInfillPrompt,
  type SpecialTokenMode,
} from "./prompt.js";

/** How {@link ServedModel.chatPrompt} renders a chat, beyond its messages. */
export interface ChatOptions {
  /** Tools offered: given to the template, or described by the model's tool dialect when the template cannot render them. */
  tools?: readonly ToolFunction[];
  /** More variables for the template (`chat_template_kwargs`, `enable_thinking`). */
  variables?: Readonly<Record<string, unknown>>;
  /** Where the prompt ends (see {@link ChatEnding}). Default "assistant-turn". */
  ending?: ChatEnding;
}

export interface ServedModel {
  /** Tells text models from speech ones (`ServedSpeechModel`) in the registry. */
  kind: "text";
  slug: string;
  /** Id of the compiled artifact in service (the API's `system_fingerprint`). */
  artifactId: string;
  /** Where its graphs run, as provisioning loaded it. Absent: the CPU (test fakes). */
  device?: ComputeDevice;
  /** When that artifact was built (ISO 8601). */
  artifactCreatedAt: string;
  /**
   * The promotion the artifact serves under (why, with which settings, since when); null when the
   * default compile serves. Absent where provisioning did not choose the artifact (test fakes). The
   * live switch replaces it in place when the same artifact is promoted again with the same settings.
   */
  promotion?: Promotion | null;
  /**
   * The GGUF file (absolute path) of a model served from a local file rather than the catalogue;
   * absent for catalogue models.
   */
  localFile?: string;
  /** Tokens a request may use, prompt plus completion: the model's window, or less where the KV budget caps it. */
  contextLength: number;
  /** The model's own context window, in tokens. */
  nativeContextLength: number;
  /**
   * Most bytes the KV cache can grow to, all slots together: slots x `contextLength` x bytes per
   * position (within the KV budget, by construction). Absent where there is no real cache (test fakes).
   */
  kvMemoryBytes?: number;
  /** Token ids run 0..vocabSize-1 (bounds `logit_bias` keys). */
  vocabSize: number;
  /** Whether the model has a chat template (chat completions need one). */
  hasChatTemplate: boolean;
  /** The chat template's Jinja source (the model's own, or the one the server was given); null without one. Absent in test fakes. */
  chatTemplateSource?: string | null;
  /** The vocabulary's beginning- and end-of-sequence token ids (the GGUF's), null where it names none. Absent in test fakes. */
  sequenceTokens?: { bos: number | null; eos: number | null };
  /**
   * Renders messages through the model's chat template and tokenizes the result: only the template's
   * own scaffolding becomes control tokens, special-token text inside the messages stays text (see
   * {@link ServeOptions.specialTokens}). Throws `ChatTemplateError`.
   */
  chatPrompt(messages: readonly ChatMessage[], options?: ChatOptions): number[];
  /**
   * Whether the model reasons in `<think>` tags before it answers (from its chat template), and
   * whether its template can switch that off; null for a model that does not.
   */
  reasoning: TemplateReasoning | null;
  /** Most tokens the model thinks when a request names no budget (`ServeOptions.thinkingBudget`); absent: none. */
  thinkingBudget?: number;
  /** Tokens of generated text, special-token text counted as the control tokens the model wrote (for `reasoning_tokens`). */
  countTokens(text: string): number;
  /** Fewest tokens a prompt of `chars` characters can take (a bound known before tokenizing it). */
  fewestTokens(chars: number): number;
  /**
   * How this model writes tool calls: `tools` given to {@link chatPrompt} reach it through its
   * template, or through this dialect's instructions when the template cannot render them.
   */
  toolDialect: ToolDialect;
  /**
   * Tokenizes a raw completion prompt (special-token text stays text unless the server parses it,
   * or `special` says otherwise), with the BOS the model wants in front unless `bos` is false (default true).
   */
  textPrompt(text: string, bos?: boolean, special?: SpecialTokenMode): number[];
  /**
   * A fill-in-the-middle prompt (completions' `suffix`): the model writes what goes between
   * `prefix` (token ids, without BOS) and `suffix`. Null for a model whose vocabulary has no
   * fill-in-the-middle markers (see {@link fillsInMiddle}).
   */
  infillPrompt(prefix: readonly number[], suffix: string): number[] | null;
  /** Whether the model's vocabulary has fill-in-the-middle markers (prefix, suffix, middle). */
  fillsInMiddle: boolean;
  /** llama.cpp's `/infill` prompt: prefix, suffix and files as context (see `repositoryInfillPrompt`); null without the markers. */
  repositoryInfillPrompt(request: InfillRequest): number[] | null;
  /** Text of token ids (for `echo` of token prompts). */
  decode(ids: readonly number[]): string;
  /**
   * Text of token ids with control tokens written as their text, and a SentencePiece vocabulary's
   * added leading space taken off, so that it tokenizes back to the same ids (llama.cpp's detokenize).
   */
  detokenize(ids: readonly number[]): string;
  /** A token's vocabulary entry as the model's tokenizer stores it (byte-level form for BPE, "▁" for SentencePiece spaces). */
  tokenText(id: number): string;
  engine: BatchEngine;
  /** How the model makes embeddings; absent where it cannot (a model kind without final hidden states). */
  embeddings?: EmbeddingSupport;
  /** Lets running requests finish, then frees the model. */
  close(): Promise<void>;
}

/** What a served model's embeddings are (`GenerationRequest.embed`). */
export interface EmbeddingSupport {
  /** How an input's final hidden states become one vector. */
  pooling: Pooling;
  /** Values per embedding: the model's hidden size. */
  dimensions: number;
  /**
   * Token ids of a text input, with the BOS and EOS the vocabulary asks for around it (as llama.cpp
   * adds them to what it embeds) unless `special` is false (default true).
   */
  prompt(text: string, special?: boolean): number[];
}

/** How a loaded model is served (the `kiln serve` flags). */
/**
 * Bytes of a served text model's KV budget held in the host's memory: its budget on the CPU, none
 * on a GPU, whose KV pool lives in the adapter's memory (sized from it, see deviceKvPositions).
 */
export function hostKvMemoryBytes(model: Pick<ServedModel, "device" | "kvMemoryBytes">): number {
  return model.device === "webgpu" ? 0 : (model.kvMemoryBytes ?? 0);
}

export interface ServeOptions {
  /** Most requests waiting per model before new ones get 503. Default 64. */
  maxWaiting?: number;
  /** Most sequences running at once. Default: the loaded model's KV slots. */
  maxRunning?: number;
  /** Prompt tokens per prefill call. Default 256. */
  prefillChunk?: number;
  /** Most tokens computed per step (decode rows + prompt tokens). Default 512. */
  stepTokens?: number;
  /** Prompt prefix reuse across sequences. Default "exact". */
  prefixReuse?: PrefixReuse;
  /**
   * Most bytes the KV cache may take, all slots together. Every slot holds as many positions as the
   * longest sequence, so the budget caps each sequence's context (prompt plus completion) at
   * budget / (slots x bytes per position), rounded down to the cache's growth step; prompts past it
   * get `context_length_exceeded` and generation stops there with `length`. Default here: no cap
   * beyond the model's own context; `loadModel()` (so `kiln serve` and `kiln run`) fills in
   * `defaultKvMemoryBytes()` instead, sized from the machine's memory and the model.
   */
  kvMemoryBytes?: number;
  /**
   * Special-token text (`<|im_start|>`) in message contents and completion prompts: "text" (the
   * default, as the reference API does) tokenizes it as the characters it is, so a client cannot
   * forge turns or roles; "parse" turns it into control tokens, as llama.cpp's server and vLLM do,
   * for deployments that trust their clients. Token-id prompts are taken as they are either way.
   */
  specialTokens?: SpecialTokenMode;
  /** Turns on the machine shared with the other models of this process. Default: none. */
  gate?: ComputeGate;
  /** A Jinja chat template (its source) used instead of the one the model came with. Default: the model's own. */
  chatTemplate?: string;
  /**
   * Most prompt-lookup draft tokens checked per step when one sequence decodes alone (see
   * `BatchEngineOptions.draftTokens`); 0 turns them off. Drafts, a request's prediction included,
   * are checked only for models without sliding-window layers. Default {@link DEFAULT_DRAFT_TOKENS}.
   */
  draftTokens?: number;
  /**
   * Most tokens a reasoning model thinks when a request names no budget of its own (see
   * `GenerationRequest.thinkingBudget`); llama.cpp's `--reasoning-budget`. Default none: the model ends its own thinking.
   */
  thinkingBudget?: number;
  /**
   * How embeddings pool an input's final hidden states (see {@link Pooling}). Default
   * {@link DEFAULT_POOLING}: the last position's, as vLLM, Ollama and llama.cpp's bindings embed with
   * a generative model.
   */
  pooling?: Pooling;
}

/** Serves a loaded model: prompt rendering in front of a {@link BatchEngine} over its worker. */
export function serveLoadedModel(loaded: LoadedModel, options: ServeOptions = {}): ServedModel {
  const { manifest, tokenizer, worker } = loaded;
  const template = options.chatTemplate !== undefined ? new ChatTemplate(options.chatTemplate) : loaded.template;
  const slug = manifest.slug;
  const contextLength = servedContextLength(manifest.shape, worker.slots, options.kvMemoryBytes);
  const toolDialect = chooseToolDialect(template?.source ?? null, hasModel(slug) ? getModel(slug).family : undefined);
  const text = { createDecoder: (o?: { renderSpecial?: boolean }) => tokenizer.createStreamDecoder(o), tokenBytes: (id: number) => tokenizer.tokenBytes(id) };
  const engine = new BatchEngine(worker, text, {
    name: slug,
    contextLength,
    stopTokenIds: manifest.stopTokenIds,
    maxWaiting: options.maxWaiting,
    maxRunning: options.maxRunning,
    prefillChunk: options.prefillChunk,
    stepTokens: options.stepTokens,
    prefixReuse: options.prefixReuse,
    slidingWindow: manifest.shape.slidingWindow,
    gate: options.gate,
    draftTokens: options.draftTokens ?? DEFAULT_DRAFT_TOKENS,
    checksDrafts: !manifest.shape.slidingWindow,
  });
  return {
    kind: "text",
    slug,
    artifactId: manifest.id,
    artifactCreatedAt: manifest.createdAt,
    contextLength,
    nativeContextLength: manifest.shape.contextLength,
    kvMemoryBytes: worker.slots * kvBytesPerSlot(manifest.shape, contextLength),
    vocabSize: tokenizer.vocabSize,
    hasChatTemplate: template !== null,
    chatTemplateSource: template?.source ?? null,
    sequenceTokens: { bos: tokenizer.bosId, eos: tokenizer.eosId },
    chatPrompt(messages, { tools, variables, ending } = {}) {
      if (!template) throw new Error(`${slug} has no chat template`);
      return chatPromptIds(template, tokenizer, messages, options.specialTokens, { tools: tools && { tools, dialect: toolDialect }, variables, ending });
    },
    reasoning: template?.reasoning ?? null,
    ...(options.thinkingBudget !== undefined ? { thinkingBudget: options.thinkingBudget } : {}),
    countTokens: (text) => tokenizer.encode(text, { parseSpecial: true }).length,
    fewestTokens: (chars) => tokenizer.fewestTokens(chars),
    toolDialect,
    textPrompt: (prompt, bos, special) => encodePrompt(tokenizer, prompt, special ?? options.specialTokens, bos),
    infillPrompt: (prefix, suffix) => infillPrompt(tokenizer, prefix, suffix, options.specialTokens),
    fillsInMiddle: tokenizer.fim !== null,
    repositoryInfillPrompt: (request) => repositoryInfillPrompt(tokenizer, request, infillContextRoom(contextLength), options.specialTokens),
    decode: (ids) => tokenizer.decode(ids),
    detokenize: (ids) => tokenizer.detokenize(ids, { renderSpecial: true }),
    tokenText: (id) => tokenizer.tokenText(id),
    engine,
    embeddings: {
      pooling: options.pooling ?? DEFAULT_POOLING,
      dimensions: manifest.shape.hidden,
      prompt: (text: string, special = true) => {
        const ids = encodePrompt(tokenizer, text, options.specialTokens, special);
        if (special && tokenizer.addEos && tokenizer.eosId !== null && ids.at(-1) !== tokenizer.eosId) ids.push(tokenizer.eosId);
        return ids;
      },
    },
    async close() {
      await engine.close();
      await loaded.close();
    },
  };
}
