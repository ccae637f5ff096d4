/**
 * Anthropic's Messages API on the real model through the real server, with Anthropic's official
 * npm client (`@anthropic-ai/sdk`): a message and its stream (the client's own accumulation equal
 * to the whole message), a stop sequence, a forced tool use whose input validates, answered with a
 * tool result, token counting, and errors the client reads as Anthropic's.
 */
import Anthropic from "@anthropic-ai/sdk";
import { Ajv2020 } from "ajv/dist/2020.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TEXT_SLUG } from "../../support/model.js";
import { type RunningServer, startServer, stopServer } from "../../support/server.js";

let server: RunningServer | undefined;
let client: Anthropic;

beforeAll(async () => {
  server = await startServer(TEXT_SLUG);
  client = new Anthropic({ baseURL: server.root, apiKey: "test", maxRetries: 0 });
}, 600_000);

afterAll(async () => {
  expect(await stopServer(server)).toBe(0);
});

const messages: Anthropic.MessageParam[] = [{ role: "user", content: "Name three colours of the rainbow." }];

/**
 * The client's request types no longer list `temperature` (Anthropic's newest models take none);
 * the API, vLLM's and kiln's still do, and a greedy answer is what these checks compare.
 */
type WithSampling<T> = T & { temperature?: number };
const create = (params: WithSampling<Anthropic.MessageCreateParamsNonStreaming>) => client.messages.create(params);
const stream = (params: WithSampling<Anthropic.MessageStreamParams>) => client.messages.stream(params);

describe("Anthropic's client against kiln", () => {
  it("a message, and its stream accumulated by the client into the same message", async () => {
    const whole = await create({ model: TEXT_SLUG, max_tokens: 24, temperature: 0, system: "Answer briefly.", messages });
    expect(whole).toMatchObject({ type: "message", role: "assistant", model: TEXT_SLUG });
    expect(whole.content[0].type).toBe("text");
    expect(["end_turn", "max_tokens"]).toContain(whole.stop_reason);
    expect(whole.usage.output_tokens).toBeGreaterThan(0);
    const streaming = stream({ model: TEXT_SLUG, max_tokens: 24, temperature: 0, system: "Answer briefly.", messages });
    let texts = "";
    streaming.on("text", (t) => (texts += t));
    const final = await streaming.finalMessage();
    expect(final.content).toEqual(whole.content);
    expect(texts).toBe((whole.content[0] as Anthropic.TextBlock).text);
    expect(final.stop_reason).toBe(whole.stop_reason);
    expect(final.usage.output_tokens).toBe(whole.usage.output_tokens);
  });

  it("a stop sequence ends the message and is named; count_tokens counts what the message's input is", async () => {
    const free = await create({ model: TEXT_SLUG, max_tokens: 16, temperature: 0, messages });
    const text = (free.content[0] as Anthropic.TextBlock).text;
    const stop = text.slice(4, 8);
    const stopped = await create({ model: TEXT_SLUG, max_tokens: 16, temperature: 0, messages, stop_sequences: [stop] });
    expect(stopped).toMatchObject({ stop_reason: "stop_sequence", stop_sequence: stop });
    expect((stopped.content[0] as Anthropic.TextBlock).text).toBe(text.slice(0, text.indexOf(stop)));
    const counted = await client.messages.countTokens({ model: TEXT_SLUG, messages });
    expect(counted.input_tokens).toBe(stopped.usage.input_tokens + (stopped.usage.cache_read_input_tokens ?? 0));
  });

  it("a forced tool use has an input that validates, and its result is answered", async () => {
    const weather: Anthropic.Tool = {
      name: "get_weather",
      description: "Current weather in a city",
      input_schema: { type: "object", properties: { city: { type: "string", maxLength: 40 } }, required: ["city"], additionalProperties: false },
    };
    const ask: Anthropic.MessageParam[] = [{ role: "user", content: "What is the weather in Lima right now?" }];
    const ajv = new Ajv2020({ strict: false });
    for (const temperature of [0, 1]) {
      const call = await create({
        model: TEXT_SLUG,
        max_tokens: 60,
        temperature,
        tools: [weather],
        tool_choice: { type: "tool", name: "get_weather" },
        messages: ask,
      });
      expect(call.stop_reason).toBe("tool_use");
      const use = call.content.find((b): b is Anthropic.ToolUseBlock => b.type === "tool_use")!;
      expect(use.name).toBe("get_weather");
      expect(ajv.validate(weather.input_schema, use.input), JSON.stringify(use.input)).toBe(true);
      const answer = await create({
        model: TEXT_SLUG,
        max_tokens: 30,
        temperature: 0,
        tools: [weather],
        messages: [
          ...ask,
          { role: "assistant", content: call.content },
          { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "18 °C, cloudy" }] },
        ],
      });
      expect(answer.usage.input_tokens + (answer.usage.cache_read_input_tokens ?? 0)).toBeGreaterThan(call.usage.input_tokens);
      expect(["end_turn", "max_tokens", "tool_use"]).toContain(answer.stop_reason);
    }
  });

  it("output_config.format holds the answer to a JSON schema", async () => {
    const schema = {
      type: "object",
      properties: { name: { type: "string", maxLength: 20 }, age: { type: "integer", minimum: 0, maximum: 120 } },
      required: ["name", "age"],
      additionalProperties: false,
    };
    const ajv = new Ajv2020({ strict: false });
    for (const temperature of [0, 1]) {
      const answer = await create({
        model: TEXT_SLUG,
        max_tokens: 60,
        temperature,
        messages: [{ role: "user", content: "Invent a person. Answer in JSON." }],
        output_config: { format: { type: "json_schema", schema } },
      });
      const text = (answer.content[0] as Anthropic.TextBlock).text;
      expect(ajv.validate(schema, JSON.parse(text)), text).toBe(true);
      expect(answer.stop_reason).toBe("end_turn");
    }
  });

  it("lists and retrieves models as Anthropic's Models API does", async () => {
    const listed: Anthropic.ModelInfo[] = [];
    for await (const model of client.models.list()) listed.push(model);
    const smol = listed.find((m) => m.id === TEXT_SLUG);
    expect(smol).toMatchObject({ type: "model", display_name: expect.any(String) });
    expect(new Date(smol!.created_at).toISOString()).toBe(smol!.created_at);
    expect(listed.length).toBe(42);
    expect(await client.models.retrieve(TEXT_SLUG)).toMatchObject({ id: TEXT_SLUG, type: "model" });
  });

  it("errors reach the client as Anthropic's: status and error type", async () => {
    const missing = await create({ model: "no-such-model", max_tokens: 4, messages }).catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(Anthropic.NotFoundError);
    expect((missing as InstanceType<typeof Anthropic.APIError>).error).toMatchObject({ type: "error", error: { type: "not_found_error" } });
    const bad = await create({ model: TEXT_SLUG, max_tokens: 4, temperature: 3, messages }).catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(Anthropic.BadRequestError);
  });
});
