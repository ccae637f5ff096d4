/**
 * Every listed model answers, on the real server through the official client (no retries, so
 * nothing hides a failure): `kiln serve -m whisper-tiny-en` with the text model pulled but not
 * started answers a chat with it after loading it on demand; a listed model never pulled is a 404
 * `model_not_pulled` naming `kiln pull`; and a server with no --model under a memory budget that
 * holds one of the two models at a time answers both, alternating, with no request failing.
 */
import { createReadStream } from "node:fs";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pullModel } from "../../../src/catalogue/pull/index.js";
import { TEXT_SLUG } from "../../support/model.js";
import { type RunningServer, startServer, stopServer } from "../../support/server.js";
import { speechFixture } from "../../support/speech.js";

const SPEECH_SLUG = "whisper-tiny-en";
/** A listed model this test home never pulls. */
const NEVER_PULLED = "qwen-2-5-0-5b-instruct";

let server: RunningServer | undefined;
let client: OpenAI;

beforeAll(async () => {
  await pullModel(TEXT_SLUG);
  await pullModel(SPEECH_SLUG);
  server = await startServer(SPEECH_SLUG, ["--keep-alive", "600"]);
  client = new OpenAI({ baseURL: server.baseURL, apiKey: "test", maxRetries: 0, timeout: 300_000 });
}, 600_000);

afterAll(async () => {
  expect(await stopServer(server)).toBe(0);
});

async function availability(c: OpenAI, slug: string): Promise<string> {
  return ((await c.models.retrieve(slug)) as unknown as { availability: string }).availability;
}

describe("kiln serve -m whisper-tiny-en, the text model pulled but not started", () => {
  it("lists the text model as loadable, answers a chat with it after loading it, then lists it as served", async () => {
    expect(await availability(client, SPEECH_SLUG)).toBe("served");
    expect(await availability(client, TEXT_SLUG)).toBe("loadable");
    expect(await availability(client, NEVER_PULLED)).toBe("not_pulled");
    const answer = await client.chat.completions.create({
      model: "HuggingFaceTB/SmolLM2-135M-Instruct",
      messages: [{ role: "user", content: "Name three primary colors." }],
      max_tokens: 16,
      temperature: 0,
    });
    expect(answer.model).toBe(TEXT_SLUG);
    expect(answer.choices[0].message.content).toMatch(/red|blue|yellow/i);
    expect(await availability(client, TEXT_SLUG)).toBe("served");
  }, 300_000);

  it("answers a listed model never pulled with 404 model_not_pulled naming kiln pull", async () => {
    const err = await client.chat.completions.create({ model: NEVER_PULLED, messages: [{ role: "user", content: "hi" }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect(err).toMatchObject({ status: 404, code: "model_not_pulled", param: "model" });
    expect((err as Error).message).toContain(`kiln pull ${NEVER_PULLED}`);
  });
});

describe("two models alternating under a memory budget that holds one", () => {
  let lru: RunningServer | undefined;
  let lruClient: OpenAI;
  beforeAll(async () => {
    // The text model takes about 230 MiB here (its weights and one 128-position KV step per slot), the speech model about 180 MiB.
    lru = await startServer(null, ["--memory-budget", "300"]);
    lruClient = new OpenAI({ baseURL: lru.baseURL, apiKey: "test", maxRetries: 0, timeout: 300_000 });
  }, 120_000);
  afterAll(async () => {
    expect(await stopServer(lru)).toBe(0);
  });

  it("answers every request, each model loaded again after the other evicted it", async () => {
    const audio = speechFixture("lighthouse").files.wav;
    const chat = () =>
      lruClient.chat.completions.create({ model: TEXT_SLUG, messages: [{ role: "user", content: "Say hello." }], max_tokens: 8, temperature: 0 });
    const transcribe = () => lruClient.audio.transcriptions.create({ model: SPEECH_SLUG, file: createReadStream(audio) });
    for (let round = 0; round < 2; round++) {
      // Both at once, then one after the other: each round evicts at least once.
      const [answer, transcript] = await Promise.all([chat(), transcribe()]);
      expect(answer.choices[0].message.content).not.toBe("");
      expect(transcript.text.length).toBeGreaterThan(0);
      expect((await chat()).choices[0].finish_reason).toBeDefined();
      expect((await transcribe()).text.length).toBeGreaterThan(0);
    }
    const served = await Promise.all([availability(lruClient, TEXT_SLUG), availability(lruClient, SPEECH_SLUG)]);
    expect(served.filter((a) => a === "served")).toHaveLength(1);
  }, 600_000);
});
