/**
 * Anthropic's Messages API on the real model through the real server, with Anthropic's official
 * npm client (`@anthropic-ai/sdk`): a message and its stream (the client's own accumulation equal
 * to the whole message), a stop sequence, a forced tool use whose input validates, answered with a
 * tool result, token counting, a Message Batch and its results, and errors the client reads as Anthropic's.
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

  it("a Message Batch: created, polled, its results decoded by the client, each request's answer or its error", async () => {
    const batchMessages = (content: string): Anthropic.MessageParam[] => [{ role: "user", content }];
    const created = await client.messages.batches.create({
      requests: [
        { custom_id: "colours", params: { model: TEXT_SLUG, max_tokens: 12, messages } },
        { custom_id: "capital", params: { model: TEXT_SLUG, max_tokens: 12, messages: batchMessages("What is the capital of France?") } },
        // Parameters are checked when the request runs: this one errs alone, as Anthropic's batches do.
        { custom_id: "no-model", params: { model: "no-such-model", max_tokens: 12, messages } },
      ],
    });
    expect(created).toMatchObject({ type: "message_batch", processing_status: "in_progress", results_url: null });
    let batch = created;
    for (let i = 0; i < 300 && batch.processing_status !== "ended"; i++) {
      await new Promise((r) => setTimeout(r, 200));
      batch = await client.messages.batches.retrieve(created.id);
    }
    expect(batch.request_counts).toEqual({ processing: 0, succeeded: 2, errored: 1, canceled: 0, expired: 0 });
    const results = new Map<string, Anthropic.Messages.MessageBatchResult>();
    for await (const line of await client.messages.batches.results(created.id)) results.set(line.custom_id, line.result);
    for (const [id, content] of [
      ["colours", messages[0].content as string],
      ["capital", "What is the capital of France?"],
    ]) {
      const result = results.get(id)!;
      expect(result.type, id).toBe("succeeded");
      const message = (result as Anthropic.Messages.MessageBatchSucceededResult).message;
      expect(message).toMatchObject({ type: "message", role: "assistant", model: TEXT_SLUG });
      expect((message.content[0] as Anthropic.TextBlock).text.length).toBeGreaterThan(0);
      const counted = await client.messages.countTokens({ model: TEXT_SLUG, messages: batchMessages(content) });
      expect(message.usage.input_tokens + (message.usage.cache_read_input_tokens ?? 0)).toBe(counted.input_tokens);
    }
    expect(results.get("no-model")).toMatchObject({ type: "errored", error: { type: "error", error: { type: "not_found_error" } } });
    const listed = [];
    for await (const b of client.messages.batches.list()) listed.push(b.id);
    expect(listed).toContain(created.id);
    expect(await client.messages.batches.delete(created.id)).toEqual({ id: created.id, type: "message_batch_deleted" });
    expect(await client.messages.batches.retrieve(created.id).catch((e: unknown) => e)).toBeInstanceOf(Anthropic.NotFoundError);
  });

  it("errors reach the client as Anthropic's: status and error type", async () => {
    const missing = await create({ model: "no-such-model", max_tokens: 4, messages }).catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(Anthropic.NotFoundError);
    expect((missing as InstanceType<typeof Anthropic.APIError>).error).toMatchObject({ type: "error", error: { type: "not_found_error" } });
    const bad = await create({ model: TEXT_SLUG, max_tokens: 4, temperature: 3, messages }).catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(Anthropic.BadRequestError);
  });
});
