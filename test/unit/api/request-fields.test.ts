/**
 * Top-level request fields of /v1/chat/completions and /v1/completions: the reference API's fields
 * and kiln's extensions are known; other servers' extensions that change the output are a 400
 * naming them; anything else is accepted and ignored as the API contract asks, and named back in
 * `x-kiln-ignored-fields`. The vLLM-style extensions (top_k, min_p, repetition_penalty,
 * guided_json/regex/choice) are honoured.
 */
import OpenAI, { BadRequestError } from "openai";
import { describe, expect, it } from "vitest";
import { chatCompletionRequestSchema, parseChatCompletionRequest } from "../../../src/api/protocol/chat-completions.js";
import { completionRequestSchema, parseCompletionRequest } from "../../../src/api/protocol/completions.js";
import { requestConstraint } from "../../../src/api/protocol/output-constraint.js";
import type { SlotOp } from "../../../src/runtime/text-worker/protocol.js";
import { AUTH, fakeApp, fakeModel, SLUG } from "./fake-model.js";

/** The reference API's request fields (its OpenAPI description), per endpoint. */
const REFERENCE_CHAT = [
  "model",
  "messages",
  "audio",
  "frequency_penalty",
  "function_call",
  "functions",
  "logit_bias",
  "logprobs",
  "max_completion_tokens",
  "max_tokens",
  "metadata",
  "modalities",
  "n",
  "parallel_tool_calls",
  "prediction",
  "presence_penalty",
  "prompt_cache_key",
  "reasoning_effort",
  "response_format",
  "safety_identifier",
  "seed",
  "service_tier",
  "stop",
  "store",
  "stream",
  "stream_options",
  "temperature",
  "tool_choice",
  "tools",
  "top_logprobs",
  "top_p",
  "user",
  "verbosity",
  "web_search_options",
];
const REFERENCE_COMPLETIONS = [
  "model",
  "prompt",
  "best_of",
  "echo",
  "frequency_penalty",
  "logit_bias",
  "logprobs",
  "max_tokens",
  "n",
  "presence_penalty",
  "seed",
  "stop",
  "stream",
  "stream_options",
  "suffix",
  "temperature",
  "top_p",
  "user",
];
const EXTENSIONS = [
  "top_k",
  "min_p",
  "repetition_penalty",
  "min_tokens",
  "ignore_eos",
  "priority",
  "stop_token_ids",
  "allowed_token_ids",
  "bad_words",
  "include_stop_str_in_output",
  "skip_special_tokens",
  "truncate_prompt_tokens",
  "prompt_logprobs",
  "guided_json",
  "guided_regex",
  "guided_choice",
  "guided_grammar",
  "structured_outputs",
  "grammar",
  "json_schema",
];
/** vLLM's and llama.cpp's template variables, and vLLM's thinking budget: honoured on chat, which renders a template and splits the thinking. */
const CHAT_FIELDS = [...REFERENCE_CHAT, ...EXTENSIONS, "chat_template_kwargs", "add_generation_prompt", "continue_final_message", "thinking_token_budget"];
const COMPLETION_FIELDS = [...REFERENCE_COMPLETIONS, ...EXTENSIONS];

const CHAT_URL = "/v1/chat/completions";
const COMPLETIONS_URL = "/v1/completions";
const chat = (over: Record<string, unknown> = {}) => ({ model: SLUG, messages: [{ role: "user", content: "hi" }], ...over });
const completion = (over: Record<string, unknown> = {}) => ({ model: SLUG, prompt: "hi", ...over });
const bodyFor = (url: string, over: Record<string, unknown> = {}) => (url === CHAT_URL ? chat(over) : completion(over));

async function post(url: string, payload: object, fake = fakeModel()) {
  const { app } = await fakeApp({ fake });
  try {
    return await app.inject({ method: "POST", url, payload, headers: AUTH });
  } finally {
    await app.close();
  }
}

function expect400(res: { statusCode: number; json(): any }, code: string, param: string): string {
  expect(res.statusCode, JSON.stringify(res.json())).toBe(400);
  expect(res.json().error).toMatchObject({ type: "invalid_request_error", code, param });
  return res.json().error.message as string;
}

/** The constraint the engine was asked to hold the (first) sequence to. */
function openedConstraint(fake: ReturnType<typeof fakeModel>) {
  const open = fake.backend.calls.flatMap((c) => c.ops).find((op): op is Extract<SlotOp, { op: "open" }> => op.op === "open");
  expect(open).toBeDefined();
  return open!.constraint;
}

describe("the known top-level fields", () => {
  it("every field the schemas parse is a reference field or a listed extension", () => {
    expect(Object.keys(chatCompletionRequestSchema.shape).filter((f) => !CHAT_FIELDS.includes(f))).toEqual([]);
    expect(Object.keys(completionRequestSchema.shape).filter((f) => !COMPLETION_FIELDS.includes(f))).toEqual([]);
  });

  for (const [url, fields] of [
    [CHAT_URL, CHAT_FIELDS],
    [COMPLETIONS_URL, COMPLETION_FIELDS],
  ] as const) {
    it(`${url}: every reference field and extension is known (null accepted)`, async () => {
      const { app } = await fakeApp();
      try {
        for (const field of fields.filter((f) => !["model", "messages", "prompt"].includes(f))) {
          const res = await app.inject({ method: "POST", url, payload: bodyFor(url, { [field]: null }), headers: AUTH });
          expect(res.statusCode, `${field}: ${res.body}`).toBe(200);
        }
      } finally {
        await app.close();
      }
    });
  }
});

describe("unknown top-level fields: other servers' extensions refused by name, the rest ignored and named back", () => {
  const foreign = [
    "guided_decoding_backend",
    "repeat_last_n",
    "use_beam_search",
    "guided_whitespace_pattern",
    "length_penalty",
    "mirostat",
    "chat_template_kwargs",
    "options",
  ];
  for (const url of [CHAT_URL, COMPLETIONS_URL]) {
    for (const field of foreign.filter((f) => url === COMPLETIONS_URL || f !== "chat_template_kwargs")) {
      it(`${url}: ${field} is a 400 naming it`, async () => {
        const message = expect400(await post(url, bodyFor(url, { [field]: 2 })), "unsupported_parameter", field);
        expect(message).toContain("extension, which kiln does not honour");
      });
    }
  }

  it("another server's extension at its default value changes nothing and is accepted", async () => {
    for (const fields of [{ ignore_eos: false }, { skip_special_tokens: true }, { min_tokens: 0 }, { typical_p: 1 }, { guided_grammar: null }]) {
      expect((await post(CHAT_URL, chat(fields))).statusCode, JSON.stringify(fields)).toBe(200);
    }
  });

  it("fields no server knows are accepted, ignored, and listed in x-kiln-ignored-fields", async () => {
    const res = await post(CHAT_URL, chat({ some_vendor_field: 1, extra_body: { a: 1 }, max_token: 5 }));
    expect(res.statusCode).toBe(200);
    expect(res.headers["x-kiln-ignored-fields"]).toBe("some_vendor_field, extra_body, max_token");
    const plain = await post(COMPLETIONS_URL, completion({ metadata: { a: "b" }, prompt_cache_key: "k" }));
    expect(plain.statusCode).toBe(200);
    expect(plain.headers["x-kiln-ignored-fields"]).toBe("metadata, prompt_cache_key");
    expect((await post(CHAT_URL, chat())).headers["x-kiln-ignored-fields"]).toBeUndefined();
  });

  it("any field name is named back in a valid header, decided before generation, streamed or not (real sockets)", async () => {
    const { app } = await fakeApp();
    try {
      const url = await app.listen({ port: 0, host: "127.0.0.1" });
      const names = ["ключ", "a\nb", "x\ud800", "plain"];
      const body = `{${names.map((n, i) => `${JSON.stringify(n)}:${i}`).join(",")},"model":"${SLUG}","messages":[{"role":"user","content":"hi"}]}`;
      for (const stream of [false, true]) {
        const sent = stream ? body.replace(/}$/, ',"stream":true}') : body;
        const res = await fetch(`${url}${CHAT_URL}`, {
          method: "POST",
          body: sent,
          headers: { ...AUTH, "content-type": "application/json" },
          signal: AbortSignal.timeout(5000),
        });
        const text = await res.text();
        expect(res.status, text).toBe(200);
        expect(res.headers.get("x-kiln-ignored-fields")).toBe("%D0%BA%D0%BB%D1%8E%D1%87, a%0Ab, x%EF%BF%BD, plain");
        if (stream) expect(text.endsWith("data: [DONE]\n\n")).toBe(true);
      }
    } finally {
      await app.close();
    }
  });

  it("a body with very many unknown fields gets a bounded header", async () => {
    const many = Object.fromEntries(Array.from({ length: 500 }, (_, i) => [`vendor_field_${i}`, i]));
    const res = await post(CHAT_URL, chat(many));
    expect(res.statusCode).toBe(200);
    const header = String(res.headers["x-kiln-ignored-fields"]);
    expect(header.length).toBeLessThanOrEqual(1100);
    expect(header).toMatch(/^vendor_field_0, vendor_field_1, .*\(\d+ more\)$/);
  });

  it("chat fields sent to completions are refused by name when they would change the output", async () => {
    expect400(await post(COMPLETIONS_URL, completion({ response_format: { type: "json_object" } })), "unsupported_parameter", "response_format");
    expect400(await post(COMPLETIONS_URL, completion({ tools: [{ type: "function", function: { name: "f" } }] })), "unsupported_parameter", "tools");
  });

  it("fields the reference API has and kiln cannot honour keep their specific 400", async () => {
    expect400(await post(CHAT_URL, chat({ store: true })), "unsupported_parameter", "store");
    expect400(await post(CHAT_URL, chat({ audio: { voice: "alloy", format: "wav" } })), "unsupported_parameter", "audio");
    expect400(await post(COMPLETIONS_URL, completion({ suffix: "tail" })), "unsupported_value", "suffix");
  });

  it("messages stay lenient: what the reference's own answers carry can be replayed", async () => {
    const res = await post(
      CHAT_URL,
      chat({
        messages: [
          { role: "user", content: [{ type: "text", text: "hi", cache_control: { type: "ephemeral" } }], extra: 1 },
          {
            role: "assistant",
            content: null,
            refusal: null,
            annotations: [],
            audio: null,
            function_call: null,
            tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "f", arguments: "{}" } }],
          },
          { role: "tool", tool_call_id: "call_1", content: "42" },
          { role: "assistant", content: "It is 42.", refusal: null, annotations: [{ type: "url_citation", url_citation: { url: "https://example.com" } }] },
          { role: "user", content: "thanks" },
        ],
        stream: true,
        stream_options: { include_usage: true, include_obfuscation: false },
        response_format: { type: "json_schema", json_schema: { name: "x", description: "d", schema: { type: "object" }, strict: true } },
      }),
    );
    expect(res.statusCode, res.body).toBe(200);
  });

  it("a field inside response_format, stream_options or a tool's function that the reference does not define is a 400 naming its path", async () => {
    const fake = fakeModel();
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ response_format: { type: "json_object", schema: { type: "object" } } }, "response_format.schema"],
      [{ response_format: { type: "text", json_schema: {} } }, "response_format.json_schema"],
      [{ response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object" }, extra: 1 } } }, "response_format.json_schema.extra"],
      [{ response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object" } }, strict: true } }, "response_format.strict"],
      [{ stream: true, stream_options: { include_usuage: true } }, "stream_options.include_usuage"],
      [{ tools: [{ type: "function", function: { name: "f", paramters: { type: "object" } } }] }, "tools[0].function.paramters"],
    ];
    for (const [over, param] of cases) {
      const message = expect400(await post(CHAT_URL, chat(over), fake), "unknown_parameter", param);
      expect(message).toBe(`Unknown parameter: '${param}'.`);
    }
    expect400(
      await post(COMPLETIONS_URL, completion({ stream: true, stream_options: { includeUsage: true } }), fake),
      "unknown_parameter",
      "stream_options.includeUsage",
    );
    expect(fake.backend.calls).toEqual([]);
  });

  it("response_format.type of an unknown value is invalid_value listing the types", async () => {
    const message = expect400(await post(CHAT_URL, chat({ response_format: { type: "json" } })), "invalid_value", "response_format.type");
    expect(message).toBe(`Invalid value for 'response_format.type': 'json'. Supported values are: 'text', 'json_object' and 'json_schema'.`);
    expect400(await post(CHAT_URL, chat({ response_format: {} })), "missing_required_parameter", "response_format.type");
  });

  it("a message role outside the list is named, with the supported ones", async () => {
    const message = expect400(await post(CHAT_URL, chat({ messages: [{ role: "robot", content: "hi" }] })), "invalid_value", "messages[0].role");
    expect(message).toBe(
      `Invalid value for 'messages[0].role': 'robot'. Supported values are: 'system', 'developer', 'user', 'assistant', 'tool' and 'function'.`,
    );
  });

  it("identifiers and hints are accepted", async () => {
    const hints = { user: "u-1", metadata: { team: "a" }, prompt_cache_key: "k", safety_identifier: "s" };
    expect((await post(CHAT_URL, chat(hints))).statusCode).toBe(200);
    expect((await post(COMPLETIONS_URL, completion({ user: "u-1" }))).statusCode).toBe(200);
  });
});

describe("sampling extensions", () => {
  for (const url of [CHAT_URL, COMPLETIONS_URL]) {
    it(`${url}: top_k, min_p and repetition_penalty reach the engine`, async () => {
      const fake = fakeModel();
      const res = await post(url, bodyFor(url, { top_k: 5, min_p: 0.1, repetition_penalty: 1.3, max_tokens: 2 }), fake);
      expect(res.statusCode).toBe(200);
      expect(fake.backend.samplings[0]).toMatchObject({ top_k: 5, min_p: 0.1, repetition_penalty: 1.3 });
    });
  }

  it("repetition_penalty: > 0 and <= 2", async () => {
    expect((await post(CHAT_URL, chat({ repetition_penalty: 2 }))).statusCode).toBe(200);
    expect((await post(CHAT_URL, chat({ repetition_penalty: 0.01 }))).statusCode).toBe(200);
    expect400(await post(CHAT_URL, chat({ repetition_penalty: 0 })), "invalid_value", "repetition_penalty");
    expect400(await post(CHAT_URL, chat({ repetition_penalty: -1 })), "invalid_value", "repetition_penalty");
    expect400(await post(COMPLETIONS_URL, completion({ repetition_penalty: 2.5 })), "invalid_value", "repetition_penalty");
    expect400(await post(COMPLETIONS_URL, completion({ repetition_penalty: "high" })), "invalid_type", "repetition_penalty");
  });
});

describe("output constraints: response_format and guided_*", () => {
  const schema = { type: "object", properties: { a: { type: "integer" } }, required: ["a"] };

  it("each field maps to its constraint", () => {
    const parsed = (over: Record<string, unknown>) => parseChatCompletionRequest(chat(over));
    expect(requestConstraint(parsed({}))).toBeUndefined();
    expect(requestConstraint(parsed({ response_format: { type: "text" } }))).toBeUndefined();
    expect(requestConstraint(parsed({ response_format: { type: "json_object" } }))).toEqual({ type: "json_object" });
    expect(requestConstraint(parsed({ response_format: { type: "json_schema", json_schema: { name: "s", schema } } }))).toEqual({
      type: "json_schema",
      schema: JSON.stringify(schema),
    });
    expect(requestConstraint(parsed({ guided_json: schema }))).toEqual({ type: "json_schema", schema: JSON.stringify(schema) });
    expect(requestConstraint(parsed({ guided_json: JSON.stringify(schema, null, 2) }))).toEqual({ type: "json_schema", schema: JSON.stringify(schema) });
    expect(requestConstraint(parsed({ guided_regex: "[0-9]{3}-[a-z]+" }))).toEqual({ type: "regex", pattern: "[0-9]{3}-[a-z]+" });
    expect(requestConstraint(parsed({ guided_choice: ["yes", "no"] }))).toEqual({ type: "choice", choices: ["yes", "no"] });
    // A text response_format asks for nothing, so it combines with a guided field.
    expect(requestConstraint(parsed({ response_format: { type: "text" }, guided_choice: ["a"] }))).toEqual({ type: "choice", choices: ["a"] });
    // Completions have no response_format; the guided fields are the same.
    expect(requestConstraint(parseCompletionRequest(completion({ guided_regex: "a+" })))).toEqual({ type: "regex", pattern: "a+" });
    expect(requestConstraint(parseCompletionRequest(completion({ guided_choice: ["x"] })))).toEqual({ type: "choice", choices: ["x"] });
  });

  it("completions: the constraint reaches the engine", async () => {
    const cases: Array<[Record<string, unknown>, unknown]> = [
      [{ guided_json: schema }, { type: "json_schema", schema: JSON.stringify(schema) }],
      [{ guided_regex: "H.*" }, { type: "regex", pattern: "H.*" }],
      [{ guided_choice: ["Hello", "Bye"] }, { type: "choice", choices: ["Hello", "Bye"] }],
      [{ guided_grammar: 'root ::= "H" [a-z]*' }, { type: "grammar", grammar: 'root ::= "H" [a-z]*' }],
      [{ grammar: 'root ::= "H"' }, { type: "grammar", grammar: 'root ::= "H"' }],
      [{ json_schema: schema }, { type: "json_schema", schema: JSON.stringify(schema) }],
      [{ structured_outputs: { choice: ["Hello"] } }, { type: "choice", choices: ["Hello"] }],
      [{ structured_outputs: { json: JSON.stringify(schema), disable_fallback: true } }, { type: "json_schema", schema: JSON.stringify(schema) }],
      [{ structured_outputs: { grammar: 'root ::= "H"' } }, { type: "grammar", grammar: 'root ::= "H"' }],
      [{ structured_outputs: { regex: "H.*" } }, { type: "regex", pattern: "H.*" }],
      [{ structured_outputs: { json_object: true } }, { type: "json_object" }],
      // llama.cpp's default: no grammar.
      [{ grammar: "" }, undefined],
      [{}, undefined],
    ];
    for (const [fields, spec] of cases) {
      const fake = fakeModel();
      expect((await post(COMPLETIONS_URL, completion({ ...fields, max_tokens: 2 }), fake)).statusCode).toBe(200);
      expect(openedConstraint(fake)).toEqual(spec);
    }
  });

  it("chat: the constraint reaches the engine", async () => {
    const cases: Array<[Record<string, unknown>, unknown]> = [
      [{ response_format: { type: "json_object" } }, { type: "json_object" }],
      [{ guided_json: JSON.stringify(schema) }, { type: "json_schema", schema: JSON.stringify(schema) }],
      [{ guided_regex: "H.*" }, { type: "regex", pattern: "H.*" }],
      [{ guided_choice: ["Hello", "Bye"] }, { type: "choice", choices: ["Hello", "Bye"] }],
      [{ response_format: { type: "text" } }, undefined],
    ];
    for (const [fields, spec] of cases) {
      const fake = fakeModel();
      expect((await post(CHAT_URL, chat({ ...fields, max_tokens: 2 }), fake)).statusCode).toBe(200);
      expect(openedConstraint(fake), JSON.stringify(fields)).toEqual(spec);
    }
  });

  const conflicts: Array<[string, Record<string, unknown>, string]> = [
    [CHAT_URL, { response_format: { type: "json_object" }, guided_json: schema }, "guided_json"],
    [CHAT_URL, { response_format: { type: "json_schema", json_schema: { name: "s", schema } }, guided_choice: ["a"] }, "guided_choice"],
    [CHAT_URL, { guided_regex: "a", guided_choice: ["a"] }, "guided_choice"],
    [COMPLETIONS_URL, { guided_json: schema, guided_regex: "a" }, "guided_regex"],
    [COMPLETIONS_URL, { guided_json: schema, guided_regex: "a", guided_choice: ["a"] }, "guided_regex"],
    [CHAT_URL, { response_format: { type: "json_object" }, grammar: 'root ::= "a"' }, "grammar"],
    [COMPLETIONS_URL, { structured_outputs: { regex: "a", choice: ["a"] } }, "structured_outputs"],
    [COMPLETIONS_URL, { guided_grammar: 'root ::= "a"', json_schema: schema }, "json_schema"],
  ];
  for (const [url, fields, param] of conflicts) {
    it(`${url}: ${Object.keys(fields).join(" + ")} -> 400 naming ${param}`, async () => {
      const message = expect400(await post(url, bodyFor(url, fields)), "invalid_value", param);
      expect(message).toMatch(/one output constraint/);
    });
  }

  const invalid: Array<[string, Record<string, unknown>, string, string]> = [
    ["a bad regex", { guided_regex: "(ab" }, "guided_regex", "invalid_value"],
    ["a regex outside the engine's dialect (lookahead)", { guided_regex: "(?=a)a" }, "guided_regex", "invalid_value"],
    ["a regex the engine would abort on (empty alternative)", { guided_regex: "a|" }, "guided_regex", "invalid_value"],
    ["an empty regex", { guided_regex: "" }, "guided_regex", "invalid_value"],
    ["a regex that is not a string", { guided_regex: 5 }, "guided_regex", "invalid_type"],
    ["an empty choice", { guided_choice: [] }, "guided_choice", "invalid_value"],
    ["a choice that is not a string", { guided_choice: ["a", 1] }, "guided_choice[1]", "invalid_type"],
    ["a choice the engine cannot take (NUL)", { guided_choice: ["a", "b\u0000"] }, "guided_choice", "invalid_value"],
    ["a choice that is not an array", { guided_choice: "a" }, "guided_choice", "invalid_type"],
    ["a schema keyword kiln cannot enforce", { guided_json: { type: "array", items: { type: "integer" }, uniqueItems: true } }, "guided_json", "invalid_value"],
    ["the same, as a string", { guided_json: JSON.stringify({ type: "string", format: "ipv5" }) }, "guided_json", "invalid_value"],
    ["a string that is not JSON", { guided_json: "{type: object}" }, "guided_json", "invalid_value"],
    ["a string holding JSON that is not an object", { guided_json: "[1, 2]" }, "guided_json", "invalid_value"],
    ["a schema of the wrong type", { guided_json: 5 }, "guided_json", "invalid_type"],
    ["a grammar with an undefined rule", { grammar: "root ::= item" }, "grammar", "invalid_value"],
    ["a grammar the engine would abort on", { guided_grammar: 'root ::= "unclosed' }, "guided_grammar", "invalid_value"],
    ["a grammar inside structured_outputs", { structured_outputs: { grammar: "start ::= [a]" } }, "structured_outputs", "invalid_value"],
    [
      "a structured_outputs field kiln does not take",
      { structured_outputs: { regex: "a", whitespace_pattern: " *" } },
      "structured_outputs.whitespace_pattern",
      "unknown_parameter",
    ],
    ["llama.cpp's json_schema kiln cannot enforce", { json_schema: { type: "string", format: "ipv5" } }, "json_schema", "invalid_value"],
  ];
  for (const url of [CHAT_URL, COMPLETIONS_URL]) {
    for (const [what, fields, param, code] of invalid) {
      it(`${url}: ${what} -> 400 ${code} on ${param}`, async () => {
        const fake = fakeModel();
        expect400(await post(url, bodyFor(url, fields), fake), code, param);
        expect(fake.backend.calls).toHaveLength(0); // refused before any work
      });
    }
  }

  it("a schema error names where it is", async () => {
    const message = expect400(
      await post(CHAT_URL, chat({ guided_json: { type: "object", properties: { a: { type: "string", format: "ipv5" } } } })),
      "invalid_value",
      "guided_json",
    );
    expect(message).toMatch(/^Invalid 'guided_json': the schema at '\/properties\/a\/format': /);
  });

  it("a regex error says what and where", async () => {
    const message = expect400(await post(COMPLETIONS_URL, completion({ guided_regex: "x(?=a)" })), "invalid_value", "guided_regex");
    expect(message).toBe("Invalid 'guided_regex': a lookahead (?=...) at index 1 is not supported");
    const choice = expect400(await post(COMPLETIONS_URL, completion({ guided_choice: ["a", "b\u0000"] })), "invalid_value", "guided_choice");
    expect(choice).toBe("Invalid 'guided_choice' at '/1': choice 1 holds a NUL character");
  });

  it("response_format's own errors are unchanged", async () => {
    const bad = { type: "json_schema", json_schema: { name: "x", schema: { type: "array", uniqueItems: true } } };
    const message = expect400(await post(CHAT_URL, chat({ response_format: bad })), "invalid_value", "response_format");
    expect(message).toMatch(/^Invalid 'response_format\.json_schema\.schema': /);
  });

  it("a cyclic $ref is a 400 on the field, before any work, not a failure of the engine", async () => {
    const schema = { $defs: { a: { $ref: "#/$defs/a" } }, $ref: "#/$defs/a" };
    const fake = fakeModel();
    const message = expect400(
      await post(CHAT_URL, chat({ response_format: { type: "json_schema", json_schema: { name: "x", schema } } }), fake),
      "invalid_value",
      "response_format",
    );
    expect(message).toMatch(/cyclic reference/);
    expect400(await post(COMPLETIONS_URL, completion({ guided_json: schema })), "invalid_value", "guided_json");
    const tools = [
      { type: "function", function: { name: "f", parameters: { type: "object", properties: { v: { $ref: "#/$defs/a" } }, $defs: schema.$defs } } },
    ];
    expect400(await post(CHAT_URL, chat({ tools })), "invalid_value", "tools[0].function.parameters");
    expect(fake.backend.calls).toEqual([]);
  });
});

describe("the official npm openai client", () => {
  /** A server on a real port and a client whose request bodies are recorded as sent. */
  async function clientAndServer() {
    const { app } = await fakeApp();
    const url = await app.listen({ port: 0, host: "127.0.0.1" });
    const sent: Array<Record<string, unknown>> = [];
    const recordingFetch: typeof fetch = async (input, init) => {
      if (typeof init?.body === "string") sent.push(JSON.parse(init.body));
      return fetch(input, init);
    };
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "sk-test", maxRetries: 0, fetch: recordingFetch });
    return { app, client, sent };
  }

  it("sends only the fields it is given, so its requests pass the strictness", async () => {
    const { app, client, sent } = await clientAndServer();
    try {
      const messages = [{ role: "user" as const, content: "hi" }];
      const chatParams = {
        model: SLUG,
        messages,
        temperature: 0.5,
        top_p: 0.9,
        n: 2,
        stop: ["zz"],
        max_tokens: 4,
        presence_penalty: 0.1,
        frequency_penalty: 0.1,
        logit_bias: { "3": -1 },
        logprobs: true,
        top_logprobs: 2,
        seed: 1,
        user: "u",
        metadata: { k: "v" },
        prompt_cache_key: "pk",
        safety_identifier: "sid",
        parallel_tool_calls: true,
        service_tier: "auto" as const,
        store: false,
        response_format: { type: "text" as const },
      };
      await client.chat.completions.create(chatParams);
      const stream = await client.chat.completions.create({
        model: SLUG,
        messages,
        max_completion_tokens: 3,
        stream: true,
        stream_options: { include_usage: true },
      });
      for await (const _chunk of stream);
      const helper = client.chat.completions.stream({ model: SLUG, messages, max_tokens: 3 });
      await helper.finalChatCompletion();
      await client.chat.completions.parse({ model: SLUG, messages, max_tokens: 8 }); // parse() throws on finish_reason length
      await client.completions.create({ model: SLUG, prompt: "x", max_tokens: 3, echo: true, best_of: 1, n: 1, suffix: "", seed: 2, user: "u" });
      const legacyStream = await client.completions.create({ model: SLUG, prompt: "x", max_tokens: 3, stream: true, stream_options: { include_usage: true } });
      for await (const _chunk of legacyStream);

      expect(Object.keys(sent[0]).sort()).toEqual(Object.keys(chatParams).sort());
      expect(Object.keys(sent[2]).sort()).toEqual(["max_tokens", "messages", "model", "stream"]); // the stream helper adds only stream: true
      for (const body of sent.slice(0, 4)) expect(Object.keys(body).filter((f) => !CHAT_FIELDS.includes(f))).toEqual([]);
      for (const body of sent.slice(4)) expect(Object.keys(body).filter((f) => !COMPLETION_FIELDS.includes(f))).toEqual([]);
    } finally {
      await app.close();
    }
  });

  it("the runTools helper adds only known fields", async () => {
    const { app, client, sent } = await clientAndServer();
    try {
      const runner = client.chat.completions.runTools({
        model: SLUG,
        messages: [{ role: "user", content: "hi" }],
        max_tokens: 3,
        tools: [{ type: "function", function: { name: "f", description: "f", parameters: { type: "object", properties: {} }, function: () => "ok" } }],
      });
      const error = await runner.finalChatCompletion().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(sent.length).toBeGreaterThan(0);
      for (const body of sent) expect(Object.keys(body).filter((f) => !CHAT_FIELDS.includes(f))).toEqual([]);
      // max_tokens 3 cuts the answer; what matters is that the request was served.
      if (error !== undefined) expect((error as Error).constructor.name).toBe("LengthFinishReasonError");
    } finally {
      await app.close();
    }
  });

  it("extensions pass through the client; another server's extension is a BadRequestError naming it", async () => {
    const { app, client } = await clientAndServer();
    try {
      const extended = {
        model: SLUG,
        messages: [{ role: "user" as const, content: "hi" }],
        max_tokens: 2,
        top_k: 3,
        repetition_penalty: 1.1,
        guided_choice: ["Hello"],
      };
      const ok = await client.chat.completions.create(extended as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);
      expect(ok.object).toBe("chat.completion");
      const bad = await client.chat.completions
        .create({
          model: SLUG,
          messages: [{ role: "user", content: "hi" }],
          mirostat: 2,
        } as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming)
        .catch((e: unknown) => e);
      expect(bad).toBeInstanceOf(BadRequestError);
      expect(bad).toMatchObject({ status: 400, code: "unsupported_parameter", param: "mirostat" });
    } finally {
      await app.close();
    }
  });
});
