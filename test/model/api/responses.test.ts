/**
 * The Responses API (/v1/responses) on the real model, through real clients used unmodified, with
 * one `kiln serve` for the whole file:
 * - the `openai` npm client: `responses.create`, `responses.stream`, a conversation by
 *   `previous_response_id`, a function-call round trip with `function_call_output`,
 *   `responses.parse` with a strict `text.format` (zodTextFormat), and retrieve, input_items, delete;
 * - the Vercel AI SDK's default OpenAI provider (`@ai-sdk/openai`'s `createOpenAI`), which calls
 *   /v1/responses: `generateText`, `streamText`, `generateObject` and tools;
 * - LangChain JS's ChatOpenAI with `useResponsesApi: true`: invoke, stream, bindTools,
 *   withStructuredOutput;
 * - in Python (python/responses_checks.py): the official client (.cache/pyclient) and LangChain's
 *   ChatOpenAI with `use_responses_api=True` (.cache/pyframeworks); both run while the JS checks do.
 * Answers are kept short (small max_output_tokens): this checks the wire, not the model.
 */
import { execFile } from "node:child_process";
import { resolve } from "node:path";
import { promisify } from "node:util";
import { createOpenAI } from "@ai-sdk/openai";
import { ChatOpenAI } from "@langchain/openai";
import { generateObject, generateText, stepCountIs, streamText, tool } from "ai";
import OpenAI, { NotFoundError } from "openai";
import { zodTextFormat } from "openai/helpers/zod";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { TEXT_SLUG } from "../../support/model.js";
import { type RunningServer, startServer, stopServer } from "../../support/server.js";

const MODEL = TEXT_SLUG;
const API_KEY = "sk-local-anything";
const SCRIPT = resolve("test/model/api/python/responses_checks.py");

const City = z.object({ city: z.string().max(24), country: z.string().max(24) });
const Weather = z.object({ city: z.string().max(32) });
const WEATHER_TOOL = {
  type: "function" as const,
  name: "get_weather",
  description: "Get the current weather in a city.",
  parameters: { type: "object", properties: { city: { type: "string", maxLength: 32 } }, required: ["city"], additionalProperties: false },
  strict: true,
};

type PyChecks = Record<string, Record<string, unknown> & { error?: string; traceback?: string }>;

let server: RunningServer | undefined;
let client: OpenAI;
let python: Record<"client" | "langchain", Promise<PyChecks | Error>>;

/** Runs the Python checks of `mode` in `venv`; their JSON, or the error that says why there is none. */
function runPython(mode: "client" | "langchain", venv: string, baseURL: string): Promise<PyChecks | Error> {
  const interpreter = resolve(venv, "bin/python");
  return promisify(execFile)(interpreter, [SCRIPT, mode, baseURL, API_KEY, MODEL], { timeout: 240_000, maxBuffer: 16 * 1024 * 1024 }).then(
    ({ stdout }) => {
      try {
        return (JSON.parse(stdout) as { checks: PyChecks }).checks;
      } catch {
        return new Error(`responses_checks.py ${mode} did not print one JSON object:\n${stdout}`);
      }
    },
    (e: Error & { stderr?: string }) =>
      new Error(`responses_checks.py ${mode} failed (the venv at ${venv} comes from \`npm run setup\`): ${e.message}\n${e.stderr ?? ""}`),
  );
}

/** A Python check's record, failing with the traceback the script recorded when it raised. */
async function py(mode: "client" | "langchain", name: string): Promise<Record<string, any>> {
  const checks = await python[mode];
  if (checks instanceof Error) throw checks;
  const result = checks[name];
  expect(result, `no python check '${name}'`).toBeDefined();
  expect(result.error, `python check '${name}' raised:\n${result.traceback ?? ""}`).toBeUndefined();
  return result;
}

beforeAll(async () => {
  server = await startServer(MODEL);
  client = new OpenAI({ baseURL: server.baseURL, apiKey: API_KEY, maxRetries: 0, timeout: 60_000 });
  python = { client: runPython("client", ".cache/pyclient", server.baseURL), langchain: runPython("langchain", ".cache/pyframeworks", server.baseURL) };
});

afterAll(async () => {
  // Never leave a script talking to a stopped server.
  if (python) await Promise.all([python.client, python.langchain]);
  expect(await stopServer(server), server?.stderr()).toBe(0);
});

describe("the openai npm client", () => {
  it("responses.create: a completed response with output_text and usage", async () => {
    const r = await client.responses.create({ model: MODEL, input: "Name three primary colors.", max_output_tokens: 32, temperature: 0 });
    expect(r.id).toMatch(/^resp_/);
    expect(r.object).toBe("response");
    expect(r.status).toBe("completed");
    expect(r.output.map((item) => item.type)).toEqual(["message"]);
    expect(r.output_text.length).toBeGreaterThan(0);
    expect(r.usage).toMatchObject({
      input_tokens: expect.any(Number),
      output_tokens: expect.any(Number),
      input_tokens_details: { cached_tokens: expect.any(Number) },
    });
    expect(r.usage!.total_tokens).toBe(r.usage!.input_tokens + r.usage!.output_tokens);
  });

  it("responses.stream: typed events whose deltas add up to the final response, which is stored as streamed", async () => {
    const stream = client.responses.stream({ model: MODEL, input: "Say hello.", max_output_tokens: 16, temperature: 0 });
    const types: string[] = [];
    let deltas = "";
    let last: OpenAI.Responses.Response | undefined;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === "response.output_text.delta") deltas += event.delta;
      if (event.type === "response.completed" || event.type === "response.incomplete") last = event.response;
    }
    const final = await stream.finalResponse();
    expect(types.slice(0, 4)).toEqual(["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]);
    expect(["response.completed", "response.incomplete"]).toContain(types.at(-1));
    expect(deltas).toBe(final.output_text);
    expect(deltas.length).toBeGreaterThan(0);
    const stored = await client.responses.retrieve(final.id);
    expect(stored).toEqual(last);
    expect(stored.output).toEqual(
      final.output.map((item) => (item.type === "message" ? { ...item, content: item.content.map(({ parsed: _, ...part }: any) => part) } : item)),
    );
  });

  it("a conversation by previous_response_id: the second turn sees the first, its input items list all of it", async () => {
    const first = await client.responses.create({ model: MODEL, input: "My name is Ada.", max_output_tokens: 16, temperature: 0 });
    const second = await client.responses.create({
      model: MODEL,
      previous_response_id: first.id,
      input: "What is my name?",
      max_output_tokens: 16,
      temperature: 0,
    });
    expect(second.previous_response_id).toBe(first.id);
    expect(second.usage!.input_tokens).toBeGreaterThan(first.usage!.input_tokens + first.usage!.output_tokens);
    const items = await client.responses.inputItems.list(second.id, { order: "asc" });
    const texts = items.data.map((item) => (item.type === "message" ? item.content.map((p) => ("text" in p ? p.text : "")).join("") : item.type));
    expect(texts).toEqual(["My name is Ada.", first.output_text, "What is my name?"]);
  });

  it("a function-call round trip: a function_call item, then its function_call_output continues the response", async () => {
    const first = await client.responses.create({
      model: MODEL,
      input: "What is the weather in Paris?",
      tools: [WEATHER_TOOL],
      tool_choice: "required",
      max_output_tokens: 48,
      temperature: 0,
    });
    const calls = first.output.filter((item) => item.type === "function_call");
    expect(calls.length, JSON.stringify(first.output)).toBeGreaterThan(0);
    const call = calls[0];
    if (call.type !== "function_call") throw new Error("not a call");
    expect(call).toMatchObject({ name: "get_weather", call_id: expect.stringMatching(/^call_/), id: expect.stringMatching(/^fc_/), status: "completed" });
    expect(Weather.safeParse(JSON.parse(call.arguments)).success, call.arguments).toBe(true);
    const second = await client.responses.create({
      model: MODEL,
      previous_response_id: first.id,
      input: [{ type: "function_call_output", call_id: call.call_id, output: JSON.stringify({ celsius: 18 }) }],
      tools: [WEATHER_TOOL],
      max_output_tokens: 24,
      temperature: 0,
    });
    expect(["completed", "incomplete"]).toContain(second.status);
    expect(second.output.length).toBeGreaterThan(0);
  });

  it("responses.parse with a strict zodTextFormat: output_parsed validates", async () => {
    const r = await client.responses.parse({
      model: MODEL,
      input: "Paris is a city in France. Give the city and country as JSON.",
      text: { format: zodTextFormat(City, "city") },
      max_output_tokens: 40,
      temperature: 0,
    });
    expect(r.text?.format).toMatchObject({ type: "json_schema", name: "city", strict: true });
    expect(City.safeParse(r.output_parsed).success, r.output_text).toBe(true);
  });

  it("retrieve and delete: a deleted response is a 404 NotFoundError", async () => {
    const r = await client.responses.create({ model: MODEL, input: "Hi", max_output_tokens: 4, temperature: 0 });
    expect((await client.responses.retrieve(r.id)).id).toBe(r.id);
    await client.responses.delete(r.id);
    await expect(client.responses.retrieve(r.id)).rejects.toBeInstanceOf(NotFoundError);
  });

  it("a hosted tool is a 400 naming it", async () => {
    const refused = client.responses.create({ model: MODEL, input: "Search the web.", tools: [{ type: "web_search" }], max_output_tokens: 4 });
    await expect(refused).rejects.toMatchObject({ status: 400, param: "tools[0].type" });
  });
});

describe("the Vercel AI SDK's default OpenAI provider (@ai-sdk/openai, /v1/responses)", () => {
  let model: ReturnType<ReturnType<typeof createOpenAI>>;
  beforeAll(() => {
    model = createOpenAI({ baseURL: server!.baseURL, apiKey: API_KEY })(MODEL);
  });
  const common = { temperature: 0, maxRetries: 0 } as const;

  it("generateText", async () => {
    const r = await generateText({ model, prompt: "Name three primary colors.", maxOutputTokens: 32, ...common });
    expect(r.text.length).toBeGreaterThan(0);
    expect(["stop", "length"]).toContain(r.finishReason);
    expect(r.usage.inputTokens).toBeGreaterThan(0);
    expect(r.response.id).toMatch(/^resp_/);
  });

  it("streamText: text deltas and a finish, no error part", async () => {
    const r = streamText({ model, prompt: "Say hello.", maxOutputTokens: 16, ...common });
    let deltas = "";
    for await (const part of r.fullStream) {
      if (part.type === "error") throw part.error;
      if (part.type === "text-delta") deltas += part.text;
    }
    expect(deltas.length).toBeGreaterThan(0);
    expect(await r.text).toBe(deltas);
    expect(["stop", "length"]).toContain(await r.finishReason);
  });

  it("generateObject: the object validates (a strict json_schema text.format)", async () => {
    const r = await generateObject({
      model,
      schema: City,
      schemaName: "city",
      prompt: "Paris is a city in France. Give the city and country.",
      maxOutputTokens: 40,
      ...common,
    });
    expect(City.safeParse(r.object).success, JSON.stringify(r.object)).toBe(true);
  });

  it("tools: a required call whose input validates, executed by the SDK, its result sent back in a second step", async () => {
    const r = await generateText({
      model,
      tools: { getWeather: tool({ description: "Get the current weather in a city.", inputSchema: Weather, execute: async ({ city }) => `18 C in ${city}` }) },
      prepareStep: ({ stepNumber }) => ({ toolChoice: stepNumber === 0 ? "required" : "none" }),
      stopWhen: stepCountIs(2),
      prompt: "What is the weather in Paris?",
      maxOutputTokens: 48,
      ...common,
    });
    const [first, second] = r.steps;
    expect(first.toolCalls.length, JSON.stringify(first.response.body)).toBeGreaterThan(0);
    for (const call of first.toolCalls) {
      expect(call.toolName).toBe("getWeather");
      expect(call.invalid ?? false).toBe(false);
      expect(Weather.safeParse(call.input).success, JSON.stringify(call.input)).toBe(true);
    }
    expect(first.toolResults.map((t) => t.output)).toEqual(first.toolCalls.map((c) => `18 C in ${(c.input as { city: string }).city}`));
    // The second step sent the call and its output back as input items (as its stored input shows).
    expect(second, "a second step").toBeDefined();
    const items = await client.responses.inputItems.list(second.response.id, { order: "asc" });
    expect(items.data.map((item) => item.type)).toEqual(["message", "function_call", "function_call_output"]);
    expect(second.text.length).toBeGreaterThan(0);
  });

  it("streamText with a named tool: tool-input deltas and a call that validates", async () => {
    const r = streamText({
      model,
      tools: { getWeather: tool({ description: "Get the current weather in a city.", inputSchema: Weather }) },
      toolChoice: { type: "tool", toolName: "getWeather" },
      prompt: "What is the weather in Paris?",
      maxOutputTokens: 48,
      ...common,
    });
    let inputDeltas = 0;
    for await (const part of r.fullStream) {
      if (part.type === "error") throw part.error;
      if (part.type === "tool-input-delta") inputDeltas++;
    }
    const calls = await r.toolCalls;
    expect(calls.length).toBeGreaterThan(0);
    expect(Weather.safeParse(calls[0].input).success, JSON.stringify(calls[0].input)).toBe(true);
    expect(inputDeltas).toBeGreaterThan(0);
  });
});

describe("LangChain JS's ChatOpenAI in Responses mode (useResponsesApi: true)", () => {
  const chat = (maxTokens: number) =>
    new ChatOpenAI({
      model: MODEL,
      apiKey: API_KEY,
      configuration: { baseURL: server!.baseURL },
      useResponsesApi: true,
      temperature: 0,
      maxRetries: 0,
      maxTokens,
    });

  it("invoke: an AIMessage with the response's id and usage", async () => {
    const message = await chat(24).invoke("Name three primary colors.");
    expect(message.text.length).toBeGreaterThan(0);
    expect(message.id).toMatch(/^resp_/);
    expect(message.usage_metadata?.input_tokens).toBeGreaterThan(0);
  });

  it("stream: chunks whose text adds up", async () => {
    let chunks = 0;
    let text = "";
    for await (const chunk of await chat(16).stream("Say hello.")) {
      chunks++;
      text += chunk.text;
    }
    expect(chunks).toBeGreaterThan(2);
    expect(text.length).toBeGreaterThan(0);
  });

  it("bindTools with a named tool_choice: a tool call whose args validate", async () => {
    const message = await chat(48)
      .bindTools([{ type: "function", function: { name: WEATHER_TOOL.name, description: WEATHER_TOOL.description, parameters: WEATHER_TOOL.parameters } }], {
        tool_choice: "get_weather",
      })
      .invoke("What is the weather in Paris?");
    expect(message.invalid_tool_calls ?? []).toEqual([]);
    expect(message.tool_calls?.length, JSON.stringify(message.content)).toBeGreaterThan(0);
    expect(message.tool_calls![0].name).toBe("get_weather");
    expect(Weather.safeParse(message.tool_calls![0].args).success).toBe(true);
  });

  it("withStructuredOutput(zod): the object validates", async () => {
    const value = await chat(40).withStructuredOutput(City, { name: "city" }).invoke("Paris is a city in France. Give the city and country.");
    expect(City.safeParse(value).success, JSON.stringify(value)).toBe(true);
  });
});

describe("the official Python client (python/responses_checks.py, .cache/pyclient)", () => {
  it("responses.create", async () => {
    const c = await py("client", "create");
    expect(c).toMatchObject({ object: "response", status: "completed", output_types: ["message"] });
    expect(c.output_text.length).toBeGreaterThan(0);
    expect(c.usage.input_tokens_details.cached_tokens).toEqual(expect.any(Number));
  });

  it("responses.stream: events in the reference order, deltas adding up to the final response", async () => {
    const c = await py("client", "stream");
    expect(c.types.slice(0, 2)).toEqual(["response.created", "response.in_progress"]);
    expect(c.types.at(-1)).toBe("response.completed");
    expect(c.deltas).toBe(c.output_text);
  });

  it("a conversation by previous_response_id, its input items and retrieve", async () => {
    const c = await py("client", "conversation");
    expect(c.previous_response_id).toBe(c.first_id);
    expect(c.input_texts[0]).toBe("My name is Ada.");
    expect(c.input_texts.at(-1)).toBe("What is my name?");
    expect(c.retrieved_equal).toBe(true);
    expect(c.second_input_tokens).toBeGreaterThan(c.first_input_tokens);
  });

  it("a function-call round trip with function_call_output", async () => {
    const c = await py("client", "function_call");
    expect(c.calls.length, JSON.stringify(c)).toBeGreaterThan(0);
    expect(c.calls[0].name).toBe("get_weather");
    expect(Weather.safeParse(JSON.parse(c.calls[0].arguments)).success).toBe(true);
    expect(["completed", "incomplete"]).toContain(c.status);
  });

  it("responses.parse(text_format=PydanticModel): a parsed instance", async () => {
    const c = await py("client", "parse");
    expect(c.is_city, JSON.stringify(c)).toBe(true);
    expect(City.safeParse(c.value).success).toBe(true);
  });
});

describe("LangChain's ChatOpenAI in Responses mode (use_responses_api=True, .cache/pyframeworks)", () => {
  it("invoke", async () => {
    const c = await py("langchain", "langchain_invoke");
    expect(c.class).toBe("AIMessage");
    expect(c.text.length).toBeGreaterThan(0);
    expect(c.id).toMatch(/^resp_/);
    expect(c.usage.input_tokens).toBeGreaterThan(0);
  });

  it("stream: chunks merging into the text", async () => {
    const c = await py("langchain", "langchain_stream");
    expect(c.chunks).toBeGreaterThan(2);
    expect(c.text.length).toBeGreaterThan(0);
  });

  it("bind_tools with a named tool_choice: a tool call whose args validate", async () => {
    const c = await py("langchain", "langchain_tools");
    expect(c.invalid_tool_calls).toEqual([]);
    expect(c.tool_calls.length, JSON.stringify(c)).toBeGreaterThan(0);
    expect(c.tool_calls[0].name).toBe("get_weather");
    expect(Weather.safeParse(c.tool_calls[0].args).success).toBe(true);
  });

  it("with_structured_output(PydanticModel): a parsed instance", async () => {
    const c = await py("langchain", "langchain_structured");
    expect(c.is_city, JSON.stringify(c)).toBe(true);
    expect(City.safeParse(c.value).success).toBe(true);
  });
});
