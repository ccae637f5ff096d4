/**
 * Replayed tool-call histories on /v1/chat/completions: an assistant message with `content: null`
 * (or none) and `tool_calls`, then `role: "tool"` results, as LangChain and the official clients
 * send them. Accepted with precise `param` paths on malformed ones; rendered through a real chat
 * template they give 200, and a template that cannot express them gives a 400 on `messages`, never
 * a 500. (`tools` and `tool_choice` themselves stay 400 until constrained decoding.)
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { ChatTemplate, type ChatMessage } from "../../../src/runtime/text/chat-template.js";
import { AUTH, fakeApp, fakeModel, SLUG } from "./fake-model.js";

const call = (id: string, name: string, args: string) => ({ id, type: "function", function: { name, arguments: args } });

/** What LangChain's ChatOpenAI sends after one round of tool calls (two in parallel). */
const REPLAY = [
  { role: "system", content: "Use the tools." },
  { role: "user", content: "Weather in Paris, and the time?" },
  { role: "assistant", content: null, tool_calls: [call("call_1", "get_weather", '{"city": "Paris"}'), call("call_2", "get_time", "{}")] },
  { role: "tool", tool_call_id: "call_1", content: "22 C, sunny" },
  { role: "tool", tool_call_id: "call_2", content: [{ type: "text", text: "10:00" }] },
];

async function post(messages: unknown[], fake = fakeModel()) {
  const { app } = await fakeApp({ fake });
  try {
    return await app.inject({ method: "POST", url: "/v1/chat/completions", headers: AUTH, payload: { model: SLUG, messages, max_tokens: 4 } });
  } finally {
    await app.close();
  }
}

function expect400(res: { statusCode: number; json(): any }, code: string, param: string) {
  expect(res.statusCode).toBe(400);
  expect(res.json().error).toMatchObject({ type: "invalid_request_error", code, param });
  return res.json().error.message as string;
}

/** A fake model that renders through a real chat template (prompt bytes as token ids). */
function withTemplate(source: string) {
  const fake = fakeModel({ contextLength: 4096 });
  const template = new ChatTemplate(source);
  const prompts: string[] = [];
  fake.model.chatPrompt = (messages: readonly ChatMessage[]) => {
    const prompt = template.render(messages, { addGenerationPrompt: true, bosToken: "<s>", eosToken: "</s>" });
    prompts.push(prompt);
    return [...new TextEncoder().encode(prompt)];
  };
  return { fake, prompts };
}

const fixture = (name: string) => readFileSync(new URL(`../../fixtures/text/chat-templates/${name}.jinja`, import.meta.url), "utf8");

describe("a replayed tool-call history", () => {
  it("is accepted and reaches the template with its calls and results (fake model: 200)", async () => {
    const fake = fakeModel();
    const res = await post(REPLAY, fake);
    expect(res.statusCode).toBe(200);
    expect(res.json().choices[0].message.content).toBe("Hello world!");
    const [rendered] = fake.rendered;
    expect(rendered[2]).toEqual({ role: "assistant", content: null, tool_calls: REPLAY[2].tool_calls });
    expect(rendered[3]).toEqual({ role: "tool", content: "22 C, sunny", tool_call_id: "call_1" });
    expect(rendered[4]).toEqual({ role: "tool", content: [{ type: "text", text: "10:00" }], tool_call_id: "call_2" });
  });

  it("an assistant message with tool_calls may leave content out, or give it beside the calls", async () => {
    const [, user, , ...results] = REPLAY;
    for (const assistant of [
      { role: "assistant", tool_calls: [call("call_1", "f", "{}")] },
      { role: "assistant", content: "Looking.", tool_calls: [call("call_1", "f", "")] },
    ]) {
      expect((await post([user, assistant, results[0]])).statusCode).toBe(200);
    }
  });

  it("renders through SmolLM2's real template (its JSON-text fallback) with 200, where it used to answer 500", async () => {
    const { fake, prompts } = withTemplate(fixture("smollm2"));
    const res = await post(REPLAY, fake);
    expect(res.statusCode).toBe(200);
    expect(prompts[0]).toContain(
      '<|im_start|>assistant\n{\n  "tool_calls": [\n    {\n      "name": "get_weather",\n      "arguments": {\n        "city": "Paris"\n      },',
    );
    expect(prompts[0]).toContain(
      '<|im_start|>user\n{\n  "tool_response": {\n    "content": "10:00",\n    "tool_call_id": "call_2"\n  }\n}<|im_end|>\n<|im_start|>assistant\n',
    );
  });

  it("a template that raises on the history (roles that cannot alternate) -> 400 on messages with its message", async () => {
    const { fake } = withTemplate(fixture("mistral-like"));
    const message = expect400(await post(REPLAY.slice(1), fake), "invalid_value", "messages");
    expect(message).toContain("Conversation roles must alternate");
  });

  it("a template that fails to render the messages for another reason -> 400 on messages, not 500", async () => {
    const { fake } = withTemplate("{{ messages[0].content.nope() }}");
    const message = expect400(await post(REPLAY, fake), "invalid_value", "messages");
    expect(message).toMatch(/^chat template failed to render: /);
  });

  it("a replayed history goes to the model with the tools on offer", async () => {
    const { app, fake } = await fakeApp();
    const tools = [{ type: "function", function: { name: "f", parameters: { type: "object" } } }];
    const res = await app.inject({ method: "POST", url: "/v1/chat/completions", headers: AUTH, payload: { model: SLUG, messages: REPLAY, tools } });
    expect(res.statusCode).toBe(200);
    expect(fake.renderedTools.at(-1)?.map((t) => t.name)).toEqual(["f"]);
    await app.close();
  });
});

describe("malformed tool histories -> 400 naming the field", () => {
  const user = { role: "user", content: "hi" };
  const withCall = (c: unknown) => [user, { role: "assistant", content: null, tool_calls: [c] }, { role: "tool", tool_call_id: "call_1", content: "ok" }];
  const cases: Array<[string, unknown[], string, string]> = [
    ["arguments that are not JSON", withCall(call("call_1", "f", "{city: Paris}")), "invalid_value", "messages[1].tool_calls[0].function.arguments"],
    ["arguments that are JSON but not an object", withCall(call("call_1", "f", "[1, 2]")), "invalid_value", "messages[1].tool_calls[0].function.arguments"],
    [
      "arguments as an object instead of a string",
      withCall({ id: "call_1", type: "function", function: { name: "f", arguments: { a: 1 } } }),
      "invalid_type",
      "messages[1].tool_calls[0].function.arguments",
    ],
    [
      "arguments missing",
      withCall({ id: "call_1", type: "function", function: { name: "f" } }),
      "missing_required_parameter",
      "messages[1].tool_calls[0].function.arguments",
    ],
    [
      "a call without a name",
      withCall({ id: "call_1", type: "function", function: { arguments: "{}" } }),
      "missing_required_parameter",
      "messages[1].tool_calls[0].function.name",
    ],
    ["an empty name", withCall(call("call_1", "", "{}")), "invalid_value", "messages[1].tool_calls[0].function.name"],
    [
      "a call without an id",
      withCall({ type: "function", function: { name: "f", arguments: "{}" } }),
      "missing_required_parameter",
      "messages[1].tool_calls[0].id",
    ],
    [
      "a call of another type",
      withCall({ id: "call_1", type: "custom", function: { name: "f", arguments: "{}" } }),
      "invalid_value",
      "messages[1].tool_calls[0].type",
    ],
    ["tool_calls that are not an array", [user, { role: "assistant", content: null, tool_calls: {} }], "invalid_type", "messages[1].tool_calls"],
    [
      "an assistant message with neither content nor tool_calls",
      [user, { role: "assistant", content: null }],
      "missing_required_parameter",
      "messages[1].content",
    ],
    [
      "a tool message without tool_call_id",
      [...withCall(call("call_1", "f", "{}")).slice(0, 2), { role: "tool", content: "ok" }],
      "missing_required_parameter",
      "messages[2].tool_call_id",
    ],
    [
      "a tool message with null content",
      [...withCall(call("call_1", "f", "{}")).slice(0, 2), { role: "tool", tool_call_id: "call_1", content: null }],
      "missing_required_parameter",
      "messages[2].content",
    ],
    [
      "a tool message with an image part",
      [...withCall(call("call_1", "f", "{}")).slice(0, 2), { role: "tool", tool_call_id: "call_1", content: [{ type: "image_url", image_url: { url: "x" } }] }],
      "unsupported_value",
      "messages[2].content[0].type",
    ],
    ["tool_calls on a user message", [{ ...user, tool_calls: [call("call_1", "f", "{}")] }], "invalid_value", "messages[0].tool_calls"],
    ["tool_call_id on a user message", [{ ...user, tool_call_id: "call_1" }], "invalid_value", "messages[0].tool_call_id"],
  ];
  for (const [name, messages, code, param] of cases) {
    it(`${name} -> ${param}`, async () => {
      expect400(await post(messages), code, param);
    });
  }

  it("the arguments error says why", async () => {
    const message = expect400(await post(withCall(call("call_1", "f", "[1, 2]"))), "invalid_value", "messages[1].tool_calls[0].function.arguments");
    expect(message).toContain("must be a string holding a JSON object");
  });
});
