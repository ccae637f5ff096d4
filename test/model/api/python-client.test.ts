/**
 * The real server process on the real model, driven by the official `openai` *Python* client: a
 * smaller set of end-to-end checks than openai-client.test.ts. The client lives in the virtual
 * environment that `npm run setup` (scripts/setup.sh) creates at .cache/pyclient; the checks
 * themselves are in python/client_checks.py, which prints one JSON object of what it observed.
 */
import { execFile, spawnSync } from "node:child_process";
import { resolve } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TEXT_SLUG } from "../../support/model.js";
import { type RunningServer, startServer, stopServer } from "../../support/server.js";

const MODEL = TEXT_SLUG;
const PYTHON = resolve(".cache/pyclient/bin/python");
const SCRIPT = resolve("test/model/api/python/client_checks.py");
const STOP_TIMEOUT_MS = 20_000;

interface ApiErrorSeen {
  class: string | null;
  is_bad_request: boolean;
  is_not_found: boolean;
  is_authentication: boolean;
  status: number | null;
  code: string | null;
  param: string | null;
  type: string | null;
  body: unknown;
}
type Usage = { prompt_tokens: number; completion_tokens: number; total_tokens: number };
interface Results {
  openai_version: string;
  checks: {
    models: { count: number; ids: string[]; retrieved_id: string; retrieved_object: string };
    chat: {
      object: string;
      model: string;
      content: string;
      finish_reason: string;
      usage: Usage;
      stream: { chunks: number; content: string; roles: number; finish_reason: string; usage_chunk_indexes: number[]; usage: Usage | null };
    };
    completion: { object: string; text: string; finish_reason: string; usage: Usage };
    tools: {
      finish_reason: string;
      content: string | null;
      calls: Array<{ id: string; type: string; name: string; arguments: string }>;
      streamed: Array<{ id: string | null; name: string | null; arguments: string }>;
      repeated_ids: number;
      replay_finish_reason: string;
      replay_prompt_tokens: number;
      first_prompt_tokens: number;
    };
    invalid_temperature: ApiErrorSeen;
    unknown_model: ApiErrorSeen;
    empty_api_key: ApiErrorSeen & { client_refuses_empty_key: string | null; raw: { status: number; body: unknown } };
  };
}

let server: RunningServer | undefined;
let results: Results;
/** Set when the venv or its openai package is missing: every test then fails with this message. */
let missingClient: string | undefined;

/** A check's result, failing with what the script recorded when the check itself raised. */
function check<K extends keyof Results["checks"]>(name: K): Results["checks"][K] {
  if (missingClient) throw new Error(missingClient);
  const result = results.checks[name] as Results["checks"][K] & { error?: string; traceback?: string };
  expect(result.error, `python check '${name}' raised:\n${result.traceback ?? ""}`).toBeUndefined();
  return result;
}

beforeAll(async () => {
  // No skipping: without the client every test fails and says how to get it.
  const probe = spawnSync(PYTHON, ["-c", "import openai"], { encoding: "utf8" });
  if (probe.error || probe.status !== 0) {
    missingClient = `The official Python openai client is not installed at ${PYTHON} (${probe.error?.message ?? probe.stderr.trim()}): run \`npm run setup\` first.`;
    return;
  }
  server = await startServer(MODEL);
  const baseURL = server.baseURL;
  const { stdout } = await promisify(execFile)(PYTHON, [SCRIPT, baseURL, "sk-local-anything", MODEL], {
    timeout: 120_000,
    maxBuffer: 16 * 1024 * 1024,
  });
  try {
    results = JSON.parse(stdout) as Results;
  } catch {
    throw new Error(`client_checks.py did not print one JSON object:\n${stdout}`);
  }
});

afterAll(async () => {
  const code = await stopServer(server, STOP_TIMEOUT_MS);
  expect(code, `kiln serve did not exit cleanly within ${STOP_TIMEOUT_MS / 1000} s of SIGTERM:\n${server?.stderr() ?? ""}`).toBe(0);
});

describe("kiln serve with the official Python openai client", () => {
  it("has the Python client that `npm run setup` installs in .cache/pyclient", () => {
    expect(missingClient, missingClient).toBeUndefined();
    expect(results.openai_version, "openai.__version__").toMatch(/^\d+\.\d+/);
  });

  it("lists the 42 catalogue models and retrieves one", () => {
    const models = check("models");
    expect(models.count, "models.list() length").toBe(42);
    expect(models.ids, `models.list() should contain ${MODEL}`).toContain(MODEL);
    expect(models.retrieved_id, "models.retrieve() id").toBe(MODEL);
    expect(models.retrieved_object, "models.retrieve() object").toBe("model");
  });

  it("chats (temperature 0, max_tokens 16)", () => {
    const chat = check("chat");
    expect(chat.object).toBe("chat.completion");
    expect(chat.model).toBe(MODEL);
    expect(chat.content, "non-streamed chat content").toMatch(/blue/i);
    expect(chat.usage.completion_tokens, "at most max_tokens completion tokens").toBeLessThanOrEqual(16);
    expect(chat.usage.total_tokens).toBe(chat.usage.prompt_tokens + chat.usage.completion_tokens);
  });

  it("streams with include_usage: the deltas concatenate to the non-streamed answer, usage in the last chunk", () => {
    const { stream, ...whole } = check("chat");
    expect(stream.content, "concatenated stream deltas vs non-streamed content").toBe(whole.content);
    expect(stream.roles, "chunks carrying delta.role").toBe(1);
    expect(stream.finish_reason, "streamed finish_reason").toBe(whole.finish_reason);
    expect(stream.usage_chunk_indexes, "usage should be in the last chunk only").toEqual([stream.chunks - 1]);
    expect(stream.usage, "streamed usage vs non-streamed usage").toEqual(whole.usage);
  });

  it("completes a prompt with the default max_tokens: finish_reason length, at most 16 tokens", () => {
    const completion = check("completion");
    expect(completion.object).toBe("text_completion");
    expect(completion.finish_reason, "finish_reason with the default max_tokens").toBe("length");
    expect(completion.usage.completion_tokens, "completion tokens with the default max_tokens").toBeLessThanOrEqual(16);
    expect(completion.usage.completion_tokens).toBeGreaterThan(0);
    expect(completion.text).toMatch(/^ Paris/);
  });

  it("makes a required tool call, streams it in fragments that add up to the same call, and answers the replayed conversation", () => {
    const tools = check("tools");
    expect(tools.finish_reason).toBe("tool_calls");
    expect(tools.content).toBeNull();
    expect(tools.calls.length).toBeGreaterThan(0);
    for (const call of tools.calls) {
      expect(call).toMatchObject({ type: "function", name: "get_weather", id: expect.stringMatching(/^call_/) });
      const args = JSON.parse(call.arguments) as Record<string, unknown>;
      expect(Object.keys(args)).toEqual(["city"]);
      expect(typeof args.city).toBe("string");
    }
    expect(tools.streamed.map(({ name, arguments: a }) => ({ name, a }))).toEqual(tools.calls.map(({ name, arguments: a }) => ({ name, a })));
    expect(tools.repeated_ids, "a call's id is sent once, in its first fragment").toBe(0);
    expect(tools.replay_finish_reason).toMatch(/^(stop|length|tool_calls)$/);
    expect(tools.replay_prompt_tokens).toBeGreaterThan(tools.first_prompt_tokens);
  });

  it("raises BadRequestError (400, param temperature) for an invalid temperature", () => {
    const e = check("invalid_temperature");
    expect(e.class, "exception class").toBe("BadRequestError");
    expect(e.is_bad_request, "isinstance(e, openai.BadRequestError)").toBe(true);
    expect(e).toMatchObject({ status: 400, param: "temperature", code: "invalid_value", type: "invalid_request_error" });
  });

  it("raises NotFoundError (404, code model_not_found) for an unknown model", () => {
    const e = check("unknown_model");
    expect(e.class, "exception class").toBe("NotFoundError");
    expect(e.is_not_found, "isinstance(e, openai.NotFoundError)").toBe(true);
    expect(e).toMatchObject({ status: 404, code: "model_not_found", param: "model" });
  });

  it("answers an empty API key with 401: AuthenticationError in the client, the contract body on the wire", () => {
    const e = check("empty_api_key");
    expect(e.client_refuses_empty_key, "OpenAI(api_key='') should raise before any request").toBe("OpenAIError");
    expect(e.class, "exception class for `Authorization: Bearer`").toBe("AuthenticationError");
    expect(e.is_authentication, "isinstance(e, openai.AuthenticationError)").toBe(true);
    expect(e).toMatchObject({ status: 401, code: "invalid_api_key", type: "invalid_request_error", param: null });
    expect(e.raw.status, "status for a raw `Authorization: Bearer ` request").toBe(401);
    expect(e.raw.body, "error body for a raw `Authorization: Bearer ` request").toEqual({
      error: { message: expect.stringMatching(/API key/), type: "invalid_request_error", param: null, code: "invalid_api_key" },
    });
  });
});
