/**
 * Chat's deprecated function calling (`functions`, `function_call`), which the reference API still
 * answers and older clients still send, on a fake model that writes scripted text: the offer reaches
 * the template as tools, at most one call is allowed, the answer is `message.function_call` with
 * finish reason `function_call` (streamed as a name fragment, then argument pieces), and a replayed
 * legacy history reaches the template as a tool call and its result.
 */
import { describe, expect, it } from "vitest";
import type { OpenSlotOp } from "../../../src/runtime/text-worker/protocol.js";
import { AUTH, fakeApp, fakeModel, sseEvents, SLUG } from "./fake-model.js";

const WEATHER = {
  name: "get_weather",
  description: "Weather in a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"], additionalProperties: false },
};
const TIME = { name: "get_time", parameters: { type: "object", properties: {} } };

const bytes = (text: string) => [...new TextEncoder().encode(text)];
const CALL_TEXT = '<tool_call>\n{"name": "get_weather", "arguments": {"city":"Paris"}}\n</tool_call>';

const chat = (over: Record<string, unknown> = {}) => ({
  model: SLUG,
  messages: [{ role: "user", content: "Weather in Paris?" }],
  functions: [WEATHER, TIME],
  ...over,
});

async function ask(payload: Record<string, unknown>, script = bytes(CALL_TEXT)) {
  const fake = fakeModel({ script });
  const { app } = await fakeApp({ fake });
  const res = await app.inject({ method: "POST", url: "/v1/chat/completions", payload, headers: AUTH });
  return { res, fake };
}

function openedFormat(fake: ReturnType<typeof fakeModel>): Record<string, unknown> | undefined {
  const open = fake.backend.calls.flatMap((c) => c.ops).find((op): op is OpenSlotOp => op.op === "open");
  const constraint = open?.constraint as { format?: string } | undefined;
  return constraint?.format === undefined ? undefined : (JSON.parse(constraint.format) as Record<string, unknown>);
}

describe("legacy function calling", () => {
  it("answers a call as message.function_call with finish_reason function_call, and no tool_calls", async () => {
    const { res, fake } = await ask(chat());
    expect(res.statusCode, res.body).toBe(200);
    const choice = res.json().choices[0];
    expect(choice.finish_reason).toBe("function_call");
    expect(choice.message).toEqual({ role: "assistant", content: null, refusal: null, function_call: { name: "get_weather", arguments: '{"city":"Paris"}' } });
    expect(fake.renderedTools[0]?.map((t) => t.name)).toEqual(["get_weather", "get_time"]);
    // One call at most: the legacy answer has room for one.
    expect(openedFormat(fake)).toMatchObject({ type: "triggered_tags", stop_after_first: true });
  });

  it("streams the call's name first, then its argument text, adding up to the whole answer", async () => {
    const whole = (await ask(chat())).res.json().choices[0].message.function_call;
    const events = sseEvents((await ask(chat({ stream: true }))).res.body);
    const chunks = events.slice(0, -1) as Array<{ choices: Array<{ delta: Record<string, unknown>; finish_reason: string | null }> }>;
    const fragments = chunks.flatMap((c) =>
      c.choices[0]?.delta.function_call ? [c.choices[0].delta.function_call as { name?: string; arguments: string }] : [],
    );
    expect(fragments[0]).toEqual({ name: "get_weather", arguments: "" });
    expect(fragments.slice(1).every((f) => Object.keys(f).join() === "arguments")).toBe(true);
    expect(fragments.map((f) => f.arguments).join("")).toBe(whole.arguments);
    expect(chunks.some((c) => c.choices[0]?.delta.tool_calls !== undefined)).toBe(false);
    expect(chunks.at(-1)!.choices[0].finish_reason).toBe("function_call");
  });

  it("function_call: a name forces that function; none offers nothing; auto leaves plain answers plain", async () => {
    const named = await ask(chat({ function_call: { name: "get_time" } }), bytes('<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'));
    expect((openedFormat(named.fake)!.tags as Array<{ begin: string }>).map((t) => t.begin)).toEqual(['<tool_call>\n{"name": "get_time", "arguments": ']);
    expect(named.res.json().choices[0].message.function_call).toEqual({ name: "get_time", arguments: "{}" });
    const none = await ask(chat({ function_call: "none" }));
    expect(none.fake.renderedTools[0]).toBeUndefined();
    expect(none.res.json().choices[0]).toMatchObject({ message: { content: CALL_TEXT }, finish_reason: "stop" });
    const plain = await ask(chat(), bytes("Sunny."));
    expect(plain.res.json().choices[0]).toEqual(
      expect.objectContaining({ message: { role: "assistant", content: "Sunny.", refusal: null }, finish_reason: "stop" }),
    );
  });

  it("a legacy history reaches the template as a tool call and its result, under one id", async () => {
    const { res, fake } = await ask(
      chat({
        messages: [
          { role: "user", content: "Weather in Paris?" },
          { role: "assistant", content: null, function_call: { name: "get_weather", arguments: '{"city":"Paris"}' } },
          { role: "function", name: "get_weather", content: '{"sky":"clear"}' },
        ],
      }),
      bytes("Clear."),
    );
    expect(res.statusCode, res.body).toBe(200);
    const [, call, result] = fake.rendered[0] as Array<Record<string, unknown>>;
    const calls = call.tool_calls as Array<{ id: string; type: string; function: unknown }>;
    expect(calls).toEqual([{ id: expect.stringMatching(/^call_/), type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }]);
    expect(result).toMatchObject({ role: "tool", name: "get_weather", content: '{"sky":"clear"}', tool_call_id: calls[0].id });
  });

  it("refuses bad legacy requests with 400 naming the field", async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [chat({ function_call: { name: "nope" } }), "function_call"],
      [chat({ functions: undefined, function_call: { name: "get_time" } }), "function_call"],
      [chat({ functions: [WEATHER, WEATHER] }), "functions[1].name"],
      [chat({ functions: [{ name: "f", parameters: { type: "array" } }] }), "functions[0].parameters"],
      [chat({ functions: [{ name: "f", paramters: {} }] }), "functions[0].paramters"],
      [chat({ function_call: "required" }), "function_call"],
      [chat({ tools: [{ type: "function", function: TIME }] }), "functions"],
      [chat({ functions: undefined, function_call: "auto", tool_choice: "none" }), "function_call"],
      [chat({ messages: [{ role: "function", content: "{}" }] }), "messages[0].name"],
      [chat({ messages: [{ role: "user", content: "x", function_call: { name: "f", arguments: "{}" } }] }), "messages[0].function_call"],
      [chat({ messages: [{ role: "assistant", function_call: { name: "f", arguments: "[1]" } }] }), "messages[0].function_call.arguments"],
    ];
    for (const [payload, param] of cases) {
      const { res } = await ask(payload);
      expect(res.statusCode, JSON.stringify(payload)).toBe(400);
      expect(res.json().error.param, JSON.stringify(payload)).toBe(param);
    }
  });
});
