/**
 * A reasoning model's answer on chat completions (fake model): its thinking apart as
 * `reasoning_content`, streamed as its own deltas that add up to the whole answer's, counted in
 * `reasoning_tokens`; `reasoning_effort` and `chat_template_kwargs` reaching the template; tool calls
 * read from the answer alone; a constraint held after the thinking, or from the first token when it is off.
 */
import { describe, expect, it } from "vitest";
import type { SlotOp } from "../../../src/runtime/text-worker/protocol.js";
import { AUTH, fakeApp, fakeModel, SLUG, sseEvents } from "./fake-model.js";

const bytes = (text: string) => [...new TextEncoder().encode(text)];
const chat = (over: Record<string, unknown> = {}) => ({ model: SLUG, messages: [{ role: "user", content: "hi" }], ...over });
const QWEN3 = { switchable: true };
const R1 = { switchable: false };

function reasoner(text: string, reasoning = QWEN3, opensThinking = false) {
  return fakeModel({ script: bytes(text), reasoning, opensThinking });
}

async function ask(payload: Record<string, unknown>, fake: ReturnType<typeof fakeModel>) {
  const { app } = await fakeApp({ fake });
  return app.inject({ method: "POST", url: "/v1/chat/completions", payload, headers: AUTH });
}

/** A streamed answer's choice 0 put together: reasoning, content, tool calls and the usage chunk. */
function collect(body: string) {
  const events = sseEvents(body).filter((e) => e !== "[DONE]") as Array<{ choices: Array<{ delta: Record<string, any> }>; usage?: any }>;
  let reasoning: string | null = null;
  let content = "";
  const calls: Array<{ name: string; arguments: string }> = [];
  for (const e of events) {
    const delta = e.choices[0]?.delta ?? {};
    if (delta.reasoning_content !== undefined) reasoning = (reasoning ?? "") + delta.reasoning_content;
    if (delta.content !== undefined) content += delta.content;
    for (const call of delta.tool_calls ?? []) {
      if (call.id) calls.push({ name: call.function.name, arguments: "" });
      calls[call.index].arguments += call.function.arguments;
    }
  }
  return { reasoning, content, calls, usage: events.at(-1)?.usage };
}

/** The constraint the engine was asked to hold the answer to. */
function constraintSent(fake: ReturnType<typeof fakeModel>) {
  const open = fake.backend.calls.flatMap((c) => c.ops).find((op): op is Extract<SlotOp, { op: "open" }> => op.op === "open");
  return open!.constraint as { type: string; format?: string };
}

/** The format of the structural constraint the engine was asked to hold the answer to. */
function formatSent(fake: ReturnType<typeof fakeModel>) {
  const constraint = constraintSent(fake);
  expect(constraint.type).toBe("structural_tag");
  return JSON.parse(constraint.format!) as Record<string, any>;
}

const THINKING = { type: "tag", begin: "<think>", content: { type: "any_text" }, end: "</think>" };
const AFTER_THINKING = { type: "regex", pattern: "\\n{0,2}" };

describe("a reasoning model's thinking", () => {
  const ANSWER = "<think>\nThe user greets me.\n</think>\n\nHello!";

  it("comes apart from the answer, and counts in reasoning_tokens", async () => {
    const res = await ask(chat(), reasoner(ANSWER));
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body.choices[0].message).toEqual({ role: "assistant", content: "Hello!", reasoning_content: "\nThe user greets me.\n", refusal: null });
    expect(body.usage.completion_tokens).toBe(bytes(ANSWER).length);
    expect(body.usage.completion_tokens_details.reasoning_tokens).toBe(bytes("<think>\nThe user greets me.\n</think>").length);
  });

  it("streams as reasoning_content deltas that add up to the whole answer's", async () => {
    const res = await ask(chat({ stream: true, stream_options: { include_usage: true } }), reasoner(ANSWER));
    const got = collect(res.body);
    expect(got).toMatchObject({ reasoning: "\nThe user greets me.\n", content: "Hello!" });
    expect(got.usage.completion_tokens_details.reasoning_tokens).toBe(bytes("<think>\nThe user greets me.\n</think>").length);
    // No delta carries both, and none is empty.
    for (const e of sseEvents(res.body).slice(1) as Array<{ choices: Array<{ delta: Record<string, unknown> }> }>) {
      const delta = e.choices?.[0]?.delta;
      if (!delta) continue;
      expect(delta.reasoning_content !== undefined && delta.content !== undefined).toBe(false);
      if (delta.reasoning_content !== undefined) expect(delta.reasoning_content).not.toBe("");
    }
  });

  it("starts inside the reasoning when the prompt opened it (DeepSeek-R1 distills)", async () => {
    const fake = reasoner("Simple.\n</think>\n\nHi.", R1, true);
    const body = (await ask(chat(), fake)).json();
    expect(body.choices[0].message).toMatchObject({ content: "Hi.", reasoning_content: "Simple.\n" });
    const streamed = collect((await ask(chat({ stream: true }), reasoner("Simple.\n</think>\n\nHi.", R1, true))).body);
    expect(streamed).toMatchObject({ reasoning: "Simple.\n", content: "Hi." });
  });

  it("an answer without thinking has a null reasoning_content; a model that does not reason has none at all", async () => {
    const body = (await ask(chat(), reasoner("Hello!"))).json();
    expect(body.choices[0].message).toEqual({ role: "assistant", content: "Hello!", reasoning_content: null, refusal: null });
    expect(body.usage.completion_tokens_details.reasoning_tokens).toBe(0);
    const plain = (await ask(chat(), fakeModel({ script: bytes("<think>x</think>y") }))).json();
    expect(plain.choices[0].message).toEqual({ role: "assistant", content: "<think>x</think>y", refusal: null });
  });

  it("tool calls are read from the answer after the thinking, not from the thinking", async () => {
    const text = '<think>I could write <tool_call> here.</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>';
    const tools = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }];
    const body = (await ask(chat({ tools }), reasoner(text))).json();
    expect(body.choices[0]).toMatchObject({
      message: {
        content: null,
        reasoning_content: "I could write <tool_call> here.",
        tool_calls: [{ function: { name: "get_weather", arguments: '{"city": "Oslo"}' } }],
      },
      finish_reason: "tool_calls",
    });
    const streamed = collect((await ask(chat({ tools, stream: true }), reasoner(text))).body);
    expect(streamed).toEqual({
      reasoning: "I could write <tool_call> here.",
      content: "",
      calls: [{ name: "get_weather", arguments: '{"city": "Oslo"}' }],
      usage: undefined,
    });
  });
});

describe("tool calls on auto", () => {
  const tools = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: {} } } }];
  it("hold the calls' grammar only after the thinking: optional where the model may think, after the prompt's open thinking otherwise", async () => {
    const qwen3 = reasoner("Hello!");
    await ask(chat({ tools }), qwen3);
    const optional = formatSent(qwen3);
    expect(optional.type).toBe("or");
    expect(optional.elements[0]).toMatchObject({ type: "sequence", elements: [THINKING, AFTER_THINKING, {}] });
    expect(optional.elements[1]).toEqual(optional.elements[0].elements[2]);
    expect(optional.elements[1].type).toBe("triggered_tags");

    const r1 = reasoner("Hello!", R1, true);
    await ask(chat({ tools }), r1);
    expect(formatSent(r1)).toMatchObject({ type: "sequence", elements: [{ ...THINKING, begin: "" }, AFTER_THINKING, { type: "triggered_tags" }] });

    const plain = fakeModel({ script: bytes("Hello!") });
    await ask(chat({ tools }), plain);
    expect(formatSent(plain).type).toBe("triggered_tags");
  });
});

describe("switching the thinking", () => {
  it("reasoning_effort none or minimal renders with enable_thinking false; other efforts leave the template alone", async () => {
    for (const effort of ["none", "minimal"]) {
      const fake = reasoner("Hello!");
      expect((await ask(chat({ reasoning_effort: effort }), fake)).statusCode).toBe(200);
      expect(fake.renderedVariables).toEqual([{ enable_thinking: false }]);
    }
    const fake = reasoner("Hello!");
    await ask(chat({ reasoning_effort: "high" }), fake);
    expect(fake.renderedVariables).toEqual([undefined]);
  });

  it("chat_template_kwargs reach the template", async () => {
    const fake = reasoner("Hello!");
    expect((await ask(chat({ chat_template_kwargs: { enable_thinking: false, custom: "x" } }), fake)).statusCode).toBe(200);
    expect(fake.renderedVariables).toEqual([{ enable_thinking: false, custom: "x" }]);
  });

  it("a constrained answer is thought out first: the format holds after the thinking, which comes apart", async () => {
    const schema = { type: "object", properties: { a: { type: "integer" } }, required: ["a"] };
    const response_format = { type: "json_schema", json_schema: { name: "a", schema } };
    const fake = reasoner('<think>\nJSON it is.\n</think>\n\n{"a": 1}');
    const res = await ask(chat({ response_format }), fake);
    expect(res.statusCode).toBe(200);
    expect(fake.renderedVariables).toEqual([undefined]);
    expect(res.json().choices[0].message).toEqual({ role: "assistant", content: '{"a": 1}', reasoning_content: "\nJSON it is.\n", refusal: null });
    const format = { type: "json_schema", json_schema: schema };
    expect(formatSent(fake)).toEqual({ type: "or", elements: [{ type: "sequence", elements: [THINKING, AFTER_THINKING, format] }, format] });

    // A model that always thinks, its prompt opening the thinking, with a forced answer: any JSON object.
    const r1 = reasoner('Just an object.\n</think>\n\n{"b": 2}', R1, true);
    const forced = (await ask(chat({ response_format: { type: "json_object" } }), r1)).json();
    expect(forced.choices[0].message).toMatchObject({ content: '{"b": 2}', reasoning_content: "Just an object.\n" });
    expect(formatSent(r1)).toEqual({
      type: "sequence",
      elements: [{ ...THINKING, begin: "" }, AFTER_THINKING, { type: "json_schema", json_schema: { type: "object", additionalProperties: true } }],
    });
  });

  it("with the thinking switched off, a constrained answer is all content, held to its format from the first token", async () => {
    for (const off of [{ reasoning_effort: "none" }, { chat_template_kwargs: { enable_thinking: false } }]) {
      const fake = reasoner('{"a": 1}');
      const res = await ask(chat({ response_format: { type: "json_object" }, ...off }), fake);
      expect(res.statusCode).toBe(200);
      expect(fake.renderedVariables).toEqual([{ enable_thinking: false }]);
      expect(res.json().choices[0].message).toEqual({ role: "assistant", content: '{"a": 1}', refusal: null });
      expect(constraintSent(fake)).toEqual({ type: "json_object" });
    }
  });

  it("reasoning_effort on a model that does not reason, or 'none' on one that always does, is a 400 naming it", async () => {
    const plain = await ask(chat({ reasoning_effort: "low" }), fakeModel());
    expect(plain.statusCode).toBe(400);
    expect(plain.json().error).toMatchObject({ code: "unsupported_parameter", param: "reasoning_effort" });
    const r1 = await ask(chat({ reasoning_effort: "none" }), reasoner("x", R1, true));
    expect(r1.statusCode).toBe(400);
    expect(r1.json().error).toMatchObject({ code: "unsupported_value", param: "reasoning_effort" });
    expect(r1.json().error.message).toMatch(/always reasons/);
    const bad = await ask(chat({ reasoning_effort: "extreme" }), reasoner("x"));
    expect(bad.json().error).toMatchObject({ code: "invalid_value", param: "reasoning_effort" });
  });

  it("thinking_token_budget reaches the engine with the tags' tokens and where the thinking opens; a 400 where it cannot hold", async () => {
    const budgetSent = (fake: ReturnType<typeof fakeModel>) =>
      fake.backend.calls.flatMap((c) => c.ops).find((op): op is Extract<SlotOp, { op: "open" }> => op.op === "open")!.thinkingBudget;
    const opening = reasoner("x", R1, true);
    expect((await ask(chat({ thinking_token_budget: 7 }), opening)).statusCode).toBe(200);
    expect(budgetSent(opening)).toEqual({ tokens: 7, opened: true, open: bytes("<think>"), close: bytes("</think>") });
    const qwen3 = reasoner("x");
    expect((await ask(chat({ thinking_token_budget: 0 }), qwen3)).statusCode).toBe(200);
    expect(budgetSent(qwen3)).toMatchObject({ tokens: 0, opened: false });
    const plain = await ask(chat({ thinking_token_budget: 7 }), fakeModel());
    expect(plain.json().error).toMatchObject({ code: "unsupported_parameter", param: "thinking_token_budget" });
    const negative = await ask(chat({ thinking_token_budget: -1 }), reasoner("x"));
    expect(negative.json().error).toMatchObject({ code: "invalid_value", param: "thinking_token_budget" });
  });

  it("chat_template_kwargs stays a 400 on completions, which render no template", async () => {
    const { app } = await fakeApp({ fake: reasoner("x") });
    const res = await app.inject({ method: "POST", url: "/v1/completions", payload: { model: SLUG, prompt: "a", chat_template_kwargs: {} }, headers: AUTH });
    expect(res.statusCode).toBe(400);
    expect(res.json().error.param).toBe("chat_template_kwargs");
  });
});

describe("the Responses API", () => {
  const ANSWER = "<think>\nThe user greets me.\n</think>\n\nHello!";
  const post = async (payload: Record<string, unknown>, fake: ReturnType<typeof fakeModel>) => {
    const { app } = await fakeApp({ fake });
    return app.inject({ method: "POST", url: "/v1/responses", payload: { model: SLUG, input: "hi", ...payload }, headers: AUTH });
  };

  it("the thinking is a reasoning item before the message, counted in reasoning_tokens", async () => {
    const body = (await post({}, reasoner(ANSWER))).json();
    expect(body.output.map((item: { type: string }) => item.type)).toEqual(["reasoning", "message"]);
    expect(body.output[0]).toMatchObject({
      type: "reasoning",
      status: "completed",
      summary: [],
      content: [{ type: "reasoning_text", text: "\nThe user greets me.\n" }],
    });
    expect(body.output[0].id).toMatch(/^rs_/);
    expect(body.output_text).toBe("Hello!");
    expect(body.usage.output_tokens_details.reasoning_tokens).toBe(bytes("<think>\nThe user greets me.\n</think>").length);
  });

  it("streamed, the official client's accumulator rebuilds the same output", async () => {
    const { accumulateResponse } = await import("openai/lib/responses/ResponseAccumulator");
    const whole = (await post({}, reasoner(ANSWER))).json();
    const res = await post({ stream: true }, reasoner(ANSWER));
    let snapshot: any;
    const types: string[] = [];
    for (const block of res.body.slice(0, -2).split("\n\n")) {
      const data = JSON.parse(/\ndata: (.*)$/.exec(block)![1]);
      types.push(data.type);
      snapshot = accumulateResponse(data, snapshot);
    }
    expect(types).toContain("response.reasoning_text.delta");
    expect(types).toContain("response.reasoning_text.done");
    const texts = (output: any[]) => output.map((item) => [item.type, item.status, item.content?.map((p: { text: string }) => p.text).join("")]);
    expect(texts(snapshot.output)).toEqual(texts(whole.output));
    const done = JSON.parse(/\ndata: (.*)$/.exec(res.body.slice(0, -2).split("\n\n").at(-1)!)![1]);
    expect(done.response.usage.output_tokens_details.reasoning_tokens).toBe(whole.usage.output_tokens_details.reasoning_tokens);
  });

  it("a text.format holds after the thinking: a reasoning item, then the message's JSON", async () => {
    const fake = reasoner('<think>\nJSON it is.\n</think>\n\n{"a": 1}');
    const body = (await post({ text: { format: { type: "json_object" } } }, fake)).json();
    expect(body.output.map((item: { type: string }) => item.type)).toEqual(["reasoning", "message"]);
    expect(body.output[0].content).toEqual([{ type: "reasoning_text", text: "\nJSON it is.\n" }]);
    expect(body.output_text).toBe('{"a": 1}');
    expect(formatSent(fake).elements[0]).toEqual({
      type: "sequence",
      elements: [THINKING, AFTER_THINKING, { type: "json_schema", json_schema: { type: "object", additionalProperties: true } }],
    });
  });

  it("a reasoning item replayed as input is kept out of the prompt; reasoning.effort none switches the thinking off", async () => {
    const fake = reasoner("Hi.");
    const first = (await post({}, reasoner(ANSWER))).json();
    const res = await post(
      { input: [{ role: "user", content: "hi" }, ...first.output, { role: "user", content: "again" }], reasoning: { effort: "none" } },
      fake,
    );
    expect(res.statusCode).toBe(200);
    expect(fake.rendered[0].map((m) => [m.role, m.content])).toEqual([
      ["user", "hi"],
      ["assistant", "Hello!"],
      ["user", "again"],
    ]);
    expect(fake.renderedVariables).toEqual([{ enable_thinking: false }]);
    expect(res.json().reasoning).toEqual({ effort: "none", summary: null });
  });
});
