/**
 * Ollama's native API on the real model through the real server, with Ollama's official npm client
 * (`ollama`): the listings, chat and generate streamed and not (the stream adding up to the whole
 * answer), a greedy `/api/generate` raw answer equal to `/v1/completions`' on the same prompt (one
 * engine behind both), a JSON schema held by `format`, tool calls whose arguments validate, a pull
 * of a model already here through kiln's real pull, and errors the client reads as it reads Ollama's.
 */
import { Ajv2020 } from "ajv/dist/2020.js";
import { Ollama, type Message, type Tool } from "ollama";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TEXT_SLUG } from "../../support/model.js";
import { type RunningServer, startServer, stopServer } from "../../support/server.js";

let server: RunningServer | undefined;
let ollama: Ollama;

beforeAll(async () => {
  server = await startServer(TEXT_SLUG);
  ollama = new Ollama({ host: server.root });
}, 600_000);

afterAll(async () => {
  expect(await stopServer(server)).toBe(0);
});

const ask: Message[] = [{ role: "user", content: "Name three colours of the rainbow." }];
const GREEDY = { temperature: 0, num_predict: 24 };

describe("Ollama's client against kiln", () => {
  it("lists the model (tags, ps), shows it, and reads the version", async () => {
    const { models } = await ollama.list();
    const listed = models.find((m) => m.name === TEXT_SLUG);
    expect(listed).toMatchObject({ model: TEXT_SLUG, details: { format: "gguf", family: "llama", parameter_size: "135M", quantization_level: "Q4_1" } });
    expect(listed!.size).toBeGreaterThan(50e6);
    expect((await ollama.ps()).models.map((m) => m.name)).toContain(TEXT_SLUG);
    const shown = await ollama.show({ model: "smollm2:135m" });
    expect(shown.capabilities).toContain("completion");
    expect((await ollama.version()).version).toMatch(/^\d+\.\d+\.\d+/);
  });

  it("chat: the stream adds up to the whole answer, and counts the same prompt /v1 counts", async () => {
    const whole = await ollama.chat({ model: TEXT_SLUG, messages: ask, options: GREEDY });
    expect(whole.done).toBe(true);
    expect(whole.message.role).toBe("assistant");
    expect(whole.message.content.length).toBeGreaterThan(0);
    expect(whole.eval_count).toBeGreaterThan(0);
    expect(whole.eval_duration).toBeGreaterThan(0);
    let streamed = "";
    let last: Awaited<ReturnType<typeof ollama.chat>> | undefined;
    for await (const part of await ollama.chat({ model: TEXT_SLUG, messages: ask, options: GREEDY, stream: true })) {
      streamed += part.message.content;
      last = part;
    }
    expect(streamed).toBe(whole.message.content);
    expect(last).toMatchObject({ done: true, done_reason: whole.done_reason, eval_count: whole.eval_count });
    const v1 = await fetch(`${server!.baseURL}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: TEXT_SLUG, messages: ask, max_tokens: 1 }),
    });
    expect(whole.prompt_eval_count).toBe(((await v1.json()) as { usage: { prompt_tokens: number } }).usage.prompt_tokens);
  });

  it("generate raw at temperature 0 writes what /v1/completions writes for the same prompt", async () => {
    const prompt = "The capital of France is";
    const raw = await ollama.generate({ model: TEXT_SLUG, prompt, raw: true, options: { temperature: 0, num_predict: 12 } });
    const v1 = await fetch(`${server!.baseURL}/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: TEXT_SLUG, prompt, temperature: 0, max_tokens: 12 }),
    });
    const completion = (await v1.json()) as { choices: Array<{ text: string }>; usage: { prompt_tokens: number } };
    expect(raw.response).toBe(completion.choices[0].text);
    expect(raw.prompt_eval_count).toBe(completion.usage.prompt_tokens);
    let streamed = "";
    for await (const part of await ollama.generate({ model: TEXT_SLUG, prompt: "Tell me a fact.", options: GREEDY, stream: true })) streamed += part.response;
    expect(streamed).toBe((await ollama.generate({ model: TEXT_SLUG, prompt: "Tell me a fact.", options: GREEDY })).response);
  });

  it("format holds the answer to a JSON schema; tools reach the model, and a history with a call and its result renders", async () => {
    const schema = {
      type: "object",
      properties: { name: { type: "string", maxLength: 20 }, age: { type: "integer", minimum: 0, maximum: 120 } },
      required: ["name", "age"],
      additionalProperties: false,
    };
    const ajv = new Ajv2020({ strict: false });
    for (const temperature of [0, 1]) {
      const answer = await ollama.chat({
        model: TEXT_SLUG,
        messages: [{ role: "user", content: "Invent a person. Answer in JSON." }],
        format: schema,
        options: { temperature, seed: 3, num_predict: 60 },
      });
      expect(ajv.validate(schema, JSON.parse(answer.message.content)), answer.message.content).toBe(true);
    }
    const weather: Tool = {
      type: "function",
      function: {
        name: "get_weather",
        description: "Current weather in a city",
        parameters: { type: "object", required: ["city"], properties: { city: { type: "string", description: "the city" } } },
      },
    };
    // SmolLM2 rarely calls on its own (Ollama has no tool_choice to make it): what it calls must validate.
    for (const city of ["Paris", "Lima"]) {
      const answer = await ollama.chat({
        model: TEXT_SLUG,
        messages: [{ role: "user", content: `What is the weather in ${city} right now?` }],
        tools: [weather],
        options: { temperature: 0, num_predict: 60 },
      });
      for (const call of answer.message.tool_calls ?? []) {
        expect(call.function.name).toBe("get_weather");
        expect(ajv.validate(weather.function.parameters!, call.function.arguments), JSON.stringify(call)).toBe(true);
      }
    }
    // A history with a call (arguments an object) and its result renders through the model's own template and answers.
    const history: Message[] = [
      { role: "user", content: "What is the weather in Oslo?" },
      { role: "assistant", content: "", tool_calls: [{ function: { name: "get_weather", arguments: { city: "Oslo" } } }] },
      { role: "tool", tool_name: "get_weather", content: '{"temperature": 3, "sky": "cloudy"}' },
    ];
    const after = await ollama.chat({ model: TEXT_SLUG, messages: history, tools: [weather], options: { temperature: 0, num_predict: 30 } });
    const first = await ollama.chat({ model: TEXT_SLUG, messages: history.slice(0, 1), tools: [weather], options: { temperature: 0, num_predict: 1 } });
    expect(after.prompt_eval_count).toBeGreaterThan(first.prompt_eval_count + 10);
    expect(after.done).toBe(true);
  }, 120_000);

  it("pull: a model already here is checked and reported as Ollama's progress, streamed or not", async () => {
    const statuses: string[] = [];
    for await (const part of await ollama.pull({ model: TEXT_SLUG, stream: true })) statuses.push(part.status);
    expect(statuses[0]).toBe("pulling manifest");
    expect(statuses.at(-1)).toBe("success");
    expect(await ollama.pull({ model: "smollm2:135m" })).toEqual({ status: "success" });
    expect((await ollama.list()).models.map((m) => m.name)).toContain(TEXT_SLUG);
  });

  it("errors reach the client as Ollama's do: status and message", async () => {
    const missing = await ollama.chat({ model: "no-such-model", messages: ask }).catch((e: unknown) => e);
    expect(missing).toMatchObject({ name: "ResponseError", status_code: 404 });
    expect((missing as Error).message).toMatch(/no-such-model/);
    const images = await ollama
      .chat({ model: TEXT_SLUG, messages: [{ role: "user", content: "What is this?", images: ["aGVsbG8="] }] })
      .catch((e: unknown) => e);
    expect(images).toMatchObject({ name: "ResponseError", status_code: 400 });
    const push = await ollama.push({ model: TEXT_SLUG }).catch((e: unknown) => e);
    expect(push).toMatchObject({ name: "ResponseError", status_code: 501 });
    const unknown = await ollama.pull({ model: "no-such-model" }).catch((e: unknown) => e);
    expect(unknown).toMatchObject({ name: "ResponseError", status_code: 404 });
    // `ollama stop`: the server was started with this model, so it stays, and says why.
    const stop = await ollama.generate({ model: TEXT_SLUG, prompt: "", keep_alive: 0 }).catch((e: unknown) => e);
    expect(stop).toMatchObject({ name: "ResponseError", status_code: 400 });
    expect((stop as Error).message).toMatch(/--model/);
    expect((await ollama.ps()).models.find((m) => m.name === TEXT_SLUG)?.expires_at).toBeNull();
  });
});
