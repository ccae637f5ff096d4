/**
 * The real server process on the real model, driven by the official `openai` client: what a user
 * gets when only the base URL and key change. One `kiln serve` process for the whole file.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import OpenAI, { AuthenticationError, BadRequestError, NotFoundError } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ARTIFACT_FILES, readManifest, readTokenizerSpec } from "../../../src/runtime/artifact/index.js";
import { ChatTemplate, Tokenizer } from "../../../src/runtime/text/index.js";
import { compiledArtifact, TEXT_SLUG } from "../../support/model.js";
import { type RunningServer, startServer, stopServer } from "../../support/server.js";

const MODEL = TEXT_SLUG;

let server: RunningServer;
let baseURL: string;
let client: OpenAI;
let tokenizer: Tokenizer;
let template: ChatTemplate;
let artifactId: string;

/** Prompt tokens exactly as kiln counts them: the model's template, then its tokenizer. */
function promptTokens(messages: Array<{ role: string; content: string }>): number {
  const text = template.render(messages, {
    addGenerationPrompt: true,
    bosToken: tokenizer.bosId === null ? undefined : tokenizer.tokenText(tokenizer.bosId),
    eosToken: tokenizer.eosId === null ? undefined : tokenizer.tokenText(tokenizer.eosId),
  });
  const ids = tokenizer.encode(text, { parseSpecial: true });
  return ids.length + (tokenizer.addBos && ids[0] !== tokenizer.bosId ? 1 : 0);
}

async function metric(name: string): Promise<number> {
  const text = await (await fetch(baseURL.replace(/\/v1$/, "/metrics"))).text();
  const line = text.split("\n").find((l) => l.startsWith(`${name}{model="${MODEL}"}`) || l.startsWith(`${name}{model="${MODEL}",`));
  return line ? Number(line.slice(line.lastIndexOf(" ") + 1)) : 0;
}

beforeAll(async () => {
  // The artifact the server will use (compiled once, cached) and its tokenizer, for exact counts.
  const { dir } = await compiledArtifact();
  artifactId = readManifest(dir).id;
  tokenizer = Tokenizer.fromSpec(readTokenizerSpec(dir));
  template = new ChatTemplate(readFileSync(join(dir, ARTIFACT_FILES.chatTemplate), "utf8"));

  server = await startServer(MODEL, ["--kv-memory-mb", "4096"]); // a fixed budget: the default depends on the machine's memory
  baseURL = server.baseURL;
  client = new OpenAI({ baseURL, apiKey: "sk-local-anything", maxRetries: 0, timeout: 60_000 });
});

afterAll(async () => {
  expect(await stopServer(server), server?.stderr()).toBe(0);
});

describe("kiln serve with the openai client", () => {
  it("is healthy once ready", async () => {
    const health = await fetch(baseURL.replace(/\/v1$/, "/health"));
    expect(health.status).toBe(200);
    expect(health.headers.get("x-request-id")).toBeTruthy();
  });

  it("lists and retrieves models", async () => {
    const list = await client.models.list();
    expect(list.data).toHaveLength(42);
    const served = list.data.find((m) => m.id === MODEL) as unknown as Record<string, unknown>;
    expect(served).toMatchObject({ object: "model", status: "serving", artifact_id: artifactId, context_length: 5760, native_context_length: 8192 }); // 16 slots in the 4 GiB KV budget given
    expect(list.data.filter((m) => (m as unknown as { status: string }).status === "serving")).toHaveLength(1);
    const one = await client.models.retrieve(MODEL);
    expect(one.id).toBe(MODEL);
    expect((one as unknown as { pricing: object }).pricing).toHaveProperty("input_usd_per_million_tokens");
  });

  it("chats without streaming; usage is the tokenizer's count", async () => {
    const messages = [{ role: "user" as const, content: "What colour is the sky?" }];
    const r = await client.chat.completions.create({ model: MODEL, messages, temperature: 0, max_tokens: 24, logprobs: true });
    expect(r.object).toBe("chat.completion");
    expect(r.model).toBe(MODEL);
    expect(r.system_fingerprint).toBe(artifactId);
    expect(r.choices[0].message.role).toBe("assistant");
    expect(r.choices[0].message.content).toMatch(/blue/i);
    expect(r.usage!.prompt_tokens).toBe(promptTokens(messages));
    expect(r.usage!.completion_tokens).toBe(r.choices[0].logprobs!.content!.length);
    expect(r.usage!.completion_tokens).toBe(tokenizer.encode(r.choices[0].message.content!).length);
    expect(r.usage!.total_tokens).toBe(r.usage!.prompt_tokens + r.usage!.completion_tokens);
  });

  it("streams chunks that concatenate to the non-streamed answer (greedy and seeded)", async () => {
    for (const sampling of [{ temperature: 0 }, { temperature: 0.9, seed: 1234 }]) {
      const request = { model: MODEL, messages: [{ role: "user" as const, content: "Write one sentence about the sea." }], max_tokens: 32, ...sampling };
      const whole = await client.chat.completions.create(request);
      const stream = await client.chat.completions.create({ ...request, stream: true, stream_options: { include_usage: true } });
      let text = "";
      let finish: string | null = null;
      let usage: OpenAI.CompletionUsage | null | undefined;
      let roles = 0;
      for await (const chunk of stream) {
        expect(chunk.object).toBe("chat.completion.chunk");
        if (chunk.choices[0]?.delta.role) roles++;
        text += chunk.choices[0]?.delta.content ?? "";
        finish = chunk.choices[0]?.finish_reason ?? finish;
        if (chunk.usage) usage = chunk.usage;
      }
      expect(roles).toBe(1);
      expect(text).toBe(whole.choices[0].message.content);
      expect(finish).toBe(whole.choices[0].finish_reason);
      expect(usage).toEqual(whole.usage);
    }
  });

  it("completes a prompt: at most 16 tokens by default, finish_reason length", async () => {
    const r = await client.completions.create({ model: MODEL, prompt: "The capital of France is", temperature: 0 });
    expect(r.object).toBe("text_completion");
    expect(r.choices[0].finish_reason).toBe("length");
    expect(r.usage!.completion_tokens).toBe(16);
    expect(r.usage!.prompt_tokens).toBe(tokenizer.encode("The capital of France is", { addSpecial: true, parseSpecial: true }).length);
    expect(r.choices[0].text).toMatch(/^ Paris/);
  });

  it("best_of returns the candidates with the highest log probability per token, and charges for all of them", async () => {
    const prompts = ["Once upon a time", "My favourite food is"];
    const request = { model: MODEL, prompt: prompts, max_tokens: 8, temperature: 1.2, seed: 11 };
    // The same seed gives the same candidates: choice j of a prompt samples the seed's stream j.
    const all = await client.completions.create({ ...request, n: 4, logprobs: 0 });
    const best = await client.completions.create({ ...request, n: 2, best_of: 4 });
    const mean = (c: (typeof all.choices)[number]) => c.logprobs!.token_logprobs!.reduce((s, l) => s + l!, 0) / c.logprobs!.token_logprobs!.length;
    const expected = prompts.flatMap((_, p) =>
      all.choices
        .slice(p * 4, p * 4 + 4)
        .sort((a, b) => mean(b) - mean(a))
        .slice(0, 2)
        .map((c) => c.text),
    );
    expect(new Set(all.choices.slice(0, 4).map((c) => c.text)).size).toBeGreaterThan(1);
    expect(best.choices.map((c) => c.index)).toEqual([0, 1, 2, 3]);
    expect(best.choices.map((c) => c.text)).toEqual(expected);
    expect(best.choices.every((c) => c.logprobs === null)).toBe(true);
    expect(best.usage!.completion_tokens).toBe(all.usage!.completion_tokens);
  });

  it("ends the text before a stop sequence", async () => {
    const free = await client.completions.create({ model: MODEL, prompt: "The capital of France is", temperature: 0, max_tokens: 12 });
    expect(free.choices[0].text).toContain("\n");
    const stopped = await client.completions.create({ model: MODEL, prompt: "The capital of France is", temperature: 0, max_tokens: 12, stop: ["\n"] });
    expect(stopped.choices[0].finish_reason).toBe("stop");
    expect(stopped.choices[0].text).toBe(free.choices[0].text.slice(0, free.choices[0].text.indexOf("\n")));
    const chat = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: "user", content: "What colour is the sky?" }],
      temperature: 0,
      max_tokens: 24,
      stop: ["blue"],
    });
    expect(chat.choices[0].finish_reason).toBe("stop");
    expect(chat.choices[0].message.content).toBe("The sky is a beautiful shade of ");
  });

  it("min_tokens and ignore_eos (vLLM's) keep the answer going past its end token, and min_tokens past a stop string", async () => {
    const messages = [{ role: "user" as const, content: "Say hi." }];
    const free = await client.chat.completions.create({ model: MODEL, messages, temperature: 0, max_tokens: 60 });
    expect(free.choices[0].finish_reason).toBe("stop");
    const text = free.choices[0].message.content!;
    const [min, max] = [free.usage!.completion_tokens + 8, free.usage!.completion_tokens + 20];
    // @ts-expect-error vLLM's extensions, not in the client's types
    const longer = await client.chat.completions.create({ model: MODEL, messages, temperature: 0, max_tokens: max, min_tokens: min });
    expect(longer.usage!.completion_tokens).toBeGreaterThanOrEqual(min);
    // Greedy: the same tokens until the free answer's end token, which could not be taken.
    expect(longer.choices[0].message.content!.startsWith(text)).toBe(true);
    // @ts-expect-error as above
    const endless = await client.chat.completions.create({ model: MODEL, messages, temperature: 0, max_tokens: max, ignore_eos: true });
    expect(endless.choices[0].finish_reason).toBe("length");
    expect(endless.usage!.completion_tokens).toBe(max);
    // A stop string found before the min_tokens-th token does not end the answer.
    // @ts-expect-error as above
    const held = await client.chat.completions.create({ model: MODEL, messages, temperature: 0, max_tokens: max, min_tokens: min, stop: [text.slice(0, 2)] });
    expect(held.choices[0].message.content!.startsWith(text)).toBe(true);
    const stopped = await client.chat.completions.create({ model: MODEL, messages, temperature: 0, max_tokens: max, stop: [text.slice(0, 2)] });
    expect(stopped.choices[0].message.content).toBe("");
  });

  it("stop_token_ids, include_stop_str_in_output, skip_special_tokens and truncate_prompt_tokens (vLLM's) shape the answer", async () => {
    const prompt = "The three primary colors are";
    const free = await client.completions.create({ model: MODEL, prompt, temperature: 0, max_tokens: 12 });
    const text = free.choices[0].text;
    // A token of the greedy answer, past its start: the answer ends before it, or with it kept.
    const ids = tokenizer.encode(text);
    const at = ids.findIndex((id, i) => i >= 2 && ids.indexOf(id) === i);
    const before = tokenizer.decode(ids.slice(0, at));
    expect(text.startsWith(before)).toBe(true);
    // @ts-expect-error vLLM's extensions, not in the client's types
    const cut = await client.completions.create({ model: MODEL, prompt, temperature: 0, max_tokens: 12, stop_token_ids: [ids[at]] });
    // vLLM's stop_reason names the token id that ended it.
    expect(cut.choices[0]).toMatchObject({ text: before, finish_reason: "stop", stop_reason: ids[at] });
    expect(cut.usage!.completion_tokens).toBe(at);
    const kept = await client.completions.create({
      model: MODEL,
      prompt,
      temperature: 0,
      max_tokens: 12,
      // @ts-expect-error as above
      stop_token_ids: [ids[at]],
      include_stop_str_in_output: true,
    });
    expect(kept.choices[0]).toMatchObject({ text: tokenizer.decode(ids.slice(0, at + 1)), finish_reason: "stop" });
    expect(kept.usage!.completion_tokens).toBe(at + 1);
    const stop = text.slice(before.length, before.length + 3);
    const keptString = await client.completions.create({
      model: MODEL,
      prompt,
      temperature: 0,
      max_tokens: 12,
      stop: [stop],
      // @ts-expect-error as above
      include_stop_str_in_output: true,
    });
    expect(keptString.choices[0]).toMatchObject({ text: before + stop, stop_reason: stop });
    expect("stop_reason" in free.choices[0]).toBe(false);

    // A control token forced by logit_bias gives no text, unless skip_special_tokens is false.
    const imStart = tokenizer.encode("<|im_start|>", { parseSpecial: true });
    expect(imStart).toHaveLength(1);
    const forced = { model: MODEL, prompt, max_tokens: 1, logit_bias: { [String(imStart[0])]: 100 } };
    expect((await client.completions.create(forced)).choices[0].text).toBe("");
    // @ts-expect-error as above
    expect((await client.completions.create({ ...forced, skip_special_tokens: false })).choices[0].text).toBe("<|im_start|>");

    // truncate_prompt_tokens keeps the prompt's last tokens: the echo and the usage say which.
    const promptIds = tokenizer.encode(prompt, { addSpecial: true });
    // @ts-expect-error as above
    const short = await client.completions.create({ model: MODEL, prompt, max_tokens: 0, echo: true, truncate_prompt_tokens: 3 });
    expect(short.usage!.prompt_tokens).toBe(3);
    expect(short.choices[0].text).toBe(tokenizer.decode(promptIds.slice(-3)));
    const messages = [{ role: "user" as const, content: "Say hi." }];
    // @ts-expect-error as above
    const chat = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 1, truncate_prompt_tokens: 4 });
    expect(chat.usage!.prompt_tokens).toBe(4);

    const bad = (body: Record<string, unknown>) => client.completions.create({ model: MODEL, prompt, max_tokens: 1, ...body }).catch((e: unknown) => e);
    expect(await bad({ stop_token_ids: [1, 10 ** 7] })).toMatchObject({ status: 400, param: "stop_token_ids[1]" });
    expect(await bad({ truncate_prompt_tokens: 0 })).toMatchObject({ status: 400, param: "truncate_prompt_tokens" });
    const responses = await client.responses
      // @ts-expect-error as above
      .create({ model: MODEL, input: "hi", max_output_tokens: 16, stop_token_ids: [1] })
      .catch((e: unknown) => e);
    expect(responses).toMatchObject({ status: 400, code: "unsupported_parameter", param: "stop_token_ids" });
  });

  it("allowed_token_ids and bad_words (vLLM's) hold the answer to some tokens, or keep words out", async () => {
    const prompt = "The capital of France is";
    const free = await client.completions.create({ model: MODEL, prompt, temperature: 0, max_tokens: 6 });
    expect(free.choices[0].text.startsWith(" Paris")).toBe(true);
    // Only " yes", " no" and the end token: sampled at temperature 1, every answer is made of them.
    const [yes, no] = [tokenizer.encode(" yes"), tokenizer.encode(" no")];
    expect([yes.length, no.length]).toEqual([1, 1]);
    const end = tokenizer.eosId!;
    const held = await client.completions.create({
      model: MODEL,
      prompt,
      max_tokens: 8,
      n: 4,
      seed: 2,
      // @ts-expect-error vLLM's extensions, not in the client's types
      allowed_token_ids: [yes[0], no[0], end],
    });
    for (const c of held.choices) expect(c.text, c.text).toMatch(/^( yes| no)*$/);
    // The greedy answer's first word, banned: the answer starts otherwise.
    // @ts-expect-error as above
    const banned = await client.completions.create({ model: MODEL, prompt, temperature: 0, max_tokens: 6, bad_words: ["Paris"] });
    expect(banned.choices[0].text.startsWith(" Paris")).toBe(false);
    const chat = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: "user", content: "What is the capital of France? One word." }],
      temperature: 0,
      max_tokens: 8,
      // @ts-expect-error as above
      bad_words: ["Paris"],
    });
    expect(chat.choices[0].message.content).not.toMatch(/^ ?Paris/);
    const bad = await client.completions
      .create({ model: MODEL, prompt, max_tokens: 1, ...({ allowed_token_ids: [5, 10 ** 7] } as object) })
      .catch((e: unknown) => e);
    expect(bad).toMatchObject({ status: 400, param: "allowed_token_ids[1]" });
  });

  it("lets the system prompt reach the model", async () => {
    const question = { role: "user" as const, content: "Hello, who are you?" };
    const plain = await client.chat.completions.create({ model: MODEL, messages: [question], temperature: 0, max_tokens: 16 });
    const french = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: "system", content: "Always answer in French." }, question],
      temperature: 0,
      max_tokens: 16,
    });
    expect(plain.choices[0].message.content).not.toMatch(/bonjour/i);
    expect(french.choices[0].message.content).toMatch(/^Bonjour/);
  });

  it("raises the client's exception classes with status, code and param", async () => {
    const bad = await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "x" }], temperature: 5 }).catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(BadRequestError);
    expect(bad).toMatchObject({ status: 400, code: "invalid_value", param: "temperature", type: "invalid_request_error" });

    const badMessage = await client.chat.completions
      .create({
        model: MODEL,
        messages: [
          { role: "user", content: "x" },
          { role: "user", content: 7 as unknown as string },
        ],
      })
      .catch((e: unknown) => e);
    expect(badMessage).toMatchObject({ status: 400, code: "invalid_type", param: "messages[1].content" });

    const tools = await client.chat.completions
      .create({ model: MODEL, messages: [{ role: "user", content: "x" }], tools: [{ type: "function", function: { name: "bad name" } }] })
      .catch((e: unknown) => e);
    expect(tools).toBeInstanceOf(BadRequestError);
    expect(tools).toMatchObject({ param: "tools[0].function.name" });

    const noKey = new OpenAI({ baseURL, apiKey: " ", maxRetries: 0 });
    const unauthorized = await noKey.models.list().catch((e: unknown) => e);
    expect(unauthorized).toBeInstanceOf(AuthenticationError);
    expect(unauthorized).toMatchObject({ status: 401, code: "invalid_api_key" });

    const missing = await client.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "x" }] }).catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(NotFoundError);
    expect(missing).toMatchObject({ status: 404, code: "model_not_found", param: "model" });
    expect(await client.models.retrieve("no/such-model").catch((e: unknown) => e)).toBeInstanceOf(NotFoundError);
  });

  it("stops generating when the client aborts mid-stream", async () => {
    const cancelledBefore = await metric("kiln_requests_cancelled_total");
    const tokensBefore = await metric("kiln_completion_tokens_total");
    const stream = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: "user", content: "Write a very long story about a dragon and a castle." }],
      temperature: 0.8,
      seed: 5,
      max_tokens: 2000,
      stream: true,
    });
    let chunks = 0;
    for await (const _chunk of stream) if (++chunks === 4) break; // leaving the loop aborts the request
    let running = 1;
    for (let i = 0; i < 50 && running > 0; i++) {
      await new Promise((r) => setTimeout(r, 100));
      const text = await (await fetch(baseURL.replace(/\/v1$/, "/metrics"))).text();
      running = Number(/kiln_queue_requests\{model="[^"]+",state="running"\} (\d+)/.exec(text)?.[1] ?? 1);
    }
    expect(running).toBe(0);
    expect(await metric("kiln_requests_cancelled_total")).toBe(cancelledBefore + 1);
    expect((await metric("kiln_completion_tokens_total")) - tokensBefore).toBeLessThan(100);
  });
});
