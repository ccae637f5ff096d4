/**
 * Real client libraries, used unmodified, against kiln's structured outputs and tool calling on the
 * real model, with one `kiln serve` for the whole file:
 * - the `openai` npm client: `chat.completions.parse` with `zodResponseFormat`, and with a
 *   `zodFunction` tool;
 * - the Vercel AI SDK through `@ai-sdk/openai-compatible`: `generateObject`, `streamObject`, and
 *   `generateText` / `streamText` with tools (`toolChoice` required and named);
 * - in one Python process (python/framework_checks.py, the .cache/pyframeworks venv that
 *   scripts/setup.sh fills): openai's `parse` with a pydantic model, LangChain's
 *   `with_structured_output` (default method and function calling) and `bind_tools` (any, named,
 *   named and streamed), instructor's default mode (TOOLS), and the OpenAI Agents SDK (an agent
 *   with a tool and an output type, on chat completions and on the Responses API, run and streamed). It runs while
 *   the JS checks do.
 * Each check asserts that the library itself parsed and validated the object (and validates it
 * again here). Every request goes through a small recording proxy, so the last test can say which
 * request of which library kiln did not answer 2xx, and with which top-level fields
 * (KILN_FRAMEWORKS_LOG=<file> writes every request, its status and time, and the Python results there).
 */
import { execFile } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { createServer, request, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { resolve } from "node:path";
import { promisify } from "node:util";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateObject, generateText, streamObject, streamText, tool } from "ai";
import OpenAI from "openai";
import { zodFunction, zodResponseFormat } from "openai/helpers/zod";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { TEXT_SLUG } from "../../support/model.js";
import { type RunningServer, startServer, stopServer } from "../../support/server.js";

const MODEL = TEXT_SLUG;
const API_KEY = "sk-local-anything";
const MAX_TOKENS = 160;
const PYTHON = resolve(".cache/pyframeworks/bin/python");
const SCRIPT = resolve("test/model/api/python/framework_checks.py");

// --- the schemas: a nested object, an enum, a bounded array, an integer with bounds ----------
const Person = z.object({
  name: z.string().max(24),
  age: z.number().int().min(0).max(120),
  role: z.enum(["admin", "user", "guest"]),
  hobbies: z.array(z.string().max(24)).max(3),
  address: z.object({ city: z.string().max(24), country: z.string().max(24) }),
});
const Weather = z.object({ city: z.string().max(32), unit: z.enum(["celsius", "fahrenheit"]) });
const Add = z.object({ a: z.number().int(), b: z.number().int() });
const Forecast = z.object({ city: z.string().max(32), summary: z.string().max(60) });

const SYSTEM = "Extract the person as JSON.";
const PERSON = "Ada is 36, an admin from London, England, who likes chess and tea.";
const PERSON_PROMPT = [
  { role: "system" as const, content: SYSTEM },
  { role: "user" as const, content: PERSON },
];
const TOOL_PROMPT = [{ role: "user" as const, content: "What is the weather in Paris, in celsius?" }];

// --- a recording proxy: <proxy>/<tag>/v1/... is kiln's /v1/..., and each request is recorded ----
interface Exchange {
  tag: string;
  path: string;
  body: Record<string, unknown> | null;
  status: number;
  /** From the request's end to the answer's end. */
  ms?: number;
  /** The start of a non-2xx answer's body. */
  answer?: string;
}
const exchanges: Exchange[] = [];

function startProxy(upstreamRoot: string): Promise<{ proxy: Server; root: string }> {
  const upstream = new URL(upstreamRoot);
  const proxy = createServer((req, res) => {
    const [, tag = "?", path = req.url ?? "/"] = /^\/([\w-]+)(\/.*)$/.exec(req.url ?? "") ?? [];
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const raw = Buffer.concat(chunks);
      let body: Exchange["body"] = null;
      try {
        body = raw.length ? (JSON.parse(raw.toString()) as Record<string, unknown>) : null;
      } catch {
        body = { "(not JSON)": raw.toString().slice(0, 200) };
      }
      const entry: Exchange = { tag, path, body, status: 0 };
      const start = performance.now();
      res.on("finish", () => (entry.ms = Math.round(performance.now() - start)));
      exchanges.push(entry);
      const up = request(
        { host: upstream.hostname, port: upstream.port, method: req.method, path, headers: { ...req.headers, host: upstream.host } },
        (answer) => {
          entry.status = answer.statusCode ?? 0;
          res.writeHead(entry.status, answer.headers);
          if (entry.status >= 300) {
            entry.answer = "";
            answer.on("data", (c: Buffer) => (entry.answer = (entry.answer + c.toString()).slice(0, 600)));
          }
          answer.pipe(res);
        },
      );
      up.on("error", (e) => {
        entry.answer = `proxy: ${e.message}`;
        if (!res.headersSent) res.writeHead(502);
        res.end();
      });
      up.end(raw);
    });
  });
  return new Promise((ok) => proxy.listen(0, "127.0.0.1", () => ok({ proxy, root: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}` })));
}

// --- the Python side -------------------------------------------------------------------------
interface PyPerson {
  class: string;
  is_person: boolean;
  value: unknown;
}
interface PyToolCalls {
  class: string;
  tool_calls: Array<{ name: string; args: unknown; id: string | null; args_is_dict: boolean; valid: true | string }>;
  invalid_tool_calls: unknown[];
  finish_reason: string | null;
  chunks: number;
}
interface PyAgentRun {
  /** Streamed runs: how many events of each kind (raw ones by their Responses event type). */
  events: Record<string, number>;
  class: string;
  is_forecast: boolean;
  value: unknown;
  tool_cities: string[];
  turns: number;
}
interface PyResults {
  versions: Record<string, string | null>;
  checks: {
    openai_parse: PyPerson & { content: string; refusal: string | null; finish_reason: string };
    langchain_structured: PyPerson & { parsing_error: string | null; raw_content: string };
    langchain_function_calling: PyPerson & { parsing_error: string | null; raw_tool_calls: unknown };
    langchain_tools_any: PyToolCalls;
    langchain_tools_named: PyToolCalls;
    langchain_tools_stream: PyToolCalls;
    instructor: PyPerson & { mode: string };
    agents_chat: PyAgentRun;
    agents_responses: PyAgentRun;
    agents_responses_stream: PyAgentRun;
  };
}

let server: RunningServer | undefined;
let proxy: Server | undefined;
let proxyRoot: string;
let python: Promise<PyResults | Error>;
const versions: Record<string, string | null> = {};

/** A Python check's record, failing with the traceback the script recorded when it raised. */
async function py<K extends keyof PyResults["checks"]>(name: K): Promise<PyResults["checks"][K]> {
  const results = await python;
  if (results instanceof Error) throw results;
  const result = results.checks[name] as PyResults["checks"][K] & { error?: string; traceback?: string };
  expect(result.error, `python check '${name}' raised:\n${result.traceback ?? ""}`).toBeUndefined();
  return result;
}

function expectPerson(value: unknown, context: unknown): void {
  const check = Person.safeParse(value);
  expect(check.success, `${JSON.stringify(context)}\n${check.error?.message ?? ""}`).toBe(true);
}

/** The requests the proxy saw under `tag`. */
const sent = (tag: string) => exchanges.filter((e) => e.tag === tag);

beforeAll(async () => {
  server = await startServer(MODEL);
  ({ proxy, root: proxyRoot } = await startProxy(server.root));
  // The Python checks run while the JS ones do: the server batches them together.
  const setupHint = `(the venv at ${PYTHON} comes from \`npm run setup\`)`;
  python = promisify(execFile)(PYTHON, [SCRIPT, proxyRoot, API_KEY, MODEL], { timeout: 240_000, maxBuffer: 16 * 1024 * 1024 }).then(
    ({ stdout }) => {
      try {
        const results = JSON.parse(stdout) as PyResults;
        Object.assign(versions, results.versions);
        return results;
      } catch {
        return new Error(`framework_checks.py did not print one JSON object:\n${stdout}`);
      }
    },
    (e: Error & { stderr?: string }) => new Error(`framework_checks.py failed ${setupHint}: ${e.message}\n${e.stderr ?? ""}`),
  );
  for (const p of ["openai", "ai", "@ai-sdk/openai-compatible", "zod"]) {
    versions[`npm:${p}`] = (JSON.parse(readFileSync(resolve("node_modules", p, "package.json"), "utf8")) as { version: string }).version;
  }
});

afterAll(async () => {
  await python; // never leave the script talking to a stopped server
  if (process.env.KILN_FRAMEWORKS_LOG) writeFileSync(process.env.KILN_FRAMEWORKS_LOG, JSON.stringify({ versions, exchanges, python: await python }, null, 1));
  await new Promise((ok) => (proxy ? proxy.close(ok) : ok(undefined)));
  expect(await stopServer(server), server?.stderr()).toBe(0);
});

describe("the openai npm client", () => {
  let client: OpenAI;
  beforeAll(() => {
    client = new OpenAI({ baseURL: `${proxyRoot}/openai_js/v1`, apiKey: API_KEY, maxRetries: 0, timeout: 60_000 });
  });

  it("chat.completions.parse with zodResponseFormat: message.parsed is set and validates", async () => {
    const r = await client.chat.completions.parse({
      model: MODEL,
      messages: PERSON_PROMPT,
      response_format: zodResponseFormat(Person, "person"),
      temperature: 0,
      max_tokens: MAX_TOKENS,
    });
    const message = r.choices[0].message;
    expect(message.parsed, `content: ${message.content}`).toBeTruthy();
    expectPerson(message.parsed, message.content);
    expect(r.choices[0].finish_reason).toBe("stop");
  });

  it("chat.completions.parse with a zodFunction tool: parsed_arguments validate", async () => {
    const r = await client.chat.completions.parse({
      model: MODEL,
      messages: TOOL_PROMPT,
      tools: [zodFunction({ name: "get_weather", description: "Get the current weather in a city.", parameters: Weather })],
      tool_choice: { type: "function", function: { name: "get_weather" } },
      temperature: 0,
      max_tokens: MAX_TOKENS,
    });
    const { message, finish_reason } = r.choices[0];
    const calls = message.tool_calls ?? [];
    expect(calls.length, JSON.stringify(message)).toBeGreaterThan(0);
    for (const call of calls) {
      expect(call.type).toBe("function");
      if (call.type !== "function") continue;
      expect(call.function.name).toBe("get_weather");
      expect(Weather.safeParse(call.function.parsed_arguments).success, call.function.arguments).toBe(true);
    }
    expect(finish_reason).toBe("tool_calls");
  });
});

describe("the Vercel AI SDK (@ai-sdk/openai-compatible)", () => {
  let model: ReturnType<ReturnType<typeof createOpenAICompatible>>;
  beforeAll(() => {
    model = createOpenAICompatible({ baseURL: `${proxyRoot}/ai_sdk/v1`, name: "kiln", apiKey: API_KEY, supportsStructuredOutputs: true })(MODEL);
  });
  const common = { temperature: 0, maxOutputTokens: MAX_TOKENS, maxRetries: 0 } as const;
  const tools = {
    getWeather: tool({ description: "Get the current weather in a city.", inputSchema: Weather }),
    add: tool({ description: "Add two integers.", inputSchema: Add }),
  };

  /** Every call is a known tool, typed (not dynamic/invalid), with an input that validates. */
  function expectToolCalls(
    calls: ReadonlyArray<{ toolName: string; input: unknown; dynamic?: boolean; invalid?: boolean; error?: unknown }>,
    only?: keyof typeof tools,
  ): void {
    expect(calls.length, "tool calls the SDK reported").toBeGreaterThan(0);
    for (const call of calls) {
      const context = JSON.stringify(call);
      expect(call.invalid ?? false, context).toBe(false);
      expect(call.dynamic ?? false, context).toBe(false);
      if (only) expect(call.toolName).toBe(only);
      const schema = call.toolName === "add" ? Add : Weather;
      expect(schema.safeParse(call.input).success, context).toBe(true);
    }
  }

  it("generateObject with a zod schema: the object validates, sent as a json_schema response format", async () => {
    const r = await generateObject({ model, schema: Person, schemaName: "person", instructions: SYSTEM, prompt: PERSON, ...common });
    expectPerson(r.object, r.object);
    expect(r.warnings ?? []).toEqual([]);
    expect(sent("ai_sdk").at(-1)?.body?.response_format).toMatchObject({ type: "json_schema", json_schema: { name: "person", strict: true } });
  });

  it("streamObject: the final object validates", async () => {
    const r = streamObject({ model, schema: Person, instructions: SYSTEM, prompt: PERSON, ...common });
    let partials = 0;
    for await (const _ of r.partialObjectStream) partials++;
    expectPerson(await r.object, partials);
    expect(partials).toBeGreaterThan(1);
  });

  it("generateText with tools and toolChoice 'required': tool calls whose inputs validate", async () => {
    const r = await generateText({ model, tools, toolChoice: "required", messages: TOOL_PROMPT, ...common });
    expectToolCalls(r.toolCalls);
    expect(r.finishReason).toBe("tool-calls");
  });

  it("streamText with a named toolChoice: streamed tool-call deltas give a call to that tool that validates", async () => {
    const r = streamText({ model, tools, toolChoice: { type: "tool", toolName: "getWeather" }, messages: TOOL_PROMPT, ...common });
    let inputDeltas = 0;
    for await (const part of r.fullStream) {
      if (part.type === "tool-input-delta") inputDeltas++;
      if (part.type === "error") throw part.error;
    }
    expectToolCalls(await r.toolCalls, "getWeather");
    expect(inputDeltas, "tool-input-delta parts").toBeGreaterThan(0);
    expect(await r.finishReason).toBe("tool-calls");
  });
});

describe("Python frameworks (framework_checks.py in .cache/pyframeworks)", () => {
  it("has openai, langchain-openai, langchain-core, instructor, openai-agents and pydantic (`npm run setup`)", async () => {
    const results = await python;
    if (results instanceof Error) throw results;
    for (const [name, v] of Object.entries(results.versions)) expect(v, `${name} version in ${PYTHON}: run \`npm run setup\``).toMatch(/^\d+\.\d+/);
  });

  it("openai chat.completions.parse(response_format=PydanticModel): a parsed instance", async () => {
    const c = await py("openai_parse");
    expect(c.is_person, JSON.stringify(c)).toBe(true);
    expectPerson(c.value, c);
  });

  it("LangChain with_structured_output(PydanticModel), default method: a parsed instance", async () => {
    const c = await py("langchain_structured");
    expect(c.parsing_error, JSON.stringify(c)).toBeNull();
    expect(c.is_person, JSON.stringify(c)).toBe(true);
    expectPerson(c.value, c);
    expect(sent("langchain_structured")[0]?.body?.response_format).toMatchObject({ type: "json_schema" });
  });

  it("LangChain with_structured_output(PydanticModel, method='function_calling'): a parsed instance", async () => {
    const c = await py("langchain_function_calling");
    expect(c.parsing_error, JSON.stringify(c)).toBeNull();
    expect(c.is_person, JSON.stringify(c)).toBe(true);
    expectPerson(c.value, c);
  });

  const bindings = [
    ["langchain_tools_any", "any", ".invoke"],
    ["langchain_tools_named", "get_weather", ".invoke"],
    ["langchain_tools_stream", "get_weather", ".stream, chunks merged"],
  ] as const;
  for (const [name, choice, how] of bindings) {
    it(`LangChain bind_tools(tool_choice=${JSON.stringify(choice)})${how}: tool_calls with args that validate`, async () => {
      const c = await py(name);
      const context = JSON.stringify(c);
      expect(c.invalid_tool_calls, context).toEqual([]);
      expect(c.tool_calls.length, context).toBeGreaterThan(0);
      for (const call of c.tool_calls) {
        expect(call.args_is_dict, context).toBe(true);
        expect(call.valid, context).toBe(true);
        if (choice !== "any") expect(call.name).toBe(choice);
        expect((call.name === "add" ? Add : Weather).safeParse(call.args).success, context).toBe(true);
      }
      expect(c.finish_reason).toBe("tool_calls");
      if (name === "langchain_tools_stream") expect(c.chunks, "streamed chunks").toBeGreaterThan(2);
    });
  }

  const agentRuns = [
    ["agents_chat", "chat completions", "response_format"],
    ["agents_responses", "the Responses API", "text"],
    ["agents_responses_stream", "the Responses API, streamed (Runner.run_streamed)", "text"],
  ] as const;
  for (const [name, api, formatField] of agentRuns) {
    it(`OpenAI Agents SDK on ${api}: an agent with a tool and an output type ends with its output type, its requests offering both at once`, async () => {
      const c = await py(name);
      const context = JSON.stringify(c);
      expect(c.is_forecast, context).toBe(true);
      expect(Forecast.safeParse(c.value).success, context).toBe(true);
      expect(c.turns, context).toBeGreaterThanOrEqual(1);
      for (const city of c.tool_cities) expect(typeof city, context).toBe("string");
      const both = exchanges.filter((e) => e.tag === name && e.body?.tools !== undefined && e.body?.[formatField] !== undefined);
      expect(both.length, "requests with tools and an output format").toBeGreaterThanOrEqual(1);
      for (const e of both) expect(e.status, `${e.path} ${e.answer ?? ""}`).toBe(200);
      if (name === "agents_responses_stream") {
        expect(c.events["raw:response.completed"], context).toBeGreaterThanOrEqual(1);
        expect(c.events["raw:response.output_text.delta"] ?? c.events["raw:response.function_call_arguments.delta"], context).toBeGreaterThan(0);
      }
    });
  }

  it("instructor.from_openai, default mode (TOOLS): a model instance", async () => {
    const c = await py("instructor");
    expect(c.mode, "instructor's default mode").toMatch(/TOOLS/);
    expect(c.is_person, JSON.stringify(c)).toBe(true);
    expectPerson(c.value, c);
    expect(sent("instructor")[0]?.body?.tool_choice).toMatchObject({ type: "function" });
  });
});

describe("what the libraries sent", () => {
  it("kiln answered every request of every library 2xx", async () => {
    await python;
    const tags = new Set(exchanges.map((e) => e.tag));
    for (const tag of [
      "openai_js",
      "ai_sdk",
      "openai_parse",
      "langchain_structured",
      "langchain_function_calling",
      "langchain_tools_any",
      "langchain_tools_named",
      "langchain_tools_stream",
      "instructor",
      "agents_chat",
      "agents_responses",
      "agents_responses_stream",
    ]) {
      expect(tags.has(tag), `no request from ${tag} reached the proxy`).toBe(true);
    }
    const refused = exchanges
      .filter((e) => e.status < 200 || e.status >= 300)
      .map((e) => `${e.tag} ${e.path} -> ${e.status} ${e.answer ?? ""}\n  fields: ${Object.keys(e.body ?? {}).join(", ")}`);
    expect(refused, `versions: ${JSON.stringify(versions)}`).toEqual([]);
  });
});
