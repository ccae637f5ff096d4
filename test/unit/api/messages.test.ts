/**
 * Anthropic's Messages API on a fake model: one `message` of content blocks with the stop reason
 * and usage; named events that add up to it; a stop sequence named; tool use as blocks (and a
 * history of tool uses and results rendered, ids in the model's form); a reasoning model's thinking
 * as a block; assistant prefill; token counting; errors in Anthropic's shape (an overload its 529).
 */
import { describe, expect, it } from "vitest";
import type { OpenSlotOp } from "../../../src/runtime/text-worker/protocol.js";
import { AUTH, fakeApp, fakeModel, SLUG, word } from "./fake-model.js";

const bytes = (text: string) => [...new TextEncoder().encode(text)];
const HELLO = [word("Hello"), word(" world"), word("!")];
const ask = (over: Record<string, unknown> = {}) => ({ model: SLUG, max_tokens: 200, messages: [{ role: "user", content: "hi" }], ...over });

async function post(payload: Record<string, unknown>, fake = fakeModel({ script: HELLO }), url = "/v1/messages") {
  const { app } = await fakeApp({ fake });
  const res = await app.inject({ method: "POST", url, payload, headers: AUTH });
  return { res, fake };
}

/** A named-event stream's events, in order, each checked to carry its name as its `type`. */
function events(body: string): Array<Record<string, any>> {
  return body
    .split("\n\n")
    .filter((block) => block.startsWith("event: "))
    .map((block) => {
      const [name, data] = block.split("\n");
      const event = JSON.parse(data.slice("data: ".length)) as Record<string, any>;
      expect(name).toBe(`event: ${event.type}`);
      return event;
    });
}

/** The message a stream of events describes. */
function assemble(list: Array<Record<string, any>>) {
  const message = { ...list[0].message, content: [] as Array<Record<string, any>> };
  const json: string[] = [];
  for (const e of list.slice(1)) {
    if (e.type === "content_block_start") message.content[e.index] = { ...e.content_block };
    else if (e.type === "content_block_delta") {
      const block = message.content[e.index];
      if (e.delta.type === "text_delta") block.text += e.delta.text;
      else if (e.delta.type === "thinking_delta") block.thinking += e.delta.thinking;
      else json[e.index] = (json[e.index] ?? "") + e.delta.partial_json;
    } else if (e.type === "content_block_stop" && json[e.index] !== undefined) message.content[e.index].input = JSON.parse(json[e.index]);
    else if (e.type === "message_delta") Object.assign(message, e.delta, { usage: { ...message.usage, ...e.usage } });
  }
  return message;
}

describe("POST /v1/messages", () => {
  it("answers a message of content blocks, with the stop reason and usage", async () => {
    const { res } = await post(ask({ system: "Be brief." }));
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({
      id: expect.stringMatching(/^msg_/),
      type: "message",
      role: "assistant",
      model: SLUG,
      content: [{ type: "text", text: "Hello world!" }],
      stop_reason: "end_turn",
      stop_sequence: null,
      usage: { input_tokens: expect.any(Number), output_tokens: 3, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
    });
    const cut = await post(ask({ max_tokens: 2 }));
    expect(cut.res.json()).toMatchObject({ stop_reason: "max_tokens", content: [{ type: "text", text: "Hello world" }] });
    const stopped = await post(ask({ stop_sequences: ["zz", " world"] }));
    expect(stopped.res.json()).toMatchObject({ stop_reason: "stop_sequence", stop_sequence: " world", content: [{ text: "Hello" }] });
  });

  it("streams named events that add up to the whole message", async () => {
    const whole = (await post(ask())).res.json();
    const { res } = await post(ask({ stream: true }));
    expect(res.headers["content-type"]).toBe("text/event-stream");
    const list = events(res.body);
    expect(list.map((e) => e.type)).toEqual([
      "message_start",
      "content_block_start",
      ...Array(3).fill("content_block_delta"),
      "content_block_stop",
      "message_delta",
      "message_stop",
    ]);
    expect(res.body).not.toContain("[DONE]");
    const message = assemble(list);
    // message_delta carries the whole usage, which the client takes over message_start's.
    expect({ ...message, id: "" }).toEqual({ ...whole, id: "" });
    expect(list[0].message.usage.input_tokens).toBe(whole.usage.input_tokens);
  });

  it("tool use: blocks with the input as an object, stop reason tool_use, streamed as input_json_delta; tool_choice any forces a call", async () => {
    const tools = [{ name: "get_weather", description: "Weather", input_schema: { type: "object", properties: { city: { type: "string" } } } }];
    const text = 'Checking. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
    const whole = await post(ask({ tools }), fakeModel({ script: bytes(text) }));
    expect(whole.res.json()).toMatchObject({
      stop_reason: "tool_use",
      content: [
        { type: "text", text: "Checking." },
        { type: "tool_use", id: expect.stringMatching(/^toolu_/), name: "get_weather", input: { city: "Paris" } },
      ],
    });
    const streamed = assemble(events((await post(ask({ tools, stream: true }), fakeModel({ script: bytes(text) }))).res.body));
    expect(streamed.content.map((b: Record<string, unknown>) => ({ ...b, id: undefined }))).toEqual(
      whole.res.json().content.map((b: Record<string, unknown>) => ({ ...b, id: undefined })),
    );
    expect(streamed.stop_reason).toBe("tool_use");
    const forced = await post(ask({ tools, tool_choice: { type: "any" } }), fakeModel({ script: bytes(text.slice("Checking. ".length)) }));
    const open = forced.fake.backend.calls.flatMap((c) => c.ops).find((op): op is OpenSlotOp => op.op === "open");
    expect(JSON.parse((open?.constraint as { format: string }).format)).toMatchObject({ at_least_one: true });
  });

  it("a history of tool uses and results reaches the template as calls and tool messages, under the model's ids", async () => {
    const messages = [
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: [{ type: "tool_use", id: "toolu_abc", name: "get_weather", input: { city: "Paris" } }] },
      {
        role: "user",
        content: [
          { type: "tool_result", tool_use_id: "toolu_abc", content: [{ type: "text", text: "sunny" }] },
          { type: "text", text: "And tomorrow?" },
        ],
      },
    ];
    const tools = [{ name: "get_weather", input_schema: { type: "object" } }];
    const { res, fake } = await post(ask({ messages, tools }));
    expect(res.statusCode, res.body).toBe(200);
    const [, call, result, user] = fake.rendered[0] as Array<Record<string, any>>;
    expect(call.tool_calls[0]).toEqual({
      id: expect.stringMatching(/^call_/),
      type: "function",
      function: { name: "get_weather", arguments: '{"city":"Paris"}' },
    });
    expect(result).toEqual({ role: "tool", tool_call_id: call.tool_calls[0].id, content: "sunny" });
    expect(user).toEqual({ role: "user", content: "And tomorrow?" });
  });

  it("a reasoning model's thinking is a thinking block before the text; thinking disabled switches it off", async () => {
    const reasoner = () => fakeModel({ script: bytes("<think>\nHmm.\n</think>\n\nHi."), reasoning: { switchable: true } });
    const whole = await post(ask(), reasoner());
    expect(whole.res.json().content).toEqual([
      { type: "thinking", thinking: "\nHmm.\n", signature: "" },
      { type: "text", text: "Hi." },
    ]);
    const streamed = assemble(events((await post(ask({ stream: true }), reasoner())).res.body));
    expect(streamed.content).toEqual(whole.res.json().content);
    const off = await post(ask({ thinking: { type: "disabled" } }), reasoner());
    expect(off.fake.renderedVariables[0]).toEqual({ enable_thinking: false });
    // A model that does not reason answers a request to think, and names the field it could not honour.
    const plain = await post(ask({ thinking: { type: "enabled", budget_tokens: 100 } }));
    expect(plain.res.statusCode).toBe(200);
    expect(plain.res.headers["x-kiln-ignored-fields"]).toBe("thinking");
  });

  it("thinking's budget_tokens reaches the engine as the thinking budget, and must be less than max_tokens", async () => {
    const fake = fakeModel({ script: bytes("<think>\nHmm.\n</think>\n\nHi."), reasoning: { switchable: true } });
    const { res } = await post(ask({ max_tokens: 200, thinking: { type: "enabled", budget_tokens: 50 } }), fake);
    expect(res.statusCode).toBe(200);
    const open = fake.backend.calls.flatMap((c) => c.ops).find((op): op is OpenSlotOp => op.op === "open");
    expect(open?.thinkingBudget).toEqual({ tokens: 50, opened: false, open: bytes("<think>"), close: bytes("</think>") });
    for (const thinking of [
      { type: "enabled", budget_tokens: 200 },
      { type: "enabled", budget_tokens: 0 },
    ]) {
      const bad = await post(ask({ max_tokens: 200, thinking }));
      expect(bad.res.statusCode).toBe(400);
      expect(bad.res.json()).toMatchObject({ type: "error", error: { type: "invalid_request_error", message: expect.stringContaining("budget_tokens") } });
    }
  });

  it("output_config.format holds the answer to a JSON schema; a schema kiln cannot enforce is a 400 naming it", async () => {
    const schema = { type: "object", properties: { age: { type: "integer" } }, required: ["age"] };
    const { res, fake } = await post(ask({ output_config: { format: { type: "json_schema", schema } } }), fakeModel({ script: bytes('{"age": 3}') }));
    const open = fake.backend.calls.flatMap((c) => c.ops).find((op): op is OpenSlotOp => op.op === "open");
    expect(open?.constraint).toEqual({ type: "json_schema", schema: JSON.stringify(schema) });
    expect(res.json().content).toEqual([{ type: "text", text: '{"age": 3}' }]);
    const bad = await post(
      ask({ output_config: { format: { type: "json_schema", schema: { type: "object", properties: { a: { type: "string", pattern: "[^é]" } } } } } }),
    );
    expect(bad.res.statusCode).toBe(400);
    expect(bad.res.json().error.message).toMatch(/output_config\.format\.schema/);
    // The structured-outputs beta's spelling holds the same; both at once are a 400.
    const beta = await post(ask({ output_format: { type: "json_schema", schema } }), fakeModel({ script: bytes('{"age": 3}') }));
    const betaOpen = beta.fake.backend.calls.flatMap((c) => c.ops).find((op): op is OpenSlotOp => op.op === "open");
    expect(betaOpen?.constraint).toEqual({ type: "json_schema", schema: JSON.stringify(schema) });
    expect(beta.res.headers["x-kiln-ignored-fields"]).toBeUndefined();
    const both = await post(ask({ output_format: { type: "json_schema", schema }, output_config: { format: { type: "json_schema", schema } } }));
    expect(both.res.statusCode).toBe(400);
    expect(both.res.json().error.message).toMatch(/output_format/);
    // Beside tools: a tool_use alone, or text in the format alone.
    const tools = [{ name: "get_weather", input_schema: { type: "object", properties: { city: { type: "string" } } } }];
    const withTools = await post(ask({ tools, output_config: { format: { type: "json_schema", schema } } }), fakeModel({ script: bytes('{"age": 3}') }));
    expect(withTools.res.json().content).toEqual([{ type: "text", text: '{"age": 3}' }]);
    const opened = withTools.fake.backend.calls.flatMap((c) => c.ops).find((op): op is OpenSlotOp => op.op === "open");
    expect(JSON.parse((opened?.constraint as { format: string }).format)).toMatchObject({
      type: "or",
      elements: [{ type: "json_schema", json_schema: schema }, {}],
    });
  });

  it("a last assistant message is a prefill: the answer continues it", async () => {
    const { fake } = await post(
      ask({
        messages: [
          { role: "user", content: "hi" },
          { role: "assistant", content: "Well," },
        ],
      }),
    );
    expect(fake.rendered[0].at(-1)).toEqual({ role: "assistant", content: "Well," });
  });

  it("count_tokens answers the prompt's tokens, as /v1/messages would count them", async () => {
    const counted = (await post(ask({ system: "Be brief." }), undefined, "/v1/messages/count_tokens")).res.json();
    const answered = (await post(ask({ system: "Be brief." }))).res.json();
    expect(counted).toEqual({ input_tokens: answered.usage.input_tokens });
  });

  it("errors come in Anthropic's shape with the right status", async () => {
    const cases: Array<[Record<string, unknown>, number, string, RegExp]> = [
      [{ model: SLUG, messages: [{ role: "user", content: "hi" }] }, 400, "invalid_request_error", /max_tokens/],
      [ask({ model: "nope" }), 404, "not_found_error", /nope/],
      [ask({ temperature: 1.5 }), 400, "invalid_request_error", /temperature/],
      [
        ask({ messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "aGk=" } }] }] }),
        400,
        "invalid_request_error",
        /image/,
      ],
      [ask({ tools: [{ type: "web_search_20250305", name: "web_search" }] }), 400, "invalid_request_error", /server tool/],
      [ask({ tool_choice: { type: "tool", name: "nope" }, tools: [{ name: "f", input_schema: { type: "object" } }] }), 400, "invalid_request_error", /nope/],
      [ask({ messages: [] }), 400, "invalid_request_error", /messages/],
    ];
    for (const [payload, status, type, message] of cases) {
      const { res } = await post(payload);
      expect(res.statusCode, res.body).toBe(status);
      expect(res.json()).toEqual({ type: "error", error: { type, message: expect.stringMatching(message) } });
    }
  });

  it("a full queue is Anthropic's 529 overloaded_error, with retry-after", async () => {
    // One sequence runs, one waits; a third would wait beyond maxWaiting.
    const { app } = await fakeApp({ fake: fakeModel({ script: HELLO, tokenDelayMs: 20, maxRunning: 1, maxWaiting: 1 }) });
    const send = () => app.inject({ method: "POST", url: "/v1/messages", payload: ask(), headers: AUTH });
    const running = [send()];
    await new Promise((r) => setTimeout(r, 5));
    running.push(send());
    await new Promise((r) => setTimeout(r, 5));
    const refused = await send();
    expect(refused.statusCode).toBe(529);
    expect(refused.json()).toEqual({ type: "error", error: { type: "overloaded_error", message: expect.any(String) } });
    expect(refused.headers["retry-after"]).toBe("1");
    for (const r of await Promise.all(running)) expect(r.statusCode).toBe(200);
  });
});
