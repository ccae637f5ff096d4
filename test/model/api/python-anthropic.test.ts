/**
 * The real server process on the real model, driven by Anthropic's official *Python* client
 * (`anthropic`, installed by `npm run setup` into .cache/pyclient): a message and its stream (the
 * client's text stream adds up to the message), token counting, a Message Batch through the client's
 * `messages.batches` (its results read from the batch's `results_url` and decoded by the client),
 * structured outputs (`messages.parse` with a pydantic type, and the beta's `output_format`), and
 * errors raised as the client's own classes. The checks are in python/anthropic_checks.py, which prints
 * one JSON object of what it observed.
 */
import { execFile, spawnSync } from "node:child_process";
import { resolve } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TEXT_SLUG } from "../../support/model.js";
import { type RunningServer, startServer, stopServer } from "../../support/server.js";

const PYTHON = resolve(".cache/pyclient/bin/python");
const SCRIPT = resolve("test/model/api/python/anthropic_checks.py");

interface Results {
  anthropic_version: string;
  checks: Record<string, Record<string, any>>;
}

let server: RunningServer | undefined;
let results: Results;
/** Set when the venv or its anthropic package is missing: every test then fails with this message. */
let missingClient: string | undefined;

function check(name: string): Record<string, any> {
  if (missingClient) throw new Error(missingClient);
  const result = results.checks[name];
  expect(result.error, `python check '${name}' raised:\n${result.traceback ?? ""}`).toBeUndefined();
  return result;
}

beforeAll(async () => {
  // No skipping: without the client every test fails and says how to get it.
  const probe = spawnSync(PYTHON, ["-c", "import anthropic"], { encoding: "utf8" });
  if (probe.error || probe.status !== 0) {
    missingClient = `Anthropic's Python client is not installed at ${PYTHON} (${probe.error?.message ?? probe.stderr.trim()}): run \`npm run setup\` first.`;
    return;
  }
  server = await startServer(TEXT_SLUG);
  const { stdout } = await promisify(execFile)(PYTHON, [SCRIPT, server.root, "sk-local-anything", TEXT_SLUG], {
    timeout: 120_000,
    maxBuffer: 16 * 1024 * 1024,
  });
  try {
    results = JSON.parse(stdout) as Results;
  } catch {
    throw new Error(`anthropic_checks.py did not print one JSON object:\n${stdout}`);
  }
}, 600_000);

afterAll(async () => {
  expect(await stopServer(server)).toBe(0);
});

describe("kiln serve with Anthropic's official Python client", () => {
  it("a message, its text stream adding up to it, and count_tokens counting its input", () => {
    expect(missingClient, missingClient).toBeUndefined();
    expect(results.anthropic_version).toMatch(/^\d+\.\d+/);
    const m = check("message");
    expect(m).toMatchObject({ type: "message", model: TEXT_SLUG });
    expect(["end_turn", "max_tokens"]).toContain(m.stop_reason);
    expect(m.text.length).toBeGreaterThan(0);
    expect(m.streamed_text).toBe(m.text);
    expect(m.streamed_final_text).toBe(m.text);
    expect(m.streamed_output_tokens).toBe(m.output_tokens);
    expect(m.counted_input_tokens).toBe(m.input_tokens);
  });

  it("a Message Batch: created, polled, its results decoded by the client, listed and deleted", () => {
    const b = check("batch");
    expect(b.id).toMatch(/^msgbatch_/);
    expect(b.created_status).toBe("in_progress");
    expect(b.processing_status).toBe("ended");
    expect(b.request_counts).toEqual({ processing: 0, succeeded: 1, errored: 1, canceled: 0, expired: 0 });
    expect(b.results_url).toBe(`${server!.root}/v1/messages/batches/${b.id}/results`);
    expect(b.result_types).toEqual({ colours: "succeeded", "no-model": "errored" });
    expect(b.colours_text.length).toBeGreaterThan(0);
    expect(b.no_model_error_type).toBe("not_found_error");
    expect(b.listed).toBe(true);
    expect(b.deleted_type).toBe("message_batch_deleted");
  });

  it("structured outputs: messages.parse with a pydantic type gives its instance; the beta's output_format holds the text to its schema", () => {
    const s = check("structured");
    expect(s.parsed_class, JSON.stringify(s)).toBe("Rainbow");
    for (const k of ["first", "second", "third"]) expect(typeof s.parsed[k], JSON.stringify(s)).toBe("string");
    expect(s.parsed_stop_reason).toBe("end_turn");
    const beta = JSON.parse(s.beta_text) as { first: unknown; count: unknown };
    expect(Object.keys(beta).sort()).toEqual(["count", "first"]);
    expect(typeof beta.first === "string" && beta.first.length <= 20, s.beta_text).toBe(true);
    expect(Number.isInteger(beta.count) && (beta.count as number) >= 1 && (beta.count as number) <= 7, s.beta_text).toBe(true);
    expect(s.beta_stop_reason).toBe("end_turn");
  });

  it("errors are raised as the client's own classes, with Anthropic's types", () => {
    const e = check("errors");
    expect(e.unknown_model).toEqual({ class: "NotFoundError", status: 404, type: "not_found_error" });
    expect(e.bad_temperature).toEqual({ class: "BadRequestError", status: 400, type: "invalid_request_error" });
  });
});
