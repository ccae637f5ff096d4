/**
 * Structured outputs on the real model through the real server: every answer to a `json_schema`
 * response format parses and validates against its schema (checked with Ajv, an independent
 * validator), streamed and not, at temperature 0 and 1; `json_object` always gives one JSON object;
 * a schema kiln cannot enforce is a 400 naming it.
 */
import { Ajv2020 } from "ajv/dist/2020.js";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TEXT_SLUG } from "../../support/model.js";
import { structuredSchemas, type NamedSchema } from "../../support/schemas.js";
import { type RunningServer, startServer, stopServer } from "../../support/server.js";

let server: RunningServer | undefined;
let client: OpenAI;

beforeAll(async () => {
  server = await startServer(TEXT_SLUG);
  client = new OpenAI({ baseURL: server.baseURL, apiKey: "test", maxRetries: 0 });
}, 600_000);

afterAll(async () => {
  expect(await stopServer(server)).toBe(0);
});

const messages = (s: NamedSchema) => [{ role: "user" as const, content: `Describe ${s.ask} as JSON.` }];

async function answer(s: NamedSchema, temperature: number, stream: boolean): Promise<{ text: string; finish: string | null }> {
  const response_format = { type: "json_schema" as const, json_schema: { name: s.name, schema: s.schema, strict: true } };
  if (!stream) {
    const r = await client.chat.completions.create({ model: TEXT_SLUG, messages: messages(s), response_format, temperature, max_tokens: 300, seed: 7 });
    return { text: r.choices[0].message.content ?? "", finish: r.choices[0].finish_reason };
  }
  const chunks = await client.chat.completions.create({
    model: TEXT_SLUG,
    messages: messages(s),
    response_format,
    temperature,
    max_tokens: 300,
    seed: 7,
    stream: true,
  });
  let text = "";
  let finish: string | null = null;
  for await (const c of chunks) {
    text += c.choices[0]?.delta?.content ?? "";
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  return { text, finish };
}

/** Runs `work` over `items` with at most `limit` in flight. */
async function pool<T, R>(items: readonly T[], limit: number, work: (item: T, i: number) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: limit }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await work(items[i], i);
      }
    }),
  );
  return out;
}

describe("structured outputs on the real model", () => {
  it("answers 100 schemas with JSON that validates, streamed and not, at temperature 0 and 1", async () => {
    const schemas = structuredSchemas(100);
    const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
    // Each schema once, cycling through the four combinations of temperature and streaming.
    const results = await pool(schemas, 16, (s, i) => answer(s, i % 2, Math.floor(i / 2) % 2 === 1));
    const failures: string[] = [];
    results.forEach(({ text, finish }, i) => {
      const s = schemas[i];
      let value: unknown;
      try {
        value = JSON.parse(text);
      } catch {
        failures.push(`${s.name}: not JSON (finish ${finish}): ${text.slice(0, 200)}`);
        return;
      }
      if (!ajv.validate(s.schema, value)) failures.push(`${s.name}: ${ajv.errorsText()} in ${text.slice(0, 200)}`);
      if (finish !== "stop") failures.push(`${s.name}: finish_reason ${finish}`);
    });
    expect(failures).toEqual([]);
  }, 600_000);

  it("json_object gives one JSON object whenever the answer ends on its own", async () => {
    // JSON mode bounds no string or key count, and a 135M model often writes one value forever
    // (valid JSON so far, cut by max_tokens: the reference API's behaviour too). Every answer must
    // start an object; every answer that ends on its own must be exactly one object.
    const prompts = [
      "List two fruits.",
      "Say hello.",
      "Give a cat's name and age.",
      "What is the capital of France?",
      "Describe a dog with a name and a colour.",
      "Name a planet.",
    ];
    let ended = 0;
    for (const content of prompts) {
      const r = await client.chat.completions.create({
        model: TEXT_SLUG,
        messages: [{ role: "user", content }],
        response_format: { type: "json_object" },
        temperature: 0,
        max_tokens: 200,
      });
      const text = r.choices[0].message.content ?? "";
      expect(text.startsWith("{"), text).toBe(true);
      if (r.choices[0].finish_reason !== "stop") continue;
      ended++;
      const value = JSON.parse(text);
      expect(typeof value === "object" && value !== null && !Array.isArray(value), text).toBe(true);
    }
    expect(ended).toBeGreaterThan(0);
  }, 120_000);

  it("honours vLLM's guided_choice, guided_regex and guided_json, on completions and chat", async () => {
    const extended = (body: Record<string, unknown>) => body as unknown as OpenAI.Completions.CompletionCreateParamsNonStreaming;
    const choice = await client.completions.create(
      extended({ model: TEXT_SLUG, prompt: "The sky is", max_tokens: 8, temperature: 1, seed: 3, guided_choice: ["blue", "green", "on fire"] }),
    );
    expect(["blue", "green", "on fire"]).toContain(choice.choices[0].text);
    const date = await client.completions.create(
      extended({ model: TEXT_SLUG, prompt: "Today's date:", max_tokens: 16, temperature: 1, seed: 5, guided_regex: "20[0-9]{2}-(0[1-9]|1[0-2])-[0-3][0-9]" }),
    );
    expect(date.choices[0].text).toMatch(/^20[0-9]{2}-(0[1-9]|1[0-2])-[0-3][0-9]$/);
    // A class with non-ASCII members matches whole characters, streamed or not.
    const accented = { model: TEXT_SLUG, prompt: "Un prénom français :", max_tokens: 12, temperature: 1, seed: 7, guided_regex: " [A-ZÀ-Þ][a-zß-ÿ]{2,8}" };
    const name = await client.completions.create(extended(accented));
    expect(name.choices[0].text).toMatch(/^ [A-ZÀ-Þ][a-zß-ÿ]{2,8}$/u);
    const streamedName = await client.completions.create({ ...extended(accented), stream: true });
    let text = "";
    for await (const chunk of streamedName) text += chunk.choices[0]?.text ?? "";
    expect(text).toBe(name.choices[0].text);
    const schema = {
      type: "object",
      properties: { city: { type: "string", maxLength: 20 }, rank: { type: "integer", minimum: 1, maximum: 9 } },
      required: ["city", "rank"],
      additionalProperties: false,
    };
    const json = await client.chat.completions.create({
      model: TEXT_SLUG,
      messages: [{ role: "user", content: "Name a big city and rank it." }],
      max_tokens: 60,
      temperature: 0,
      guided_json: schema,
    } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);
    const ajv = new Ajv2020({ strict: false });
    expect(ajv.validate(schema, JSON.parse(json.choices[0].message.content ?? "")), json.choices[0].message.content ?? "").toBe(true);
  }, 120_000);

  it("honours GBNF grammars (llama.cpp's grammar, vLLM's guided_grammar and structured_outputs) and llama.cpp's json_schema", async () => {
    const extended = (body: Record<string, unknown>) => body as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming;
    const messages = [{ role: "user" as const, content: "Give me a short shopping list." }];
    // A list of one to four lower-case items, each on its own line after "- ".
    const list = 'root ::= item{1,4}\nitem ::= "- " [a-z] [a-z ]{0,20} "\\n"   # one line each';
    const listHolds = /^(- [a-z][a-z ]{0,20}\n){1,4}$/;
    for (const temperature of [0, 1]) {
      const chat = await client.chat.completions.create(extended({ model: TEXT_SLUG, messages, max_tokens: 60, temperature, seed: 4, grammar: list }));
      expect(chat.choices[0].message.content, `temperature ${temperature}`).toMatch(listHolds);
      expect(chat.choices[0].finish_reason).toBe("stop");
    }
    const streamed = await client.completions.create({
      model: TEXT_SLUG,
      prompt: "Shopping list:\n",
      max_tokens: 60,
      temperature: 1,
      seed: 9,
      stream: true,
      ...({ guided_grammar: list } as object),
    });
    let text = "";
    for await (const chunk of streamed) text += chunk.choices[0]?.text ?? "";
    expect(text).toMatch(listHolds);
    const choice = await client.completions.create({
      model: TEXT_SLUG,
      prompt: "The sky is",
      max_tokens: 8,
      ...({ structured_outputs: { choice: ["blue", "grey"] } } as object),
    });
    expect(["blue", "grey"]).toContain(choice.choices[0].text);
    const schema = { type: "object", properties: { n: { type: "integer", minimum: 1, maximum: 9 } }, required: ["n"], additionalProperties: false };
    const json = await client.chat.completions.create(
      extended({ model: TEXT_SLUG, messages: [{ role: "user", content: "Pick a number." }], max_tokens: 30, json_schema: schema }),
    );
    expect(new Ajv2020({ strict: false }).validate(schema, JSON.parse(json.choices[0].message.content ?? "")), json.choices[0].message.content ?? "").toBe(
      true,
    );
    const bad = await client.chat.completions.create(extended({ model: TEXT_SLUG, messages, grammar: "root ::= item" })).catch((e: unknown) => e);
    expect(bad).toMatchObject({
      status: 400,
      param: "grammar",
      message: expect.stringContaining("Invalid 'grammar': line 1, column 10: rule \"item\" is used but never defined"),
    });
  }, 120_000);

  /**
   * Streams `stream` and, at its fifth token, asks for an answer held to a schema of four new long
   * string bounds (`bounds`: seconds of compiling). Returns the stream's text, how many tokens it
   * sent while the other answer was on its way (compile included), and that answer.
   */
  async function streamBesideSlowCompile(stream: Record<string, unknown>, bounds: number[]): Promise<{ text: string; during: number; answer: string }> {
    const properties = Object.fromEntries(bounds.map((n) => [`field${n}`, { type: "string", maxLength: n }]));
    const schema = { type: "object", properties, required: Object.keys(properties), additionalProperties: false };
    const chunks = await client.chat.completions.create({ model: TEXT_SLUG, max_tokens: 400, temperature: 0, ...stream, stream: true } as never);
    let text = "";
    let tokens = 0;
    let slow: Promise<{ answer: string; during: number }> | null = null;
    for await (const chunk of chunks as unknown as AsyncIterable<OpenAI.ChatCompletionChunk>) {
      const delta = chunk.choices[0]?.delta?.content;
      if (!delta) continue;
      text += delta;
      tokens++;
      if (tokens === 5 && slow === null) {
        slow = client.chat.completions
          .create({
            model: TEXT_SLUG,
            messages: [{ role: "user", content: "Fill in the four fields as JSON." }],
            max_tokens: 30,
            response_format: { type: "json_schema", json_schema: { name: "f", schema, strict: true } },
          })
          .then((r) => ({ answer: r.choices[0].message.content ?? "", during: tokens - 5 }));
      }
    }
    expect(slow).not.toBeNull();
    return { text, ...(await slow!) };
  }

  it("keeps other requests' tokens coming while a schema takes seconds to compile, and answers it", async () => {
    const { during, answer } = await streamBesideSlowCompile(
      // vLLM's extension: every chunk holds one token, whatever the model would end on.
      { messages: [{ role: "user", content: "Tell me a long story about a lighthouse." }], ignore_eos: true },
      [301, 302, 303, 304],
    );
    // The story goes on while the schema compiles: a compile on the model's worker would hold every
    // sequence, and the story would get only the few tokens the 30-token answer takes.
    expect(during).toBeGreaterThan(100);
    expect(answer.startsWith("{")).toBe(true);
  });

  it("keeps a constrained stream's tokens coming while another schema compiles, on a grammar thread of its own", async () => {
    // vLLM's extension: about 300 tokens, whatever the model would end on.
    const { text, during, answer } = await streamBesideSlowCompile(
      { messages: [{ role: "user", content: "Sing." }], guided_regex: "(la ){150}" },
      [305, 306, 307, 308],
    );
    // Were its masks made on the thread that compiles, they would wait behind the compile, and the
    // stream would get only the tokens the 30-token answer takes.
    expect(during).toBeGreaterThan(100);
    expect(text).toBe("la ".repeat(150));
    expect(answer.startsWith("{")).toBe(true);
  });

  it("refuses a keyword it cannot enforce with a 400 naming it", async () => {
    const bad = { type: "object", properties: { a: { type: "array", items: { type: "integer" }, uniqueItems: true } }, required: ["a"] };
    await expect(
      client.chat.completions.create({
        model: TEXT_SLUG,
        messages: [{ role: "user", content: "hi" }],
        response_format: { type: "json_schema", json_schema: { name: "bad", schema: bad } },
      }),
    ).rejects.toMatchObject({ status: 400, param: "response_format", message: expect.stringContaining("uniqueItems") });
  });
});
