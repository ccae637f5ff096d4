/**
 * A served model without a model: a character-level "tokenizer" over a small vocabulary and a
 * scripted backend under the real SerialEngine, so API tests exercise the whole request path.
 */
import { buildApp, type AppOptions } from "../../../src/api/app.js";
import { ModelRegistry } from "../../../src/scheduler/model-registry.js";
import { SerialEngine } from "../../../src/scheduler/serial-engine.js";
import type { ServedModel } from "../../../src/scheduler/served-model.js";
import type { ChatMessage } from "../../../src/scheduler/types.js";
import { fakeBackend, type FakeBackend, type FakeBackendOptions } from "../scheduler/fake-backend.js";

export const SLUG = "smollm2-135m-instruct";

/** Token ids: 0..255 are single bytes (so any ASCII prompt tokenizes char by char), then words. */
export const WORDS = ["Hello", " world", "!", " END", "</s", ">", " again"];
export const word = (w: string) => 256 + WORDS.indexOf(w);
const vocab: Array<string | Uint8Array> = [...Array.from({ length: 256 }, (_, i) => Uint8Array.of(i)), ...WORDS];

export interface FakeModel {
  model: ServedModel;
  backend: FakeBackend;
  /** Prompts the model was asked to render (the chat messages it got). */
  rendered: ChatMessage[][];
}

export function fakeModel(options: Partial<FakeBackendOptions> & { contextLength?: number; slug?: string; maxWaiting?: number } = {}): FakeModel {
  const backend = fakeBackend({ vocab, script: [word("Hello"), word(" world"), word("!")], ...options });
  const engine = new SerialEngine(backend, { name: options.slug ?? SLUG, maxWaiting: options.maxWaiting });
  const encode = (text: string) => [...new TextEncoder().encode(text)];
  const rendered: ChatMessage[][] = [];
  const model: ServedModel = {
    slug: options.slug ?? SLUG,
    artifactId: "fake-artifact-1",
    artifactCreatedAt: "2025-01-02T03:04:05.000Z",
    contextLength: options.contextLength ?? 512,
    vocabSize: vocab.length,
    hasChatTemplate: true,
    chatPrompt(messages) {
      rendered.push(messages.map((m) => ({ ...m })));
      return encode(messages.map((m) => `<${m.role}>${typeof m.content === "string" ? m.content : JSON.stringify(m.content)}`).join("") + "<assistant>");
    },
    textPrompt: encode,
    decode: (ids) => new TextDecoder().decode(Uint8Array.from(ids.filter((i) => i < 256))),
    engine,
    close: () => engine.close(),
  };
  return { model, backend, rendered };
}

export async function fakeApp(options: Partial<AppOptions> & { fake?: FakeModel } = {}) {
  const fake = options.fake ?? fakeModel();
  const models = options.models ?? new ModelRegistry();
  if (!options.models) models.serve(fake.model);
  const app = await buildApp({ ...options, models });
  return { app, fake, models };
}

export const AUTH = { authorization: "Bearer sk-test" };

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
