/** Inputs that are easy to answer wrongly: an empty prompt, a URL that does not decode, the budget field's name. */
import { describe, expect, it } from "vitest";
import { AUTH, fakeApp, fakeModel, SLUG } from "./fake-model.js";

function expectApiError(res: { statusCode: number; json(): any; headers: Record<string, unknown> }, status: number, code: string | null, param: string | null) {
  expect(res.statusCode).toBe(status);
  expect(res.headers["content-type"]).toMatch(/^application\/json/);
  expect(typeof res.headers["x-request-id"]).toBe("string");
  const body = res.json();
  expect(Object.keys(body)).toEqual(["error"]);
  expect(Object.keys(body.error).sort()).toEqual(["code", "message", "param", "type"]);
  expect(body.error).toMatchObject({ type: "invalid_request_error", code, param });
}

describe("completions: an empty prompt", () => {
  for (const prompt of ["", [""]]) {
    it(`prompt ${JSON.stringify(prompt)} on a model without BOS -> 400 on prompt, not 500`, async () => {
      const { app } = await fakeApp();
      const res = await app.inject({ method: "POST", url: "/v1/completions", payload: { model: SLUG, prompt }, headers: AUTH });
      expectApiError(res, 400, "invalid_value", "prompt");
      await app.close();
    });
  }
});

describe("a URL whose percent-encoding does not decode", () => {
  for (const url of ["/v1/models/%E0%A4%A", "/v1/models/%zz", "/v1/models/smollm2%E0"]) {
    it(`GET ${url} -> 400 in the API's shape with x-request-id`, async () => {
      const { app } = await fakeApp();
      const res = await app.inject({ method: "GET", url, headers: AUTH });
      expectApiError(res, 400, null, null);
      expect(res.json().error.message).toMatch(/URL/);
      await app.close();
    });
  }

  it("keeps the client's x-request-id", async () => {
    const { app } = await fakeApp();
    const res = await app.inject({ method: "GET", url: "/v1/models/%E0%A4%A", headers: { ...AUTH, "x-request-id": "client-id-1" } });
    expect(res.headers["x-request-id"]).toBe("client-id-1");
    await app.close();
  });
});

describe("chat: the completion budget's field", () => {
  for (const field of ["max_completion_tokens", "max_tokens"]) {
    it(`${field} past the context -> context_length_exceeded naming ${field}`, async () => {
      const { app } = await fakeApp({ fake: fakeModel({ contextLength: 40 }) });
      const payload = { model: SLUG, messages: [{ role: "user", content: "hi" }], [field]: 100 };
      const res = await app.inject({ method: "POST", url: "/v1/chat/completions", payload, headers: AUTH });
      expectApiError(res, 400, "context_length_exceeded", field);
      await app.close();
    });
  }
});

describe("a body labelled with a content-encoding", () => {
  const payload = JSON.stringify({ model: SLUG, messages: [{ role: "user", content: "hi" }] });
  for (const encoding of ["gzip", "br", "deflate, gzip"]) {
    it(`content-encoding: ${encoding} on a plain body -> 415 in the API's shape, not parsed as plain`, async () => {
      const { app, fake } = await fakeApp();
      const res = await app.inject({
        method: "POST",
        url: "/v1/chat/completions",
        payload,
        headers: { ...AUTH, "content-type": "application/json", "content-encoding": encoding },
      });
      expect(res.statusCode).toBe(415);
      expect(res.headers["content-type"]).toMatch(/^application\/json/);
      expect(res.json().error).toMatchObject({ type: "invalid_request_error", code: "unsupported_content_encoding", param: null });
      expect(fake.backend.calls).toEqual([]);
      await app.close();
    });
  }

  it("content-encoding: identity is a plain body", async () => {
    const { app } = await fakeApp();
    const res = await app.inject({
      method: "POST",
      url: "/v1/chat/completions",
      payload,
      headers: { ...AUTH, "content-type": "application/json", "content-encoding": "identity" },
    });
    expect(res.statusCode).toBe(200);
    await app.close();
  });
});

describe("an array of the wrong length", () => {
  it("an empty messages array is named as empty, in the singular", async () => {
    const { app } = await fakeApp();
    const res = await app.inject({ method: "POST", url: "/v1/chat/completions", payload: { model: SLUG, messages: [] }, headers: AUTH });
    expectApiError(res, 400, "invalid_value", "messages");
    expect(res.json().error.message).toBe("Invalid 'messages': expected an array with at least 1 item, but got an empty array.");
    await app.close();
  });

  it("too many stop sequences gives the count", async () => {
    const { app } = await fakeApp();
    const payload = { model: SLUG, messages: [{ role: "user", content: "hi" }], stop: ["a", "b", "c", "d", "e"] };
    const res = await app.inject({ method: "POST", url: "/v1/chat/completions", payload, headers: AUTH });
    expectApiError(res, 400, "invalid_value", "stop");
    expect(res.json().error.message).toBe("Invalid 'stop': expected an array with at most 4 items, but got 5.");
    await app.close();
  });
});

describe("a prompt too long for the context whatever it tokenizes to", () => {
  const long = "x".repeat(600);
  const cases: Array<[string, Record<string, unknown>, string]> = [
    [
      "/v1/chat/completions",
      {
        messages: [
          { role: "system", content: "be brief" },
          { role: "user", content: [{ type: "text", text: long }] },
        ],
      },
      "messages",
    ],
    ["/v1/completions", { prompt: ["short", long] }, "prompt"],
    ["/v1/responses", { input: long }, "input"],
  ];
  for (const [url, body, param] of cases) {
    it(`${url}: a 400 naming ${param}, before it is rendered or tokenized`, async () => {
      const fake = fakeModel({ contextLength: 512 });
      const { app } = await fakeApp({ fake });
      try {
        const res = await app.inject({ method: "POST", url, payload: { model: SLUG, ...body }, headers: AUTH });
        expectApiError(res, 400, "context_length_exceeded", param);
        expect(res.json().error.message).toMatch(/holds 6\d\d characters, at least 6\d\d tokens/);
        expect(fake.rendered).toHaveLength(0);
      } finally {
        await app.close();
      }
    });
  }

  it("is left to the tokens where truncate_prompt_tokens keeps the prompt's end", async () => {
    const { app } = await fakeApp({ fake: fakeModel({ contextLength: 512 }) });
    try {
      const payload = { model: SLUG, prompt: long, max_tokens: 1, truncate_prompt_tokens: 100 };
      const res = await app.inject({ method: "POST", url: "/v1/completions", payload, headers: AUTH });
      expect(res.statusCode, res.body).toBe(200);
      expect(res.json().usage.prompt_tokens).toBe(100);
    } finally {
      await app.close();
    }
  });
});
