/**
 * POST /v1/responses on a fake model: the request checks, the response object and what it echoes,
 * the typed stream events (names, sequence numbers, the reference order, and that they rebuild
 * the non-streamed response, through the official Node client's own accumulator), tool calls and
 * their outputs, `text.format`, and the stored responses: GET, DELETE, input_items,
 * `previous_response_id`, `item_reference`, and one key never seeing another's.
 */
import { accumulateResponse } from "openai/lib/responses/ResponseAccumulator";
import { describe, expect, it, vi } from "vitest";
import { drainApp } from "../../../src/api/app.js";
import { Lifecycle } from "../../../src/api/context.js";
import { openDatabase } from "../../../src/catalogue/db.js";
import { SqliteResponseStore } from "../../../src/catalogue/stored-responses.js";
import type { OpenSlotOp } from "../../../src/runtime/text-worker/protocol.js";
import { ChatTemplateError } from "../../../src/scheduler/index.js";
import { sqliteKeyStore } from "../cloud/keys-support.js";
import { AUTH, fakeApp, fakeModel, SLUG, word } from "./fake-model.js";

const WEATHER = {
  type: "function",
  name: "get_weather",
  description: "Weather in a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"], additionalProperties: false },
};
const TIME = { type: "function", name: "get_time", parameters: { type: "object", properties: {} } };
const bytes = (text: string) => [...new TextEncoder().encode(text)];
const CALLS_TEXT =
  'Checking. <tool_call>\n{"name": "get_weather", "arguments": {"city":"Paris"}}\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>';

const request = (over: Record<string, unknown> = {}) => ({ model: SLUG, input: "hi", ...over });

type App = Awaited<ReturnType<typeof fakeApp>>["app"];

async function post(app: App, payload: Record<string, unknown>, headers: Record<string, string> = AUTH) {
  return app.inject({ method: "POST", url: "/v1/responses", payload, headers });
}

async function ask(payload: Record<string, unknown>, fake = fakeModel()) {
  const { app } = await fakeApp({ fake });
  return { res: await post(app, payload), fake, app };
}

interface NamedEvent {
  event: string;
  data: any;
}

/** A named-event SSE body: each event an `event:` line naming its `data:` line's type. */
function namedEvents(body: string): NamedEvent[] {
  expect(body.endsWith("\n\n")).toBe(true);
  return body
    .slice(0, -2)
    .split("\n\n")
    .filter((block) => !block.startsWith(": "))
    .map((block) => {
      const match = /^event: ([^\n]+)\ndata: ([^\n]+)$/.exec(block);
      if (!match) throw new Error(`malformed event: ${JSON.stringify(block)}`);
      return { event: match[1], data: JSON.parse(match[2]) };
    });
}

/** The response the events rebuild, as the official Node client's stream helper rebuilds it. */
function rebuilt(events: NamedEvent[]): any {
  let snapshot: any;
  for (const { data } of events) snapshot = accumulateResponse(data, snapshot);
  return snapshot;
}

/** A response with its per-request values (ids, times) replaced, for comparing two answers to one request. */
function comparable(response: any): any {
  let n = 0;
  const ids = new Map<string, string>();
  const id = (value: string) => {
    if (!ids.has(value)) ids.set(value, `id${n++}`);
    return ids.get(value)!;
  };
  return JSON.parse(JSON.stringify(response), (key, value) => {
    if (typeof value === "string" && /^(resp|msg|fc|fco)_[0-9a-f]{48}$/.test(value)) return id(value);
    if (typeof value === "string" && key === "call_id") return id(value);
    if (key === "created_at" || key === "completed_at") return typeof value === "number" ? 0 : value;
    return value;
  });
}

describe("POST /v1/responses", () => {
  it("answers with the response object: ids, status, a message item, output_text, usage and the echoed request", async () => {
    const { res, fake } = await ask(request({ instructions: "Be brief.", metadata: { run: "7" }, user: "u1" }));
    expect(res.statusCode).toBe(200);
    expect(res.headers["content-type"]).toMatch(/^application\/json/);
    const body = res.json();
    expect(body.id).toMatch(/^resp_[0-9a-f]{48}$/);
    expect(body.created_at).toBeCloseTo(Date.now() / 1000, -1);
    expect(body).toMatchObject({
      object: "response",
      status: "completed",
      error: null,
      incomplete_details: null,
      background: false,
      instructions: "Be brief.",
      max_output_tokens: null,
      model: SLUG,
      parallel_tool_calls: true,
      previous_response_id: null,
      store: true,
      temperature: 1,
      top_p: 1,
      text: { format: { type: "text" }, verbosity: "medium" },
      tool_choice: "auto",
      tools: [],
      truncation: "disabled",
      user: "u1",
      metadata: { run: "7" },
      output_text: "Hello world!",
    });
    expect(body.completed_at).toBeGreaterThanOrEqual(body.created_at);
    expect(body.output).toEqual([
      {
        id: expect.stringMatching(/^msg_[0-9a-f]{48}$/),
        type: "message",
        status: "completed",
        role: "assistant",
        content: [{ type: "output_text", text: "Hello world!", annotations: [], logprobs: [] }],
      },
    ]);
    // instructions are the system message, a string input the user's.
    expect(fake.rendered[0]).toEqual([
      { role: "system", content: "Be brief." },
      { role: "user", content: "hi" },
    ]);
    const inputTokens = fake.model.chatPrompt(fake.rendered[0]).length;
    expect(body.usage).toEqual({
      input_tokens: inputTokens,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: 3,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: inputTokens + 3,
    });
  });

  it("is incomplete (reason max_output_tokens) when max_output_tokens cuts it, its message item too", async () => {
    const body = (await ask(request({ max_output_tokens: 2 }))).res.json();
    expect(body).toMatchObject({
      status: "incomplete",
      incomplete_details: { reason: "max_output_tokens" },
      completed_at: null,
      max_output_tokens: 2,
      output_text: "Hello world",
    });
    expect(body.output[0].status).toBe("incomplete");
    expect(body.usage.output_tokens).toBe(2);
  });

  it("renders message items by role, with text parts, function calls and their outputs as chat turns", async () => {
    const { res, fake } = await ask(
      request({
        input: [
          { role: "developer", content: "Use tools." },
          {
            type: "message",
            role: "user",
            content: [
              { type: "input_text", text: "Weather" },
              { type: "input_text", text: "in Paris?" },
            ],
          },
          { type: "message", role: "assistant", content: [{ type: "output_text", text: "Let me check." }] },
          { type: "function_call", call_id: "call_1", name: "get_weather", arguments: '{"city":"Paris"}' },
          { type: "function_call", call_id: "call_2", name: "get_time", arguments: "{}" },
          { type: "function_call_output", call_id: "call_1", output: "18C" },
          { type: "function_call_output", call_id: "call_2", output: [{ type: "input_text", text: "noon" }] },
        ],
      }),
    );
    expect(res.statusCode).toBe(200);
    expect(fake.rendered[0]).toEqual([
      { role: "system", content: "Use tools." },
      {
        role: "user",
        content: [
          { type: "text", text: "Weather" },
          { type: "text", text: "in Paris?" },
        ],
      },
      {
        role: "assistant",
        content: "Let me check.",
        tool_calls: [
          { id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
          { id: "call_2", type: "function", function: { name: "get_time", arguments: "{}" } },
        ],
      },
      { role: "tool", content: "18C", tool_call_id: "call_1" },
      { role: "tool", content: "noon", tool_call_id: "call_2" },
    ]);
  });

  it("passes temperature, top_p and kiln's sampling extensions to the engine", async () => {
    const { fake } = await ask(request({ temperature: 0.3, top_p: 0.9, top_k: 5, seed: 7 }));
    expect(fake.backend.samplings[0]).toMatchObject({ temperature: 0.3, top_p: 0.9, top_k: 5, seed: 7 });
  });

  it("reports log probabilities when include asks for them", async () => {
    const body = (await ask(request({ include: ["message.output_text.logprobs"], top_logprobs: 2 }))).res.json();
    const logprobs = body.output[0].content[0].logprobs;
    expect(logprobs.map((l: any) => l.token)).toEqual(["Hello", " world", "!"]);
    expect(logprobs[0]).toMatchObject({ logprob: expect.any(Number), bytes: bytes("Hello"), top_logprobs: expect.any(Array) });
    expect(logprobs[0].top_logprobs).toHaveLength(2);
    expect(body.top_logprobs).toBe(2);
  });
});

describe("request checks", () => {
  const cases: Array<[string, Record<string, unknown>, number, string, string]> = [
    ["a hosted tool", request({ tools: [WEATHER, { type: "web_search" }] }), 400, "tools[1].type", "unsupported_value"],
    ["file search", request({ tools: [{ type: "file_search", vector_store_ids: ["vs_1"] }] }), 400, "tools[0].type", "unsupported_value"],
    ["a hosted tool choice", request({ tools: [WEATHER], tool_choice: { type: "web_search_preview" } }), 400, "tool_choice.type", "unsupported_value"],
    [
      "an image part",
      request({ input: [{ role: "user", content: [{ type: "input_image", image_url: "https://x/y.png" }] }] }),
      400,
      "input[0].content[0].type",
      "unsupported_value",
    ],
    ["a web search call item", request({ input: [{ type: "web_search_call", id: "ws_1", status: "completed" }] }), 400, "input[0].type", "unsupported_value"],
    ["no input", { model: SLUG }, 400, "input", "missing_required_parameter"],
    ["an empty input list", request({ input: [] }), 400, "input", "invalid_value"],
    ["a temperature out of range", request({ temperature: 3 }), 400, "temperature", "invalid_value"],
    ["chat's max_tokens", request({ max_tokens: 5 }), 400, "max_tokens", "unsupported_parameter"],
    ["chat's response_format", request({ response_format: { type: "json_object" } }), 400, "response_format", "unsupported_parameter"],
    ["background", request({ background: true }), 400, "background", "unsupported_parameter"],
    ["another server's extension", request({ guided_grammar: "root ::= x" }), 400, "guided_grammar", "unsupported_parameter"],
    ["guided_json (text.format does it here)", request({ guided_json: { type: "object" } }), 400, "guided_json", "unsupported_parameter"],
    ["an include value the reference does not define", request({ include: ["everything"] }), 400, "include[0]", "invalid_value"],
    ["reasoning effort on a model that does not reason", request({ reasoning: { effort: "high" } }), 400, "reasoning.effort", "unsupported_parameter"],
    ["a reasoning summary from a model that does not reason", request({ reasoning: { summary: "auto" } }), 400, "reasoning.summary", "unsupported_parameter"],
    [
      "a schema kiln cannot enforce",
      request({ text: { format: { type: "json_schema", name: "x", schema: { type: "object", not: {} } } } }),
      400,
      "text.format",
      "invalid_value",
    ],
    ["a named tool that is not offered", request({ tools: [WEATHER], tool_choice: { type: "function", name: "nope" } }), 400, "tool_choice", "invalid_value"],
    ["duplicate function names", request({ tools: [WEATHER, WEATHER] }), 400, "tools[1].name", "invalid_value"],
    ["an unknown previous response", request({ previous_response_id: "resp_nope" }), 400, "previous_response_id", "previous_response_not_found"],
    ["an unknown item reference", request({ input: [{ type: "item_reference", id: "msg_nope" }] }), 400, "input[0].id", "invalid_value"],
    ["an unknown model", request({ model: "no-such-model" }), 404, "model", "model_not_found"],
  ];
  for (const [what, payload, status, param, code] of cases) {
    it(`refuses ${what}: ${status} naming ${param}`, async () => {
      const { res } = await ask(payload);
      expect(res.statusCode, res.body).toBe(status);
      expect(res.json().error).toMatchObject({ type: "invalid_request_error", param, code });
    });
  }

  it("a conversation the chat template cannot render is a 400 on input", async () => {
    const fake = fakeModel();
    fake.model.chatPrompt = () => {
      throw new ChatTemplateError("Conversation roles must alternate user/assistant/user/assistant/...", true);
    };
    const { res } = await ask(request(), fake);
    expect(res.statusCode).toBe(400);
    expect(res.json().error).toMatchObject({ code: "invalid_value", param: "input", message: expect.stringContaining("alternate") });
  });

  it("accepts an unknown top-level field and names it in x-kiln-ignored-fields, as the other routes do", async () => {
    const { res } = await ask(request({ vendor_thing: 1, ключ: 2 }));
    expect(res.statusCode).toBe(200);
    expect(res.headers["x-kiln-ignored-fields"]).toBe("vendor_thing, %D0%BA%D0%BB%D1%8E%D1%87");
  });

  it("knows every field of the reference's request (null accepted)", async () => {
    // The official Node client's ResponseCreateParams, and max_tool_calls of the reference's OpenAPI description.
    const fields = [
      "background",
      "context_management",
      "conversation",
      "include",
      "instructions",
      "max_output_tokens",
      "max_tool_calls",
      "metadata",
      "moderation",
      "parallel_tool_calls",
      "previous_response_id",
      "prompt",
      "prompt_cache_key",
      "prompt_cache_options",
      "prompt_cache_retention",
      "reasoning",
      "safety_identifier",
      "service_tier",
      "store",
      "stream",
      "stream_options",
      "temperature",
      "text",
      "tool_choice",
      "tools",
      "top_logprobs",
      "top_p",
      "truncation",
      "user",
    ];
    const { res } = await ask(request(Object.fromEntries(fields.map((f) => [f, null]))));
    expect(res.statusCode, res.body).toBe(200);
    expect(res.headers["x-kiln-ignored-fields"]).toBeUndefined();
  });

  it("accepts the hints and null fields the clients send", async () => {
    const { res } = await ask(
      request({
        prompt_cache_key: "k",
        safety_identifier: "s",
        service_tier: "auto",
        background: false,
        reasoning: {},
        include: [],
        stream: false,
        store: null,
        text: { verbosity: "medium" },
      }),
    );
    expect(res.statusCode, res.body).toBe(200);
    expect(res.headers["x-kiln-ignored-fields"]).toBeUndefined();
  });
});

describe("streaming", () => {
  it("sends typed, named events in the reference order with increasing sequence numbers, and no [DONE]", async () => {
    const { res } = await ask(request({ stream: true }));
    expect(res.statusCode).toBe(200);
    expect(res.headers["content-type"]).toBe("text/event-stream");
    const events = namedEvents(res.body);
    expect(res.body).not.toContain("[DONE]");
    for (const [i, e] of events.entries()) {
      expect(e.event).toBe(e.data.type);
      expect(e.data.sequence_number).toBe(i);
    }
    expect(events.map((e) => e.event)).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.content_part.added",
      "response.output_text.delta",
      "response.output_text.delta",
      "response.output_text.delta",
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.completed",
    ]);
    const [created, inProgress, added, partAdded] = events.map((e) => e.data);
    expect(created.response).toMatchObject({ status: "in_progress", output: [], usage: null, output_text: "" });
    expect(inProgress.response.id).toBe(created.response.id);
    expect(added).toMatchObject({ output_index: 0, item: { type: "message", status: "in_progress", role: "assistant", content: [] } });
    expect(partAdded).toMatchObject({ item_id: added.item.id, output_index: 0, content_index: 0, part: { type: "output_text", text: "" } });
    expect(events.slice(4, 7).map((e) => e.data.delta)).toEqual(["Hello", " world", "!"]);
    expect(events[7].data).toMatchObject({ text: "Hello world!", item_id: added.item.id });
    expect(events.at(-1)!.data.response).toMatchObject({
      id: created.response.id,
      status: "completed",
      output_text: "Hello world!",
      usage: { output_tokens: 3 },
    });
  });

  it("rebuilds the non-streamed response exactly, through the official client's accumulator", async () => {
    const script = [word("Hello"), 0xe2, 0x82, 0xac, word(" world")]; // "€" split over three byte tokens
    for (const over of [{}, { max_output_tokens: 3 }, { include: ["message.output_text.logprobs"], top_logprobs: 1 }]) {
      const whole = (await ask(request(over), fakeModel({ script }))).res.json();
      const events = namedEvents((await ask(request({ ...over, stream: true }), fakeModel({ script }))).res.body);
      const last = events.at(-1)!.data.response;
      expect(rebuilt(events)).toEqual(last);
      expect(comparable(last)).toEqual(comparable(whole));
    }
  });

  it("ends with response.incomplete when max_output_tokens cuts the output", async () => {
    const events = namedEvents((await ask(request({ stream: true, max_output_tokens: 1 }))).res.body);
    expect(events.at(-1)!.data).toMatchObject({
      type: "response.incomplete",
      response: { status: "incomplete", incomplete_details: { reason: "max_output_tokens" } },
    });
  });

  it("reports a failure after the first event as an error event and response.failed, naming nothing internal", async () => {
    const fake = fakeModel({ failWhen: { match: (call) => call.rows > 0 && call.tokensPerRow === 1, error: new Error("worker crashed") } });
    const { res } = await ask(request({ stream: true }), fake);
    expect(res.statusCode).toBe(200);
    const events = namedEvents(res.body);
    const [error, failed] = events.slice(-2).map((e) => e.data);
    expect(error).toMatchObject({ type: "error", code: null, param: null, message: expect.stringContaining("request id") });
    expect(failed).toMatchObject({ type: "response.failed", response: { status: "failed", error: { code: "server_error" } } });
    expect(failed.sequence_number).toBe(error.sequence_number + 1);
    expect(res.body).not.toContain("worker crashed");
  });

  it("a client that disconnects cancels the generation, which is metered as cancelled and not stored", async () => {
    const fake = fakeModel({ script: Array(2000).fill(word("Hello")), tokenDelayMs: 2, contextLength: 4096 });
    const records: Array<{ requestId: string; settledFrom?: string }> = [];
    const { app } = await fakeApp({ fake, usage: { record: (u) => records.push(u) }, sse: { keepAliveMs: 0 } });
    try {
      const url = await app.listen({ port: 0, host: "127.0.0.1" });
      const controller = new AbortController();
      const res = await fetch(`${url}/v1/responses`, {
        method: "POST",
        headers: { ...AUTH, "content-type": "application/json" },
        body: JSON.stringify(request({ stream: true, max_output_tokens: 2000 })),
        signal: controller.signal,
      });
      const reader = res.body!.getReader();
      let seen = "";
      while (!/"delta"/.test(seen)) seen += new TextDecoder().decode((await reader.read()).value);
      const id = /"id":"(resp_[0-9a-f]+)"/.exec(seen)![1];
      controller.abort();
      await vi.waitFor(() => expect(records).toHaveLength(1));
      const computed = fake.backend.computed;
      await new Promise((r) => setTimeout(r, 100));
      expect(fake.backend.computed).toBe(computed);
      expect(computed).toBeLessThan(200);
      expect(records[0]).toEqual(expect.objectContaining({ requestId: id, settledFrom: "cancelled" }));
      expect((await fetch(`${url}/v1/responses/${id}`, { headers: AUTH })).status).toBe(404);
    } finally {
      await app.close();
    }
  });

  it("the drain deadline ends a running stream with an error event and response.failed", async () => {
    const lifecycle = new Lifecycle();
    const fake = fakeModel({ script: Array(2000).fill(word("Hello")), tokenDelayMs: 2, contextLength: 4096 });
    const { app } = await fakeApp({ fake, lifecycle, sse: { keepAliveMs: 0 } });
    const url = await app.listen({ port: 0, host: "127.0.0.1" });
    const res = await fetch(`${url}/v1/responses`, {
      method: "POST",
      headers: { ...AUTH, "content-type": "application/json" },
      body: JSON.stringify(request({ stream: true, max_output_tokens: 2000 })),
    });
    const body = res.text();
    await new Promise((r) => setTimeout(r, 50));
    await drainApp(app, lifecycle, { timeoutMs: 50 });
    const events = namedEvents(await body);
    const [error, failed] = events.slice(-2).map((e) => e.data);
    expect(error).toMatchObject({ type: "error", code: "overloaded", message: expect.stringContaining("shutting down") });
    expect(failed).toMatchObject({ type: "response.failed", response: { status: "failed", error: { code: "overloaded" } } });
    expect(failed.response.output[0].content[0].text).toMatch(/^(Hello)+$/);
  });

  it("meters a streamed response once, keyed by its id", async () => {
    const records: Array<{ requestId: string; completionTokens: number }> = [];
    const { app } = await fakeApp({ usage: { record: (u) => records.push(u) } });
    const events = namedEvents((await post(app, request({ stream: true }))).body);
    expect(records).toEqual([expect.objectContaining({ requestId: events[0].data.response.id, completionTokens: 3 })]);
  });
});

describe("tool calls", () => {
  const withTools = (over: Record<string, unknown> = {}) => request({ input: "Weather in Paris?", tools: [WEATHER, TIME], ...over });

  it("ends the answer where it starts repeating a call it made exactly", async () => {
    const call = (city: string) => `<tool_call>\n{"name": "get_weather", "arguments": {"city":"${city}"}}\n</tool_call>\n`;
    const { res } = await ask(
      withTools({ tool_choice: "required" }),
      fakeModel({ script: bytes(call("Paris") + call("Oslo") + call("Paris") + call("Rome")) }),
    );
    const body = res.json();
    expect(body.status).toBe("completed");
    expect(body.output.map((item: any) => item.arguments)).toEqual(['{"city":"Paris"}', '{"city":"Oslo"}']);
    expect(body.usage.output_tokens).toBeLessThan((call("Paris") + call("Oslo") + call("Paris")).length);
  });

  it("beside text.format, 'auto' answers calls alone or content in the format alone", async () => {
    const { res, fake } = await ask(withTools({ text: { format: { type: "json_object" } } }), fakeModel({ script: bytes('{"sky": "blue"}') }));
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json().output_text).toBe('{"sky": "blue"}');
    const open = fake.backend.calls.flatMap((c) => c.ops).find((op): op is OpenSlotOp => op.op === "open");
    expect(JSON.parse((open?.constraint as { format: string }).format)).toMatchObject({
      type: "or",
      elements: [
        { type: "json_schema", json_schema: { type: "object" } },
        { type: "tag", begin: "<tool_call>\n", end: "\n</tool_call>" },
      ],
    });
  });

  it("answers with a message for the text before the calls, then function_call items", async () => {
    const { res, fake } = await ask(withTools(), fakeModel({ script: bytes(CALLS_TEXT) }));
    const body = res.json();
    expect(body.status).toBe("completed");
    expect(body.output).toEqual([
      {
        id: expect.stringMatching(/^msg_/),
        type: "message",
        status: "completed",
        role: "assistant",
        content: [{ type: "output_text", text: "Checking.", annotations: [], logprobs: [] }],
      },
      {
        id: expect.stringMatching(/^fc_/),
        type: "function_call",
        status: "completed",
        arguments: '{"city":"Paris"}',
        call_id: expect.stringMatching(/^call_/),
        name: "get_weather",
      },
      {
        id: expect.stringMatching(/^fc_/),
        type: "function_call",
        status: "completed",
        arguments: "{}",
        call_id: expect.stringMatching(/^call_/),
        name: "get_time",
      },
    ]);
    expect(body.output_text).toBe("Checking.");
    expect(body.tools).toEqual([
      { type: "function", name: "get_weather", description: "Weather in a city", parameters: WEATHER.parameters, strict: true },
      { type: "function", name: "get_time", description: null, parameters: TIME.parameters, strict: true },
    ]);
    expect(fake.renderedTools[0]?.map((t) => t.name)).toEqual(["get_weather", "get_time"]);
    const open = fake.backend.calls.flatMap((c) => c.ops).find((op): op is OpenSlotOp => op.op === "open");
    expect(open?.constraint?.type).toBe("structural_tag");
  });

  it("streams each call as output_item.added, argument deltas, arguments.done and output_item.done, rebuilding the whole answer", async () => {
    const whole = (await ask(withTools(), fakeModel({ script: bytes(CALLS_TEXT) }))).res.json();
    const events = namedEvents((await ask(withTools({ stream: true }), fakeModel({ script: bytes(CALLS_TEXT) }))).res.body);
    const types = events.map((e) => e.event);
    const firstCall = types.indexOf("response.function_call_arguments.delta");
    expect(types.slice(firstCall - 1, firstCall)).toEqual(["response.output_item.added"]);
    expect(events[firstCall - 1].data.item).toMatchObject({ type: "function_call", status: "in_progress", arguments: "", name: "get_weather" });
    const done = events.filter((e) => e.event === "response.function_call_arguments.done").map((e) => e.data);
    expect(done.map((d) => [d.name, d.arguments, d.output_index])).toEqual([
      ["get_weather", '{"city":"Paris"}', 1],
      ["get_time", "{}", 2],
    ]);
    expect(comparable(rebuilt(events))).toEqual(comparable(whole));
  });

  it("offers only the tools allowed_tools lists, and constrains a named choice", async () => {
    const { fake } = await ask(
      withTools({ tool_choice: { type: "allowed_tools", mode: "required", tools: [{ type: "function", name: "get_time" }] } }),
      fakeModel({ script: bytes(CALLS_TEXT) }),
    );
    expect(fake.renderedTools[0]?.map((t) => t.name)).toEqual(["get_time"]);
    const named = await ask(withTools({ tool_choice: { type: "function", name: "get_weather" } }), fakeModel({ script: bytes(CALLS_TEXT) }));
    expect(named.res.json().tool_choice).toEqual({ type: "function", name: "get_weather" });
  });

  it("tool_choice none offers no tools and reads no calls", async () => {
    const { res, fake } = await ask(withTools({ tool_choice: "none" }), fakeModel({ script: bytes(CALLS_TEXT) }));
    expect(fake.renderedTools[0]).toBeUndefined();
    expect(res.json().output.map((i: any) => i.type)).toEqual(["message"]);
  });
});

describe("text.format", () => {
  it("constrains the output to the json_schema and echoes the format", async () => {
    const format = {
      type: "json_schema",
      name: "city",
      schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
      strict: true,
    };
    const { res, fake } = await ask(request({ text: { format } }));
    expect(res.json().text).toEqual({ format, verbosity: "medium" });
    const open = fake.backend.calls.flatMap((c) => c.ops).find((op): op is OpenSlotOp => op.op === "open");
    expect(open?.constraint).toEqual({ type: "json_schema", schema: JSON.stringify(format.schema) });
  });

  it("json_object asks for any JSON object", async () => {
    const { fake } = await ask(request({ text: { format: { type: "json_object" } } }));
    const open = fake.backend.calls.flatMap((c) => c.ops).find((op): op is OpenSlotOp => op.op === "open");
    expect(open?.constraint).toEqual({ type: "json_object" });
  });
});

describe("stored responses", () => {
  it("GET returns the stored response as answered; DELETE removes it; store: false keeps nothing", async () => {
    const { app } = await fakeApp();
    const created = (await post(app, request())).json();
    const got = await app.inject({ method: "GET", url: `/v1/responses/${created.id}`, headers: AUTH });
    expect(got.statusCode).toBe(200);
    expect(got.json()).toEqual(created);
    const deleted = await app.inject({ method: "DELETE", url: `/v1/responses/${created.id}`, headers: AUTH });
    expect(deleted.json()).toEqual({ id: created.id, object: "response", deleted: true });
    const gone = await app.inject({ method: "GET", url: `/v1/responses/${created.id}`, headers: AUTH });
    expect(gone.statusCode).toBe(404);
    expect(gone.json().error).toMatchObject({ type: "invalid_request_error", message: expect.stringContaining(created.id) });
    expect((await app.inject({ method: "DELETE", url: `/v1/responses/${created.id}`, headers: AUTH })).statusCode).toBe(404);
    const unstored = (await post(app, request({ store: false }))).json();
    expect(unstored.store).toBe(false);
    expect((await app.inject({ method: "GET", url: `/v1/responses/${unstored.id}`, headers: AUTH })).statusCode).toBe(404);
  });

  it("stores a streamed response too, equal to its response.completed", async () => {
    const { app } = await fakeApp();
    const events = namedEvents((await post(app, request({ stream: true }))).body);
    const last = events.at(-1)!.data.response;
    expect((await app.inject({ method: "GET", url: `/v1/responses/${last.id}`, headers: AUTH })).json()).toEqual(last);
  });

  it("previous_response_id continues the conversation: the earlier input and output come before the new input", async () => {
    const fake = fakeModel();
    const { app } = await fakeApp({ fake });
    const first = (await post(app, request({ instructions: "First rules.", input: "Hi there" }))).json();
    const second = (await post(app, request({ input: "And again?", previous_response_id: first.id, instructions: "Second rules." }))).json();
    expect(second.previous_response_id).toBe(first.id);
    // Instructions are not carried over; the earlier turns are.
    expect(fake.rendered[1]).toEqual([
      { role: "system", content: "Second rules." },
      { role: "user", content: "Hi there" },
      { role: "assistant", content: "Hello world!" },
      { role: "user", content: "And again?" },
    ]);
    const third = (await post(app, request({ input: "Once more", previous_response_id: second.id }))).json();
    expect(fake.rendered[2].map((m) => m.content)).toEqual(["Hi there", "Hello world!", "And again?", "Hello world!", "Once more"]);
    expect(third.status).toBe("completed");
  });

  it("lists input items in the reference's list shape: newest first by default, asc, after and limit", async () => {
    const { app } = await fakeApp();
    const first = (await post(app, request({ input: "one" }))).json();
    const second = (
      await post(
        app,
        request({
          input: [
            { role: "user", content: "two" },
            { role: "user", content: "three" },
          ],
          previous_response_id: first.id,
        }),
      )
    ).json();
    const list = async (query = "") => {
      const res = await app.inject({ method: "GET", url: `/v1/responses/${second.id}/input_items${query}`, headers: AUTH });
      expect(res.statusCode, res.body).toBe(200);
      return res.json();
    };
    const texts = (page: any) => page.data.map((item: any) => item.content[0].text);
    const all = await list();
    expect(all).toMatchObject({ object: "list", has_more: false });
    expect(texts(all)).toEqual(["three", "two", "Hello world!", "one"]);
    expect(all.data[2].id).toBe(first.output[0].id);
    expect(all.data[0]).toEqual({
      id: expect.stringMatching(/^msg_/),
      type: "message",
      status: "completed",
      role: "user",
      content: [{ type: "input_text", text: "three" }],
    });
    expect(all.first_id).toBe(all.data[0].id);
    expect(all.last_id).toBe(all.data[3].id);
    expect(texts(await list("?order=asc"))).toEqual(["one", "Hello world!", "two", "three"]);
    const page = await list("?order=asc&limit=2");
    expect(texts(page)).toEqual(["one", "Hello world!"]);
    expect(page.has_more).toBe(true);
    const next = await list(`?order=asc&limit=2&after=${page.last_id}`);
    expect(texts(next)).toEqual(["two", "three"]);
    expect(next.has_more).toBe(false);
    const bad = await app.inject({ method: "GET", url: `/v1/responses/${second.id}/input_items?limit=0`, headers: AUTH });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().error.param).toBe("limit");
  });

  it("resolves item_reference to a stored item, and does not repeat one the previous response holds", async () => {
    const fake = fakeModel({ script: bytes(CALLS_TEXT) });
    const { app } = await fakeApp({ fake });
    const first = (await post(app, request({ input: "Weather in Paris?", tools: [WEATHER, TIME] }))).json();
    const [message, call] = first.output;
    const next = await post(
      app,
      request({
        input: [
          { role: "user", content: "Weather in Paris?" },
          { type: "item_reference", id: message.id },
          { type: "item_reference", id: call.id },
          { type: "function_call_output", call_id: call.call_id, output: "18C" },
        ],
        tools: [WEATHER, TIME],
      }),
    );
    expect(next.statusCode, next.body).toBe(200);
    expect(fake.rendered[1]).toEqual([
      { role: "user", content: "Weather in Paris?" },
      {
        role: "assistant",
        content: "Checking.",
        tool_calls: [{ id: call.call_id, type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }],
      },
      { role: "tool", content: "18C", tool_call_id: call.call_id },
    ]);
    const chained = await post(
      app,
      request({
        previous_response_id: first.id,
        input: [
          { type: "item_reference", id: call.id },
          { type: "function_call_output", call_id: call.call_id, output: "18C" },
        ],
        tools: [WEATHER, TIME],
      }),
    );
    expect(chained.statusCode, chained.body).toBe(200);
    expect(fake.rendered[2].filter((m) => m.role === "assistant")).toHaveLength(1);
  });

  it("a continued conversation reports the prompt tokens the prefix cache served as cached_tokens", async () => {
    const fake = fakeModel({ contextLength: 2048 });
    const { app } = await fakeApp({ fake });
    const first = (await post(app, request({ input: "x".repeat(600) }))).json();
    expect(first.usage.input_tokens_details).toEqual({ cached_tokens: 0 });
    const second = (await post(app, request({ input: "more", previous_response_id: first.id }))).json();
    // Exact reuse keeps whole 256-token prefill chunks of the earlier prompt.
    expect(second.usage.input_tokens_details).toEqual({ cached_tokens: 512 });
  });

  it("continues with previous_response_id alone, without new input", async () => {
    const fake = fakeModel();
    const { app } = await fakeApp({ fake });
    const first = (await post(app, request())).json();
    expect((await post(app, { model: SLUG, previous_response_id: first.id })).statusCode).toBe(200);
    expect(fake.rendered[1]).toEqual([
      { role: "user", content: "hi" },
      { role: "assistant", content: "Hello world!" },
    ]);
  });

  it("stores a response before its answer ends, so a client continuing it at once finds it, streamed or not", async () => {
    // A store whose writes take a while (a fleet's database across the network).
    const store = new SqliteResponseStore(openDatabase({ path: ":memory:", seed: false }));
    const save = store.save.bind(store);
    store.save = async (response) => {
      await new Promise((r) => setTimeout(r, 60));
      await save(response);
    };
    const { app } = await fakeApp({ responses: store });
    for (const stream of [false, true]) {
      const res = await post(app, request({ stream }));
      const id = stream ? /"id":"(resp_[0-9a-f]+)"/.exec(res.body)![1] : res.json().id;
      expect((await app.inject({ method: "GET", url: `/v1/responses/${id}`, headers: AUTH })).statusCode, `stream ${stream}`).toBe(200);
      expect((await post(app, request({ previous_response_id: id }))).statusCode).toBe(200);
    }
  });

  it("in cloud mode a key sees only its own responses: another key gets 404, and cannot continue or reference them", async () => {
    const db = openDatabase({ path: ":memory:" });
    const keys = sqliteKeyStore(db);
    const [a, b] = [(await keys.create("a")).key, (await keys.create("b")).key];
    const { app } = await fakeApp({ auth: { mode: "cloud", keys }, responses: new SqliteResponseStore(db) });
    const as = (key: string) => ({ authorization: `Bearer ${key}` });
    const created = (await post(app, request(), as(a))).json();
    for (const [method, url] of [
      ["GET", `/v1/responses/${created.id}`],
      ["GET", `/v1/responses/${created.id}/input_items`],
      ["DELETE", `/v1/responses/${created.id}`],
    ] as const) {
      expect((await app.inject({ method, url, headers: as(b) })).statusCode, `${method} ${url}`).toBe(404);
    }
    expect((await post(app, request({ previous_response_id: created.id }), as(b))).json().error.code).toBe("previous_response_not_found");
    expect((await post(app, request({ input: [{ type: "item_reference", id: created.output[0].id }] }), as(b))).statusCode).toBe(400);
    expect((await app.inject({ method: "GET", url: `/v1/responses/${created.id}`, headers: as(a) })).json()).toEqual(created);
    expect((await post(app, request({ previous_response_id: created.id }), as(a))).statusCode).toBe(200);
    expect(db.prepare("SELECT key_id FROM responses WHERE id = ?").get(created.id)).toEqual({ key_id: expect.stringMatching(/^key_/) });
  });

  it("truncation auto drops the oldest items until the conversation fits; disabled answers context_length_exceeded", async () => {
    const fake = fakeModel({ contextLength: 120 });
    const { app } = await fakeApp({ fake });
    const long = "x".repeat(100);
    const input = [
      { role: "user", content: long },
      { role: "assistant", content: "ok" },
      { role: "user", content: "short?" },
    ];
    const refused = await post(app, request({ input, max_output_tokens: 8 }));
    expect(refused.statusCode).toBe(400);
    expect(refused.json().error.code).toBe("context_length_exceeded");
    const res = await post(app, request({ input, max_output_tokens: 8, truncation: "auto" }));
    expect(res.statusCode, res.body).toBe(200);
    expect(fake.rendered.at(-1)).toEqual([{ role: "user", content: "short?" }]);
    expect(res.json().truncation).toBe("auto");
  });
});
