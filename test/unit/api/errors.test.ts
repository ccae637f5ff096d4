/** Every error answer has the contract's body, status, type, code and param. */
import { describe, expect, it } from "vitest";
import { ERRORS } from "../../../src/api/errors.js";
import { ModelRegistry } from "../../../src/scheduler/index.js";
import { AUTH, fakeApp, fakeModel, SLUG } from "./fake-model.js";

const chat = (over: Record<string, unknown> = {}) => ({ model: SLUG, messages: [{ role: "user", content: "hi" }], ...over });

async function post(url: string, payload: unknown, headers: Record<string, string> = AUTH, appOptions = {}) {
  const { app } = await fakeApp(appOptions);
  return app.inject({ method: "POST", url, payload: payload as object, headers });
}

function expectError(
  res: { statusCode: number; json(): any; headers: Record<string, unknown> },
  status: number,
  type: string,
  code: string | null,
  param: string | null,
) {
  expect(res.statusCode).toBe(status);
  expect(res.headers["content-type"]).toMatch(/^application\/json/);
  const body = res.json();
  expect(Object.keys(body)).toEqual(["error"]);
  expect(Object.keys(body.error).sort()).toEqual(["code", "message", "param", "type"]);
  expect(body.error).toMatchObject({ type, code, param });
  expect(typeof body.error.message).toBe("string");
  expect(body.error.message.length).toBeGreaterThan(5);
}

describe("error catalogue", () => {
  it("never maps to 422, 408 or 409", () => {
    for (const spec of Object.values(ERRORS)) expect([408, 409, 422]).not.toContain(spec.status);
  });
});

describe("validation errors (400)", () => {
  const cases: Array<[string, Record<string, unknown>, string, string]> = [
    ["temperature of the wrong type", chat({ temperature: "hot" }), "temperature", "invalid_type"],
    ["temperature out of range", chat({ temperature: 2.5 }), "temperature", "invalid_value"],
    ["top_p out of range", chat({ top_p: -0.1 }), "top_p", "invalid_value"],
    ["presence_penalty out of range", chat({ presence_penalty: 3 }), "presence_penalty", "invalid_value"],
    ["frequency_penalty of the wrong type", chat({ frequency_penalty: [] }), "frequency_penalty", "invalid_type"],
    ["max_tokens not an integer", chat({ max_tokens: 1.5 }), "max_tokens", "invalid_type"],
    ["max_tokens zero", chat({ max_tokens: 0 }), "max_tokens", "invalid_value"],
    ["n above the limit", chat({ n: 100 }), "n", "invalid_value"],
    ["seed not an integer", chat({ seed: "x" }), "seed", "invalid_type"],
    ["stop with five strings", chat({ stop: ["a", "b", "c", "d", "e"] }), "stop", "invalid_value"],
    ["stop of the wrong type", chat({ stop: 5 }), "stop", "invalid_type"],
    ["logit_bias value out of range", chat({ logit_bias: { "5": 200 } }), "logit_bias.5", "invalid_value"],
    ["logit_bias key outside the vocabulary", chat({ logit_bias: { "999999": 1 } }), "logit_bias", "invalid_value"],
    ["logit_bias key not a token id", chat({ logit_bias: { abc: 1 } }), "logit_bias", "invalid_value"],
    ["top_logprobs without logprobs", chat({ top_logprobs: 2 }), "top_logprobs", "invalid_value"],
    ["top_logprobs above 20", chat({ logprobs: true, top_logprobs: 21 }), "top_logprobs", "invalid_value"],
    ["missing model", { messages: [{ role: "user", content: "hi" }] }, "model", "missing_required_parameter"],
    ["missing messages", { model: SLUG }, "messages", "missing_required_parameter"],
    ["empty messages", chat({ messages: [] }), "messages", "invalid_value"],
    ["messages not an array", chat({ messages: "hi" }), "messages", "invalid_type"],
    [
      "unknown role",
      chat({
        messages: [
          { role: "user", content: "a" },
          { role: "robot", content: "b" },
        ],
      }),
      "messages[1].role",
      "invalid_value",
    ],
    [
      "content of the wrong type",
      chat({
        messages: [
          { role: "system", content: "s" },
          { role: "user", content: "a" },
          { role: "user", content: 42 },
        ],
      }),
      "messages[2].content",
      "invalid_type",
    ],
    [
      "a text part without text",
      chat({ messages: [{ role: "user", content: [{ type: "text" }] }] }),
      "messages[0].content[0].text",
      "missing_required_parameter",
    ],
    [
      "a text part whose text is a number",
      chat({
        messages: [
          {
            role: "user",
            content: [
              { type: "text", text: "ok" },
              { type: "text", text: 3 },
            ],
          },
        ],
      }),
      "messages[0].content[1].text",
      "invalid_type",
    ],
    [
      "an image part",
      chat({ messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }] }),
      "messages[0].content[0].type",
      "unsupported_value",
    ],
    ["a user message without content", chat({ messages: [{ role: "user" }] }), "messages[0].content", "missing_required_parameter"],
    ["a tool message without tool_call_id", chat({ messages: [{ role: "tool", content: "42" }] }), "messages[0].tool_call_id", "missing_required_parameter"],
    ["stream_options without stream", chat({ stream_options: { include_usage: true } }), "stream_options", "invalid_value"],
    ["stream of the wrong type", chat({ stream: "yes" }), "stream", "invalid_type"],
    [
      "a response_format schema keyword kiln cannot enforce",
      chat({ response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "array", items: { type: "integer" }, uniqueItems: true } } } }),
      "response_format",
      "invalid_value",
    ],
  ];
  for (const [what, body, param, code] of cases) {
    it(`chat: ${what} -> 400 ${code} on ${param}`, async () => {
      expectError(await post("/v1/chat/completions", body), 400, "invalid_request_error", code, param);
    });
  }

  const unsupported: Array<[string, unknown]> = [
    ["audio", { voice: "alloy", format: "wav" }],
    ["modalities", ["text", "audio"]],
    ["store", true],
    ["reasoning_effort", "high"],
    ["service_tier", "flex"],
  ];
  for (const [field, value] of unsupported) {
    it(`chat: ${field}=${JSON.stringify(value)} is refused naming the field`, async () => {
      expectError(await post("/v1/chat/completions", chat({ [field]: value })), 400, "invalid_request_error", "unsupported_parameter", field);
    });
  }

  it("chat: unsupported fields are accepted when null or at their harmless default", async () => {
    const body = chat({
      tools: null,
      tool_choice: "none",
      response_format: { type: "text" },
      functions: null,
      audio: null,
      modalities: ["text"],
      store: false,
      reasoning_effort: null,
      service_tier: "auto",
      parallel_tool_calls: true,
      n: 1,
      logprobs: false,
    });
    const res = await post("/v1/chat/completions", body);
    expect(res.statusCode).toBe(200);
  });

  it("chat: explicit nulls accepted everywhere optional; unknown fields inside messages ignored", async () => {
    const res = await post(
      "/v1/chat/completions",
      chat({
        temperature: null,
        top_p: null,
        n: null,
        stop: null,
        max_tokens: null,
        max_completion_tokens: null,
        presence_penalty: null,
        frequency_penalty: null,
        logit_bias: null,
        logprobs: null,
        top_logprobs: null,
        seed: null,
        user: null,
        stream: null,
        stream_options: null,
        metadata: null,
        prompt_cache_key: null,
        safety_identifier: null,
        top_k: null,
        min_p: null,
        repetition_penalty: null,
        guided_json: null,
        guided_regex: null,
        guided_choice: null,
        messages: [{ role: "user", content: "hi", name: null, extra: 1 }],
      }),
    );
    expect(res.statusCode).toBe(200);
  });

  const completionCases: Array<[string, Record<string, unknown>, string, string]> = [
    ["missing prompt", { model: SLUG }, "prompt", "missing_required_parameter"],
    ["prompt of the wrong type", { model: SLUG, prompt: { text: "x" } }, "prompt", "invalid_type"],
    ["more than 64 prompts", { model: SLUG, prompt: Array.from({ length: 65 }, () => "a") }, "prompt", "invalid_value"],
    ["more than 64 token-id prompts", { model: SLUG, prompt: Array.from({ length: 65 }, () => [1]) }, "prompt", "invalid_value"],
    ["an empty prompt array", { model: SLUG, prompt: [] }, "prompt", "invalid_value"],
    ["an empty token-id prompt among several", { model: SLUG, prompt: [[1], []] }, "prompt", "invalid_value"],
    ["a token id outside the vocabulary in a later prompt", { model: SLUG, prompt: [[1], [2, 99999]] }, "prompt", "invalid_value"],
    ["max_tokens below 0", { model: SLUG, prompt: "x", max_tokens: -1 }, "max_tokens", "invalid_value"],
    ["logprobs above 5", { model: SLUG, prompt: "x", logprobs: 6 }, "logprobs", "invalid_value"],
    ["suffix on a model without fill-in-the-middle tokens", { model: SLUG, prompt: "x", suffix: "tail" }, "suffix", "unsupported_value"],
    ["best_of below n", { model: SLUG, prompt: "x", best_of: 2, n: 3 }, "best_of", "invalid_value"],
    ["best_of above n, streamed", { model: SLUG, prompt: "x", best_of: 3, stream: true }, "best_of", "unsupported_value"],
    ["best_of above 8", { model: SLUG, prompt: "x", best_of: 9 }, "best_of", "invalid_value"],
    ["temperature out of range", { model: SLUG, prompt: "x", temperature: -1 }, "temperature", "invalid_value"],
    ["a token id outside the vocabulary", { model: SLUG, prompt: [1, 2, 99999] }, "prompt", "invalid_value"],
  ];
  for (const [what, body, param, code] of completionCases) {
    it(`completions: ${what} -> 400 ${code} on ${param}`, async () => {
      expectError(await post("/v1/completions", body), 400, "invalid_request_error", code, param);
    });
  }

  it("malformed JSON -> 400 invalid_json", async () => {
    const { app } = await fakeApp();
    const res = await app.inject({
      method: "POST",
      url: "/v1/chat/completions",
      payload: '{"model": ',
      headers: { ...AUTH, "content-type": "application/json" },
    });
    expectError(res, 400, "invalid_request_error", "invalid_json", null);
  });

  it("an empty body, or a JSON value that is not an object -> 400", async () => {
    const { app } = await fakeApp();
    const empty = await app.inject({ method: "POST", url: "/v1/chat/completions", payload: "", headers: { ...AUTH, "content-type": "application/json" } });
    expectError(empty, 400, "invalid_request_error", "invalid_json", null);
    const array = await app.inject({ method: "POST", url: "/v1/chat/completions", payload: "[1,2]", headers: { ...AUTH, "content-type": "application/json" } });
    expectError(array, 400, "invalid_request_error", "invalid_json", null);
  });

  it("a JSON body sent as form data (curl -d) is still read as JSON", async () => {
    const { app } = await fakeApp();
    const res = await app.inject({
      method: "POST",
      url: "/v1/chat/completions",
      payload: JSON.stringify(chat()),
      headers: { ...AUTH, "content-type": "application/x-www-form-urlencoded" },
    });
    expect(res.statusCode).toBe(200);
  });

  it("a prompt longer than the context -> 400 context_length_exceeded", async () => {
    const fake = fakeModel({ contextLength: 40 });
    const res = await post("/v1/chat/completions", chat({ messages: [{ role: "user", content: "x".repeat(100) }] }), AUTH, { fake });
    expectError(res, 400, "invalid_request_error", "context_length_exceeded", "messages");
    const completion = await post("/v1/completions", { model: SLUG, prompt: "y".repeat(60) }, AUTH, { fake });
    expectError(completion, 400, "invalid_request_error", "context_length_exceeded", "prompt");
  });

  it("prompt plus max_tokens beyond the context -> 400 context_length_exceeded on max_tokens", async () => {
    const fake = fakeModel({ contextLength: 40 });
    const res = await post("/v1/chat/completions", chat({ max_tokens: 30 }), AUTH, { fake });
    expectError(res, 400, "invalid_request_error", "context_length_exceeded", "max_tokens");
  });

  it("a message list the chat template rejects -> 400 on messages", async () => {
    const { app, fake } = await fakeApp();
    const { ChatTemplateError } = await import("../../../src/runtime/text/chat-template.js");
    fake.model.chatPrompt = () => {
      throw new ChatTemplateError("chat template rejected the messages: Conversation roles must alternate", true);
    };
    const res = await app.inject({ method: "POST", url: "/v1/chat/completions", payload: chat(), headers: AUTH });
    expectError(res, 400, "invalid_request_error", "invalid_value", "messages");
  });
});

describe("other statuses", () => {
  it("an empty key or another scheme -> 401 invalid_api_key (local mode answers a request without the header)", async () => {
    expectError(await post("/v1/chat/completions", chat(), { authorization: "Bearer " }), 401, "invalid_request_error", "invalid_api_key", null);
    expectError(await post("/v1/chat/completions", chat(), { authorization: "Basic abc" }), 401, "invalid_request_error", "invalid_api_key", null);
  });

  it("an unknown model -> 404 model_not_found", async () => {
    expectError(await post("/v1/chat/completions", chat({ model: "gpt-17" })), 404, "invalid_request_error", "model_not_found", "model");
    expectError(await post("/v1/completions", { model: "nope", prompt: "x" }), 404, "invalid_request_error", "model_not_found", "model");
  });

  it("a catalogue model this server does not serve -> 404 model_not_found", async () => {
    const res = await post("/v1/chat/completions", chat({ model: "llama-3-3-70b-instruct" }));
    expectError(res, 404, "invalid_request_error", "model_not_found", "model");
    expect(res.json().error.message).toContain("kiln serve --model llama-3-3-70b-instruct");
  });

  it("an unknown route -> 404 with code null, whatever the method", async () => {
    const { app } = await fakeApp();
    for (const [method, url] of [
      ["GET", "/v1/nothing"],
      ["POST", "/v2/chat/completions"],
      ["DELETE", "/v1/chat/completions"],
      // GET / is the web console.
      ["POST", "/"],
    ] as const) {
      expectError(await app.inject({ method, url, headers: AUTH }), 404, "invalid_request_error", null, null);
    }
  });

  it("an unknown route says it does not exist; outside /v1 it says where the routes are", async () => {
    const { app } = await fakeApp();
    const missing = await app.inject({ method: "POST", url: "/v1/foo?x=1", headers: AUTH });
    expect(missing.json().error.message).toBe("Unknown request URL: POST /v1/foo. This route does not exist.");
    const outside = await app.inject({ method: "POST", url: "/chat/completions", headers: AUTH });
    expect(outside.json().error.message).toBe("Unknown request URL: POST /chat/completions. The API's routes are under /v1.");
  });

  it("a body over the limit -> 413 request_too_large", async () => {
    const res = await post("/v1/chat/completions", chat({ messages: [{ role: "user", content: "x".repeat(5000) }] }), AUTH, { bodyLimit: 1000 });
    expectError(res, 413, "invalid_request_error", "request_too_large", null);
  });

  it("a full queue -> 503 overloaded with retry-after", async () => {
    // One sequence runs, one waits; a third would wait beyond maxWaiting.
    const fake = fakeModel({ tokenDelayMs: 20, maxRunning: 1, maxWaiting: 1 });
    const { app } = await fakeApp({ fake });
    const running = [app.inject({ method: "POST", url: "/v1/chat/completions", payload: chat(), headers: AUTH })];
    await new Promise((r) => setTimeout(r, 5));
    running.push(app.inject({ method: "POST", url: "/v1/chat/completions", payload: chat(), headers: AUTH }));
    await new Promise((r) => setTimeout(r, 5));
    const refused = await app.inject({ method: "POST", url: "/v1/chat/completions", payload: chat(), headers: AUTH });
    expectError(refused, 503, "server_error", "overloaded", null);
    expect(refused.headers["retry-after"]).toBe("1");
    for (const r of await Promise.all(running)) expect(r.statusCode).toBe(200);
  });

  it("a model still loading -> 503 overloaded with retry-after; a failed one -> 503 model_unavailable", async () => {
    const models = new ModelRegistry();
    models.expect(SLUG, "compiling");
    models.fail("smollm2-360m-instruct", "out of memory");
    const { app } = await fakeApp({ models });
    const loading = await app.inject({ method: "POST", url: "/v1/chat/completions", payload: chat(), headers: AUTH });
    expectError(loading, 503, "server_error", "overloaded", "model");
    expect(Number(loading.headers["retry-after"])).toBeGreaterThan(0);
    const failed = await app.inject({ method: "POST", url: "/v1/chat/completions", payload: chat({ model: "smollm2-360m-instruct" }), headers: AUTH });
    expectError(failed, 503, "server_error", "model_unavailable", "model");
  });

  it("a bug -> 500 server_error without a stack trace", async () => {
    // The worker crashes on the first decode step (its message never comes back).
    const fake = fakeModel({
      failWhen: { match: (call) => call.rows > 0 && call.tokensPerRow === 1, error: new Error("secret internal detail at /src/x.ts:10") },
    });
    const { app } = await fakeApp({ fake });
    const res = await app.inject({ method: "POST", url: "/v1/chat/completions", payload: chat(), headers: AUTH });
    expectError(res, 500, "server_error", null, null);
    expect(res.body).not.toContain("secret");
    expect(res.body).not.toMatch(/\bat\s.*:\d+/);
    expect(res.json().error.message).toContain(res.headers["x-request-id"]);
  });
});

describe("requests without a body", () => {
  it("a DELETE labelled JSON with no body gets the route's answer, not 'body is empty'", async () => {
    const { app } = await fakeApp();
    const plain = await app.inject({ method: "DELETE", url: `/v1/models/${SLUG}`, headers: AUTH });
    const labelled = await app.inject({ method: "DELETE", url: `/v1/models/${SLUG}`, headers: { ...AUTH, "content-type": "application/json" } });
    expect(labelled.statusCode).toBe(plain.statusCode);
    expect(labelled.json()).toEqual(plain.json());
    expect(labelled.json().error.message).not.toMatch(/empty/);
  });

  it("a POST with no body is still a 400 saying the body is empty", async () => {
    const { app } = await fakeApp();
    const res = await app.inject({ method: "POST", url: "/v1/chat/completions", headers: { ...AUTH, "content-type": "application/json" } });
    expect(res.statusCode).toBe(400);
    expect(res.json().error).toMatchObject({ code: "invalid_json", message: expect.stringMatching(/body is empty/) });
  });
});
