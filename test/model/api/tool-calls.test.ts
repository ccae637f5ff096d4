/**
 * Tool calling on the real model through the real server, with the official npm client: `required`
 * and named choices always give calls whose arguments validate against the function's parameters
 * (checked with Ajv, an independent validator), streamed and not, at temperature 0 and 1; streamed
 * fragments add up to exactly the non-streamed call; `parallel_tool_calls: false` gives one call;
 * a conversation replayed with the calls and their results renders and answers; `auto` answers
 * either text or calls that validate.
 */
import { Ajv2020 } from "ajv/dist/2020.js";
import OpenAI from "openai";
import type { ChatCompletionMessageParam, ChatCompletionTool, ChatCompletionToolChoiceOption } from "openai/resources/chat/completions";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TEXT_SLUG } from "../../support/model.js";
import { structuredSchemas } from "../../support/schemas.js";
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

const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });

const WEATHER: ChatCompletionTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Current weather in a city",
    parameters: {
      type: "object",
      properties: { city: { type: "string", maxLength: 40 }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
      required: ["city", "unit"],
      additionalProperties: false,
    },
  },
};
const TIME: ChatCompletionTool = {
  type: "function",
  function: {
    name: "get_time",
    description: "Current time in a time zone",
    parameters: { type: "object", properties: { zone: { type: "string", maxLength: 30 } }, required: ["zone"] },
  },
};

/** Tools whose parameters are the structured-output test schemas, so calls face nested objects, enums, arrays, anyOf and refs. */
const SCHEMA_TOOLS: ChatCompletionTool[] = structuredSchemas(12).map((s, i) => ({
  type: "function",
  function: { name: `record_${i}`, description: `Record ${s.ask}`, parameters: s.schema },
}));

interface Call {
  id: string;
  name: string;
  arguments: string;
}
interface Answer {
  content: string | null;
  calls: Call[];
  finish: string | null;
}

const ask = (city: string): ChatCompletionMessageParam[] => [{ role: "user", content: `What is the weather in ${city} right now?` }];

async function answer(
  messages: ChatCompletionMessageParam[],
  tools: ChatCompletionTool[],
  tool_choice: ChatCompletionToolChoiceOption,
  options: { temperature: number; stream: boolean; parallel?: boolean },
): Promise<Answer> {
  const body = {
    model: TEXT_SLUG,
    messages,
    tools,
    tool_choice,
    temperature: options.temperature,
    seed: 11,
    max_tokens: 120,
    ...(options.parallel !== undefined ? { parallel_tool_calls: options.parallel } : {}),
  };
  if (!options.stream) {
    const r = await client.chat.completions.create(body);
    const m = r.choices[0].message;
    const calls = (m.tool_calls ?? []).map((c) => {
      if (c.type !== "function") throw new Error(`unexpected call type ${c.type}`);
      return { id: c.id, name: c.function.name, arguments: c.function.arguments };
    });
    return { content: m.content, calls, finish: r.choices[0].finish_reason };
  }
  const stream = await client.chat.completions.create({ ...body, stream: true });
  let content: string | null = null;
  const calls: Call[] = [];
  let finish: string | null = null;
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    if (choice.delta.content) content = (content ?? "") + choice.delta.content;
    for (const f of choice.delta.tool_calls ?? []) {
      if (f.id !== undefined) {
        // A call's first fragment: index in order, id, type and name, no argument text yet.
        expect(f.index).toBe(calls.length);
        expect(f.type).toBe("function");
        expect(f.function?.arguments).toBe("");
        calls.push({ id: f.id, name: f.function!.name!, arguments: "" });
      } else {
        expect(f.function?.name).toBeUndefined();
        expect(f.index).toBe(calls.length - 1);
        calls[f.index].arguments += f.function?.arguments ?? "";
      }
    }
    finish = choice.finish_reason ?? finish;
  }
  return { content, calls, finish };
}

/** Problems with the calls of an answer: unknown names, arguments that are not JSON or do not validate. */
function callProblems(a: Answer, tools: ChatCompletionTool[]): string[] {
  const problems: string[] = [];
  for (const call of a.calls) {
    const tool = tools.find((t) => t.type === "function" && t.function.name === call.name);
    if (!tool || tool.type !== "function") {
      problems.push(`unknown function ${call.name}`);
      continue;
    }
    let args: unknown;
    try {
      args = JSON.parse(call.arguments);
    } catch {
      problems.push(`${call.name}: arguments not JSON (finish ${a.finish}): ${call.arguments.slice(0, 200)}`);
      continue;
    }
    const validate = ajv.compile(tool.function.parameters ?? {});
    if (!validate(args)) problems.push(`${call.name}: ${ajv.errorsText(validate.errors)}: ${call.arguments.slice(0, 200)}`);
  }
  return problems;
}

describe("tool calls on the real model", () => {
  it("'required' and named choices give valid calls, streamed and not, at temperature 0 and 1", async () => {
    const cases = SCHEMA_TOOLS.map((tool, i) => {
      const named = i % 3 === 0;
      const tools = named ? [WEATHER, tool, TIME] : [tool, WEATHER];
      const choice: ChatCompletionToolChoiceOption = named
        ? { type: "function", function: { name: (tool as { function: { name: string } }).function.name } }
        : "required";
      return { tools, choice, named, temperature: i % 2, stream: Math.floor(i / 2) % 2 === 1 };
    });
    const results = await Promise.all(
      cases.map((c, i) =>
        answer([{ role: "user", content: `Please record ${structuredSchemas(12)[i].ask}.` }], c.tools, c.choice, {
          temperature: c.temperature,
          stream: c.stream,
        }),
      ),
    );
    const failures: string[] = [];
    results.forEach((a, i) => {
      const c = cases[i];
      if (a.finish === "length") return; // a call cut by max_tokens is not a finished call
      if (a.calls.length === 0) failures.push(`case ${i}: no call (finish ${a.finish}, content ${JSON.stringify(a.content)})`);
      if (a.finish !== "tool_calls") failures.push(`case ${i}: finish ${a.finish}`);
      if (c.named && a.calls.some((call) => call.name !== (c.choice as { function: { name: string } }).function.name))
        failures.push(`case ${i}: called another function`);
      failures.push(...callProblems(a, c.tools).map((p) => `case ${i}: ${p}`));
    });
    expect(failures).toEqual([]);
    // Most calls finish within the budget, or the check above checked little.
    expect(results.filter((a) => a.finish === "tool_calls").length).toBeGreaterThanOrEqual(9);
  }, 300_000);

  it("streams fragments that add up to exactly the non-streamed calls; parallel calls are indexed 0, 1, …", async () => {
    for (const parallel of [true, false]) {
      const whole = await answer(ask("Paris and in Tokyo"), [WEATHER, TIME], "required", { temperature: 0, stream: false, parallel });
      const streamed = await answer(ask("Paris and in Tokyo"), [WEATHER, TIME], "required", { temperature: 0, stream: true, parallel });
      expect(streamed.calls.map(({ name, arguments: a }) => ({ name, a }))).toEqual(whole.calls.map(({ name, arguments: a }) => ({ name, a })));
      expect(streamed.finish).toBe(whole.finish);
      expect(callProblems(whole, [WEATHER, TIME])).toEqual([]);
      if (!parallel) expect(whole.calls.length).toBe(1);
      expect(new Set(whole.calls.map((c) => c.id)).size).toBe(whole.calls.length);
    }
  }, 120_000);

  it("answers a conversation replayed with its calls and their results", async () => {
    const first = await client.chat.completions.create({
      model: TEXT_SLUG,
      messages: ask("Oslo"),
      tools: [WEATHER],
      tool_choice: "required",
      temperature: 0,
      max_tokens: 80,
    });
    const message = first.choices[0].message;
    expect(message.tool_calls?.length).toBeGreaterThan(0);
    const results: ChatCompletionMessageParam[] = message.tool_calls!.map((c) => ({
      role: "tool",
      tool_call_id: c.id,
      content: '{"temperature": 3, "sky": "cloudy"}',
    }));
    const second = await client.chat.completions.create({
      model: TEXT_SLUG,
      messages: [...ask("Oslo"), message as ChatCompletionMessageParam, ...results],
      tools: [WEATHER],
      temperature: 0,
      max_tokens: 40,
    });
    expect(second.choices[0].finish_reason).toMatch(/^(stop|length|tool_calls)$/);
    expect(second.usage!.prompt_tokens).toBeGreaterThan(first.usage!.prompt_tokens);
  }, 60_000);

  it("'auto' answers text or valid calls, read the same streamed and not", async () => {
    for (const city of ["Lima", "Cairo"]) {
      const whole = await answer(ask(city), [WEATHER, TIME], "auto", { temperature: 0, stream: false });
      const streamed = await answer(ask(city), [WEATHER, TIME], "auto", { temperature: 0, stream: true });
      expect(callProblems(whole, [WEATHER, TIME])).toEqual([]);
      expect({ ...streamed, calls: streamed.calls.map((c) => [c.name, c.arguments]) }).toEqual({
        ...whole,
        calls: whole.calls.map((c) => [c.name, c.arguments]),
      });
      expect(whole.finish).toBe(whole.calls.length > 0 ? "tool_calls" : whole.finish === "length" ? "length" : "stop");
    }
  }, 60_000);

  it("the deprecated functions/function_call: one valid call as message.function_call, streamed and not, and its history answers", async () => {
    const functions = [WEATHER.function, TIME.function];
    const body = { model: TEXT_SLUG, messages: ask("Quito"), functions, function_call: { name: "get_weather" }, temperature: 0, max_tokens: 80 };
    const whole = await client.chat.completions.create(body);
    const message = whole.choices[0].message;
    expect(whole.choices[0].finish_reason).toBe("function_call");
    expect(message.tool_calls).toBeUndefined();
    expect(message.function_call!.name).toBe("get_weather");
    expect(ajv.validate(WEATHER.function.parameters!, JSON.parse(message.function_call!.arguments)), JSON.stringify(ajv.errors)).toBe(true);
    let name = "";
    let args = "";
    let finish: string | null = null;
    for await (const chunk of await client.chat.completions.create({ ...body, stream: true })) {
      const call = chunk.choices[0]?.delta.function_call;
      name += call?.name ?? "";
      args += call?.arguments ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect({ name, arguments: args, finish }).toEqual({ ...message.function_call, finish: "function_call" });
    const next = await client.chat.completions.create({
      model: TEXT_SLUG,
      messages: [
        ...ask("Quito"),
        { role: "assistant", content: null, function_call: message.function_call },
        { role: "function", name: "get_weather", content: '{"sky": "clear"}' },
      ],
      functions,
      temperature: 0,
      max_tokens: 30,
    });
    expect(next.usage!.prompt_tokens).toBeGreaterThan(whole.usage!.prompt_tokens);
    expect(next.choices[0].finish_reason).toMatch(/^(stop|length|function_call)$/);
  }, 60_000);
});
