/**
 * A served model without a model: a character-level "tokenizer" over a small vocabulary and a
 * scripted fake step runner under the real batch engine, so API tests exercise the whole request
 * path, batching included.
 */
import { buildApp, type AppOptions } from "../../../src/api/app.js";
import { BatchEngine, type BatchEngineOptions, ModelRegistry, type ServedModel } from "../../../src/scheduler/index.js";
import { hermes } from "../../../src/scheduler/tools/hermes.js";
import type { ChatMessage, Pooling, ToolFunction } from "../../../src/scheduler/index.js";
import { FAKE_HIDDEN_WIDTH, fakeStepRunner, type FakeStepOptions, type FakeStepRunner } from "../scheduler/engine/fake-step-runner.js";

export const SLUG = "smollm2-135m-instruct";

/** Token ids: 0..255 are single bytes (so any ASCII prompt tokenizes char by char), then words. */
export const WORDS = ["Hello", " world", "!", " END", "</s", ">", " again", "<eos>"];
export const word = (w: string) => 256 + WORDS.indexOf(w);
/** The fake model's vocabulary (a test may pass a longer one to `fakeModel` as `vocab`). */
export const VOCAB: ReadonlyArray<string | Uint8Array> = [...Array.from({ length: 256 }, (_, i) => Uint8Array.of(i)), ...WORDS];

/** The fake model's end-of-turn token. */
export const EOS = 256 + WORDS.indexOf("<eos>");

export interface FakeModel {
  model: ServedModel;
  backend: FakeStepRunner;
  /** Prompts the model was asked to render (the chat messages it got). */
  rendered: ChatMessage[][];
  /** The tools each rendered prompt offered (undefined: none). */
  renderedTools: Array<readonly ToolFunction[] | undefined>;
  /** The template variables each rendered prompt was given (undefined: none). */
  renderedVariables: Array<Readonly<Record<string, unknown>> | undefined>;
}

export type FakeModelOptions = Partial<FakeStepOptions> &
  Partial<Pick<BatchEngineOptions, "maxWaiting" | "maxRunning" | "maxBacklog">> & {
    contextLength?: number;
    /** The model's own window, in tokens (what a KV budget would cut down to `contextLength`). Default `contextLength`. */
    nativeContextLength?: number;
    slug?: string;
    /** Milliseconds each model step takes. Default 0. */
    tokenDelayMs?: number;
    /** The model reasons in `<think>` tags (as its template would say). Default: it does not. */
    reasoning?: ServedModel["reasoning"];
    /** The rendered prompt ends by opening the reasoning (`<think>\n`), as DeepSeek-R1 distills' templates do, unless `enable_thinking` is false. Default false. */
    opensThinking?: boolean;
    /** The vocabulary has fill-in-the-middle markers: bytes 1, 2 and 3 (prefix, suffix, middle). Default false. */
    fillsInMiddle?: boolean;
    /** How embeddings pool (see `ServeOptions.pooling`). Default "last". */
    pooling?: Pooling;
    /** false: the model makes no embeddings. Default true. */
    embeds?: boolean;
  };

/** The fake's fill-in-the-middle markers (with `fillsInMiddle`): prefix, suffix, middle. */
export const FIM = { prefix: 1, suffix: 2, middle: 3 };

export function fakeModel(options: FakeModelOptions = {}): FakeModel {
  const contextLength = options.contextLength ?? 512;
  const backend = fakeStepRunner({
    slots: 4,
    vocab: [...VOCAB],
    script: [word("Hello"), word(" world"), word("!")],
    stopTokenIds: [EOS],
    stepDelayMs: options.tokenDelayMs,
    ...options,
    contextLength,
  });
  const engine = new BatchEngine(backend, backend, {
    name: options.slug ?? SLUG,
    contextLength,
    stopTokenIds: [EOS],
    maxWaiting: options.maxWaiting,
    maxRunning: options.maxRunning,
    maxBacklog: options.maxBacklog,
  });
  const encode = (text: string) => [...new TextEncoder().encode(text)];
  const rendered: ChatMessage[][] = [];
  const renderedTools: Array<readonly ToolFunction[] | undefined> = [];
  const renderedVariables: Array<Readonly<Record<string, unknown>> | undefined> = [];
  const model: ServedModel = {
    kind: "text",
    slug: options.slug ?? SLUG,
    artifactId: "fake-artifact-1",
    artifactCreatedAt: "2025-01-02T03:04:05.000Z",
    contextLength,
    nativeContextLength: options.nativeContextLength ?? contextLength,
    vocabSize: options.vocab?.length ?? VOCAB.length,
    hasChatTemplate: true,
    chatPrompt(messages, { tools, variables, ending = "assistant-turn" } = {}) {
      rendered.push(messages.map((m) => ({ ...m })));
      renderedTools.push(tools);
      renderedVariables.push(variables);
      const opened = options.opensThinking && variables?.enable_thinking !== false ? "<think>\n" : "";
      return encode(
        messages.map((m) => `<${m.role}>${typeof m.content === "string" ? m.content : JSON.stringify(m.content)}`).join("") +
          (ending === "assistant-turn" ? "<assistant>" + opened : ""),
      );
    },
    reasoning: options.reasoning ?? null,
    countTokens: (text) => encode(text).length,
    // One token per byte, and a character is at least one byte.
    fewestTokens: (chars) => chars,
    toolDialect: hermes,
    textPrompt: encode,
    infillPrompt: (prefix, suffix) => (options.fillsInMiddle ? [FIM.prefix, ...prefix, FIM.suffix, ...encode(suffix), FIM.middle] : null),
    fillsInMiddle: options.fillsInMiddle ?? false,
    // The fake's layout for llama.cpp's /infill: each file's name and text, then the prefix, the prompt and the suffix between the markers.
    repositoryInfillPrompt: ({ prefix, suffix, prompt, extra }) =>
      options.fillsInMiddle
        ? [...extra.flatMap((f) => encode(`${f.filename}:${f.text}`)), FIM.prefix, ...encode(prefix + prompt), FIM.suffix, ...encode(suffix), FIM.middle]
        : null,
    decode: (ids) => new TextDecoder().decode(Uint8Array.from(ids.filter((i) => i < 256))),
    detokenize: (ids) => ids.map((id) => (id < 256 ? String.fromCharCode(id) : `<${id}>`)).join(""),
    tokenText: (id) => (id < 256 ? String.fromCharCode(id) : `<${id}>`),
    engine,
    // The fake's vocabulary asks for EOS after an embedded text, as some embedding models' do.
    ...(options.embeds === false
      ? {}
      : {
          embeddings: {
            pooling: options.pooling ?? "last",
            dimensions: FAKE_HIDDEN_WIDTH,
            prompt: (text, special = true) => (special ? [...encode(text), EOS] : encode(text)),
          },
        }),
    close: () => engine.close(),
  };
  return { model, backend, rendered, renderedTools, renderedVariables };
}

export async function fakeApp(options: Partial<AppOptions> & { fake?: FakeModel } = {}) {
  const fake = options.fake ?? fakeModel();
  const models = options.models ?? new ModelRegistry();
  if (!options.models) models.serve(fake.model);
  const app = await buildApp({ ...options, models });
  return { app, fake, models };
}

export const AUTH = { authorization: "Bearer sk-test" };

/** `usage.completion_tokens_details` of kiln's models: nothing reasoned, predicted or spoken. */
export const NO_DETAILS = { reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 };

/** The parsed `data:` events of an SSE body (the [DONE] marker as the string "[DONE]"). */
export function sseEvents(body: string): unknown[] {
  expectWellFormedSse(body);
  return body
    .split("\n\n")
    .filter((block) => block.startsWith("data: "))
    .map((block) => block.slice("data: ".length))
    .map((data) => (data === "[DONE]" ? "[DONE]" : JSON.parse(data)));
}

function expectWellFormedSse(body: string): void {
  if (!body.endsWith("\n\n")) throw new Error(`SSE body does not end with a blank line: ${JSON.stringify(body.slice(-40))}`);
  for (const block of body.slice(0, -2).split("\n\n")) {
    if (!/^(data: [^\n]*|: [^\n]*)$/.test(block)) throw new Error(`malformed SSE event: ${JSON.stringify(block)}`);
  }
}
