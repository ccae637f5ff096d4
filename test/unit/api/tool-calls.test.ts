/**
 * Tool calling through POST /v1/chat/completions on a fake model that writes scripted text: the
 * request checks, the constraint handed to the engine, the answer's `tool_calls` and finish reason,
 * and the streamed fragments, framed as the API contract says and adding up to the whole answer.
 */
import { describe, expect, it } from "vitest";
import type { OpenSlotOp } from "../../../src/runtime/text-worker/protocol.js";
import { AUTH, fakeApp, fakeModel, sseEvents, SLUG } from "./fake-model.js";

const WEATHER = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"], additionalProperties: false },
  },
};
const TIME = { type: "function", function: { name: "get_time", parameters: { type: "object", properties: {} } } };

const bytes = (text: string) => [...new TextEncoder().encode(text)];
const CALLS_TEXT =
  'Checking. <tool_call>\n{"name": "get_weather", "arguments": {"city":"Paris"}}\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>';

const chat = (over: Record<string, unknown> = {}) => ({
  model: SLUG,
  messages: [{ role: "user", content: "Weather in Paris?" }],
  tools: [WEATHER, TIME],
  ...over,
});

async function ask(payload: Record<string, unknown>, script = bytes(CALLS_TEXT)) {
  const fake = fakeModel({ script });
  const { app } = await fakeApp({ fake });
  const res = await app.inject({ method: "POST", url: "/v1/chat/completions", payload, headers: AUTH });
  return { res, fake };
}

function openedConstraint(fake: ReturnType<typeof fakeModel>) {
  const open = fake.backend.calls.flatMap((c) => c.ops).find((op): op is OpenSlotOp => op.op === "open");
  return open?.constraint;
}

describe("tool calls", () => {
  it("answers with tool_calls, content before them, and finish_reason tool_calls", async () => {
    const { res, fake } = await ask(chat());
    expect(res.statusCode).toBe(200);
    const choice = res.json().choices[0];
    expect(choice.finish_reason).toBe("tool_calls");
    expect(choice.message.content).toBe("Checking.");
    expect(choice.message.tool_calls).toEqual([
      { id: expect.stringMatching(/^call_[A-Za-z0-9]{24}$/), type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
      { id: expect.stringMatching(/^call_/), type: "function", function: { name: "get_time", arguments: "{}" } },
    ]);
    expect(fake.renderedTools[0]?.map((t) => t.name)).toEqual(["get_weather", "get_time"]);
    // "auto": free text, with calls constrained once their tag starts.
    const constraint = openedConstraint(fake);
    expect(constraint?.type).toBe("structural_tag");
    expect(JSON.parse((constraint as { format: string }).format)).toMatchObject({ type: "triggered_tags", triggers: ["<tool_call>"], stop_after_first: false });
  });

  it("streams each call as a first fragment with id, type and name, then argument pieces, adding up to the whole answer", async () => {
    const whole = (await ask(chat())).res.json().choices[0].message;
    const { res } = await ask(chat({ stream: true }));
    const events = sseEvents(res.body);
    expect(events.at(-1)).toBe("[DONE]");
    const chunks = events.slice(0, -1) as Array<{ choices: Array<{ delta: Record<string, unknown>; finish_reason: string | null }> }>;
    let content = "";
    const calls: Array<{ id: string; name: string; arguments: string }> = [];
    for (const { choices } of chunks) {
      const delta = choices[0].delta as { content?: string; tool_calls?: Array<Record<string, unknown>> };
      if (delta.content) content += delta.content;
      for (const fragment of delta.tool_calls ?? []) {
        const fn = fragment.function as { name?: string; arguments: string };
        if (fragment.id !== undefined) {
          expect(fragment).toEqual({ index: calls.length, id: expect.any(String), type: "function", function: { name: expect.any(String), arguments: "" } });
          calls.push({ id: fragment.id as string, name: fn.name!, arguments: "" });
        } else {
          expect(Object.keys(fragment).sort()).toEqual(["function", "index"]);
          expect(Object.keys(fn)).toEqual(["arguments"]);
          expect(fragment.index).toBe(calls.length - 1);
          calls[calls.length - 1].arguments += fn.arguments;
        }
      }
    }
    expect(chunks.at(-1)!.choices[0]).toMatchObject({ delta: {}, finish_reason: "tool_calls" });
    expect(content).toBe(whole.content);
    expect(calls.map(({ name, arguments: a }) => ({ name, arguments: a }))).toEqual(whole.tool_calls.map((c: { function: unknown }) => c.function));
    // Argument text streams in pieces as it is written, not in one lump at the end.
    expect(chunks.filter((c) => (c.choices[0].delta.tool_calls as unknown[] | undefined)?.length).length).toBeGreaterThan(4);
  });

  it("ends the answer where it starts repeating a call it made exactly, streamed or not", async () => {
    const call = (city: string) => `<tool_call>\n{"name": "get_weather", "arguments": {"city":"${city}"}}\n</tool_call>\n`;
    const script = bytes(call("Paris") + call("Oslo") + call("Paris") + call("Paris") + call("Rome"));
    const { res } = await ask(chat({ tool_choice: "required" }), script);
    const body = res.json();
    expect(body.choices[0].finish_reason).toBe("tool_calls");
    expect(body.choices[0].message.content).toBeNull();
    expect(body.choices[0].message.tool_calls.map((c: any) => c.function.arguments)).toEqual(['{"city":"Paris"}', '{"city":"Oslo"}']);
    // Generation stopped at the repeat: the rest of the script was never produced.
    expect(body.usage.completion_tokens).toBeLessThan((call("Paris") + call("Oslo") + call("Paris")).length);

    const streamed = await ask(chat({ tool_choice: "required", stream: true }), script);
    const chunks = sseEvents(streamed.res.body).filter((e): e is any => e !== "[DONE]");
    const args = chunks
      .flatMap((c) => c.choices[0]?.delta.tool_calls ?? [])
      .map((d: any) => d.function.arguments)
      .join("");
    expect(args).toBe('{"city":"Paris"}{"city":"Oslo"}');
    expect(chunks.at(-1).choices[0].finish_reason).toBe("tool_calls");
  });

  it("a call cut by max_tokens is a tool_calls entry with what was written, never call markup in content", async () => {
    const cut = async (text: string) => (await ask(chat({ max_tokens: text.length }))).res.json().choices[0];
    const head = 'Checking. <tool_call>\n{"name": "get_weather"';
    for (const text of ["Checking. <tool_call>", 'Checking. <tool_call>\n{"na']) {
      const choice = await cut(text);
      expect(choice).toMatchObject({ finish_reason: "length", message: { content: "Checking." } });
      expect(choice.message.tool_calls).toBeUndefined();
    }
    const named = await cut(head + ', "argu');
    expect(named.finish_reason).toBe("length");
    expect(named.message.content).toBe("Checking.");
    expect(named.message.tool_calls).toEqual([{ id: expect.stringMatching(/^call_/), type: "function", function: { name: "get_weather", arguments: "" } }]);
    const partial = await cut(head + ', "arguments": {"city":"Pa');
    expect(partial.message.tool_calls[0].function.arguments).toBe('{"city":"Pa');
  });

  it("without calls, is an ordinary answer", async () => {
    const { res } = await ask(chat(), bytes("It is sunny."));
    expect(res.json().choices[0]).toMatchObject({ message: { content: "It is sunny." }, finish_reason: "stop" });
    expect(res.json().choices[0].message).not.toHaveProperty("tool_calls");
  });

  it("constrains 'required' and named choices to calls from the first token; parallel_tool_calls false allows one", async () => {
    const required = await ask(chat({ tool_choice: "required", parallel_tool_calls: false }));
    expect(JSON.parse((openedConstraint(required.fake) as { format: string }).format)).toMatchObject({
      type: "tags_with_separator",
      at_least_one: true,
      stop_after_first: true,
    });
    const named = await ask(chat({ tool_choice: { type: "function", function: { name: "get_time" } } }));
    const format = JSON.parse((openedConstraint(named.fake) as { format: string }).format) as { tags: Array<{ begin: string }> };
    expect(format.tags.map((t) => t.begin)).toEqual(['<tool_call>\n{"name": "get_time", "arguments": ']);
  });

  it("beside an output format, 'auto' answers calls alone or content in the format alone", async () => {
    const schema = { type: "object", properties: { answer: { type: "string" } }, required: ["answer"], additionalProperties: false };
    const formats: Array<[Record<string, unknown>, unknown]> = [
      [{ response_format: { type: "json_schema", json_schema: { name: "a", schema } } }, { type: "json_schema", json_schema: schema }],
      [{ response_format: { type: "json_object" } }, { type: "json_schema", json_schema: { type: "object" } }],
      [{ guided_regex: "[a-z]+" }, { type: "regex", pattern: "[a-z]+" }],
      [{ guided_choice: ["yes", ""] }, { type: "grammar", grammar: 'root ::= "yes" | ""\n' }],
    ];
    for (const [fields, element] of formats) {
      const content = await ask(chat(fields), bytes('{"answer": "sunny"}'));
      expect(content.res.statusCode, content.res.body).toBe(200);
      expect(content.res.json().choices[0]).toMatchObject({ message: { content: '{"answer": "sunny"}' }, finish_reason: "stop" });
      const answer = JSON.parse((openedConstraint(content.fake) as { format: string }).format) as { type: string; elements: unknown[] };
      expect(answer.type).toBe("or");
      expect(answer.elements[0]).toEqual(element);
      // The calls' alternative: one tag from the opener to the closer, the calls inside it.
      expect(answer.elements[1]).toMatchObject({
        type: "tag",
        begin: "<tool_call>\n",
        end: "\n</tool_call>",
        content: { type: "tags_with_separator", at_least_one: true },
      });
    }
    const calls = await ask(chat(formats[0][0]), bytes('<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'));
    expect(calls.res.json().choices[0]).toMatchObject({ message: { content: null }, finish_reason: "tool_calls" });
    expect(calls.res.json().choices[0].message.tool_calls.map((c: { function: unknown }) => c.function)).toEqual([{ name: "get_time", arguments: "{}" }]);
    // A forced choice makes calls: the format waits for a later answer.
    const required = await ask(chat({ ...formats[0][0], tool_choice: "required" }));
    expect(JSON.parse((openedConstraint(required.fake) as { format: string }).format)).toMatchObject({ type: "tags_with_separator", at_least_one: true });
  });

  it("with tool_choice none, offers no tools and reads no calls", async () => {
    const { res, fake } = await ask(chat({ tool_choice: "none" }));
    expect(fake.renderedTools[0]).toBeUndefined();
    expect(openedConstraint(fake)).toBeUndefined();
    expect(res.json().choices[0]).toMatchObject({ message: { content: CALLS_TEXT }, finish_reason: "stop" });
  });

  it("refuses bad tool requests with 400 naming the field", async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [chat({ tool_choice: { type: "function", function: { name: "nope" } } }), "tool_choice"],
      [chat({ tools: [], tool_choice: "required" }), "tool_choice"],
      [chat({ tools: undefined, tool_choice: "required" }), "tool_choice"],
      [chat({ tools: [WEATHER, WEATHER] }), "tools[1].function.name"],
      [chat({ tools: [{ type: "function", function: { name: "bad name" } }] }), "tools[0].function.name"],
      [chat({ tools: [{ type: "function", function: { name: "f", parameters: { type: "array" } } }] }), "tools[0].function.parameters"],
      [
        chat({
          tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: { a: { type: "string", $comment: 1, not: {} } } } } }],
        }),
        "tools[0].function.parameters",
      ],
      [chat({ tools: [{ type: "retrieval" }] }), "tools[0].type"],
      [chat({ tool_choice: "sometimes" }), "tool_choice"],
    ];
    for (const [payload, param] of cases) {
      const { res } = await ask(payload);
      expect(res.statusCode, JSON.stringify(payload)).toBe(400);
      expect(res.json().error.param, JSON.stringify(payload)).toBe(param);
    }
  });
});
