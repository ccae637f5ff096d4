/** POST /tokenize and /detokenize on a fake model: the prompt a completion or a chat would get, ids back to text, and the errors. */
import { describe, expect, it } from "vitest";
import { openDatabase } from "../../../src/catalogue/db.js";
import { sqliteKeyStore } from "../cloud/keys-support.js";
import type { AdmissionRequest, Metering } from "../../../src/api/cloud-port.js";
import { AUTH, fakeApp, fakeModel, SLUG } from "./fake-model.js";

const bytes = (text: string) => [...new TextEncoder().encode(text)];
const messages = [
  { role: "system", content: "Be brief." },
  { role: "user", content: "hi" },
];

async function post(url: string, payload: Record<string, unknown>, app?: Awaited<ReturnType<typeof fakeApp>>["app"]) {
  const served = app ?? (await fakeApp()).app;
  return served.inject({ method: "POST", url, payload, headers: AUTH });
}

describe("POST /tokenize", () => {
  it("a prompt: the ids a completion is prompted with, their count, the served context, and each token's entry on request", async () => {
    const { app } = await fakeApp({ fake: fakeModel({ contextLength: 96 }) });
    for (const url of ["/tokenize", "/v1/tokenize"]) {
      const res = await post(url, { model: SLUG, prompt: "Hello" }, app);
      expect(res.statusCode).toBe(200);
      expect(res.json()).toEqual({ count: 5, max_model_len: 96, tokens: bytes("Hello"), token_strs: null });
    }
    const strs = await post("/tokenize", { model: SLUG, prompt: "Hi!", return_token_strs: true }, app);
    expect(strs.json()).toMatchObject({ tokens: bytes("Hi!"), token_strs: ["H", "i", "!"] });
  });

  it("a chat: the ids a chat completion is prompted with, so count is its prompt_tokens", async () => {
    const { app, fake } = await fakeApp();
    const chat = await app.inject({ method: "POST", url: "/v1/chat/completions", payload: { model: SLUG, messages, max_tokens: 1 }, headers: AUTH });
    const res = await post("/tokenize", { model: SLUG, messages }, app);
    expect(res.statusCode).toBe(200);
    expect(res.json().count).toBe(chat.json().usage.prompt_tokens);
    expect(res.json().tokens).toEqual(bytes("<system>Be brief.<user>hi<assistant>"));
    // Without the assistant turn's opening; the template variables and the tools reach the template.
    const bare = await post("/tokenize", { model: SLUG, messages, add_generation_prompt: false, add_special_tokens: false }, app);
    expect(bare.json().tokens).toEqual(bytes("<system>Be brief.<user>hi"));
    const tools = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: {} } } }];
    await post("/tokenize", { model: SLUG, messages, tools, chat_template_kwargs: { enable_thinking: false } }, app);
    expect(fake.renderedVariables.at(-1)).toEqual({ enable_thinking: false });
    expect(fake.renderedTools.at(-1)?.map((t) => t.name)).toEqual(["get_weather"]);
  });

  it("asks for exactly one of prompt and messages, and refuses chat fields on a prompt, naming each", async () => {
    const cases: Array<[Record<string, unknown>, number, string, string]> = [
      [{ model: SLUG }, 400, "missing_required_parameter", "prompt"],
      [{ model: SLUG, prompt: "a", messages }, 400, "invalid_value", "messages"],
      [{ model: SLUG, prompt: "a", add_generation_prompt: false }, 400, "invalid_value", "add_generation_prompt"],
      [{ model: SLUG, prompt: "a", tools: [] }, 400, "invalid_value", "tools"],
      [{ model: SLUG, messages, add_special_tokens: true }, 400, "unsupported_value", "add_special_tokens"],
      [{ model: SLUG, messages, continue_final_message: true }, 400, "invalid_value", "continue_final_message"],
      [{ model: SLUG, prompt: "a", continue_final_message: false }, 400, "invalid_value", "continue_final_message"],
      [{ model: SLUG, messages, chat_template: "{{ x }}" }, 400, "unsupported_parameter", "chat_template"],
      [{ model: SLUG, messages: [] }, 400, "invalid_value", "messages"],
      [{ model: SLUG, prompt: 7 }, 400, "invalid_type", "prompt"],
      [{ model: "no-such-model", prompt: "a" }, 404, "model_not_found", "model"],
      [{ content: "a", prompt: "a" }, 400, "invalid_value", "content"],
      [{ prompt: "a", with_pieces: true }, 400, "invalid_value", "with_pieces"],
      [{ content: "a", add_special_tokens: true }, 400, "invalid_value", "add_special_tokens"],
    ];
    const { app } = await fakeApp();
    for (const [payload, status, code, param] of cases) {
      const res = await post("/tokenize", payload, app);
      expect(res.statusCode, JSON.stringify(payload)).toBe(status);
      expect(res.json().error, JSON.stringify(payload)).toMatchObject({ code, param });
    }
  });

  it("names the fields it ignores", async () => {
    const res = await post("/tokenize", { model: SLUG, prompt: "a", priority: 3 });
    expect(res.statusCode).toBe(200);
    expect(res.headers["x-kiln-ignored-fields"]).toBe("priority");
  });

  it("asks for a known key in cloud mode, at the root as under /v1", async () => {
    const keys = sqliteKeyStore(openDatabase({ path: ":memory:" }));
    const { key } = await keys.create("ci");
    const { app } = await fakeApp({ auth: { mode: "cloud", keys } });
    for (const url of ["/tokenize", "/v1/tokenize", "/detokenize"]) {
      const none = await app.inject({ method: "POST", url, payload: { model: SLUG, prompt: "a", tokens: [97] } });
      expect(none.statusCode, url).toBe(401);
      const known = await app.inject({ method: "POST", url, payload: { model: SLUG, prompt: "a", tokens: [97] }, headers: { authorization: `Bearer ${key}` } });
      expect(known.statusCode, url).toBe(200);
    }
  });
});

describe("llama.cpp's spelling", () => {
  it("/tokenize takes content (no BOS unless add_special) and with_pieces, /detokenize answers content, both without a model", async () => {
    const { app } = await fakeApp();
    expect((await post("/tokenize", { content: "Hi" }, app)).json()).toMatchObject({ count: 2, tokens: bytes("Hi") });
    const pieces = await post("/tokenize", { content: "Hi", with_pieces: true }, app);
    expect(pieces.json().tokens).toEqual([
      { id: bytes("H")[0], piece: "H" },
      { id: bytes("i")[0], piece: "i" },
    ]);
    expect((await post("/detokenize", { tokens: bytes("Hi") }, app)).json()).toEqual({ prompt: "Hi", content: "Hi" });
  });
});

describe("POST /detokenize", () => {
  it("gives the ids' text back, at the root as under /v1", async () => {
    const { app } = await fakeApp();
    for (const url of ["/detokenize", "/v1/detokenize"]) {
      const res = await post(url, { model: SLUG, tokens: bytes("Hello") }, app);
      expect(res.statusCode).toBe(200);
      expect(res.json()).toEqual({ prompt: "Hello", content: "Hello" });
    }
    expect((await post("/detokenize", { model: SLUG, tokens: [] }, app)).json()).toEqual({ prompt: "", content: "" });
  });

  it("refuses an id outside the vocabulary, a negative or a fractional one, naming its place", async () => {
    const { app, fake } = await fakeApp();
    const cases: Array<[unknown[], string, string]> = [
      [[72, fake.model.vocabSize], "invalid_value", "tokens[1]"],
      [[-1], "invalid_value", "tokens[0]"],
      [[1.5], "invalid_type", "tokens[0]"],
      [["a"], "invalid_type", "tokens[0]"],
    ];
    for (const [tokens, code, param] of cases) {
      const res = await post("/detokenize", { model: SLUG, tokens }, app);
      expect(res.statusCode, JSON.stringify(tokens)).toBe(400);
      expect(res.json().error, JSON.stringify(tokens)).toMatchObject({ code, param });
    }
    const missing = await post("/detokenize", { model: SLUG }, app);
    expect(missing.json().error).toMatchObject({ code: "missing_required_parameter", param: "tokens" });
  });
});

describe("cloud mode's limits", () => {
  it("a tokenization is admitted against the key's limits, charged nothing, and released; past a limit it is a 429", async () => {
    const keys = sqliteKeyStore(openDatabase({ path: ":memory:" }));
    const { key } = await keys.create("ci");
    const admitted: AdmissionRequest[] = [];
    const released: string[] = [];
    const state = { limitRequests: 2, remainingRequests: 0, resetRequestsMs: 30_000, limitTokens: null, remainingTokens: null, resetTokensMs: null };
    const metering: Metering = {
      async admit(_key, what) {
        admitted.push(what);
        return admitted.length <= 2
          ? { outcome: "admitted", state: null }
          : { outcome: "refused", state, code: "rate_limit_exceeded", limit: "requests", retryAfterMs: 30_000 };
      },
      async release(requestId) {
        released.push(requestId);
      },
      lastKnownState: () => null,
      record: () => {},
    };
    const { app } = await fakeApp({ auth: { mode: "cloud", keys }, cloud: metering });
    const headers = { authorization: `Bearer ${key}` };
    const ok = await app.inject({ method: "POST", url: "/tokenize", payload: { model: SLUG, prompt: "ab" }, headers });
    expect(ok.json().count).toBe(2);
    expect((await app.inject({ method: "POST", url: "/detokenize", payload: { model: SLUG, tokens: [97] }, headers })).statusCode).toBe(200);
    expect(admitted.map((a) => [a.promptTokens, a.maxCompletionTokens, a.requestId.startsWith("tok-")])).toEqual([
      [0, 0, true],
      [0, 0, true],
    ]);
    expect(released).toEqual(admitted.map((a) => a.requestId));
    const refused = await app.inject({ method: "POST", url: "/tokenize", payload: { model: SLUG, prompt: "ab" }, headers });
    expect(refused.statusCode).toBe(429);
    expect(refused.headers["retry-after"]).toBe("30");
    expect(released).toHaveLength(2);
  });
});
