/**
 * Local mode with shared keys, as an operator starts it: the real `kiln serve` process with its keys
 * in $KILN_API_KEY (comma-separated), on a non-loopback address, driven by the official `openai`
 * client. A client with one of the keys is answered; one with another key, or none, gets the
 * client's AuthenticationError, on the OpenAI routes and on Ollama's, llama.cpp's and the metrics;
 * /health stays open and names no exposure, since keys are checked.
 */
import OpenAI, { AuthenticationError } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TEXT_SLUG } from "../../support/model.js";
import { type RunningServer, startServer, stopServer } from "../../support/server.js";

const KEYS = ["sk-kiln-first", "sk-kiln-second"];

let server: RunningServer;
/** The server on its loopback address: it listens on every interface. */
let root: string;

beforeAll(async () => {
  server = await startServer(TEXT_SLUG, ["--max-running", "1", "--host", "0.0.0.0"], { env: { KILN_API_KEY: KEYS.join(",") } });
  root = server.root.replace(/\/\/[^:/]+:/, "//127.0.0.1:");
}, 180_000);

afterAll(async () => {
  expect(await stopServer(server)).toBe(0);
});

const client = (apiKey: string) => new OpenAI({ baseURL: `${root}/v1`, apiKey, maxRetries: 0 });

describe("kiln serve with $KILN_API_KEY", () => {
  it("answers a client that sends either key", async () => {
    const answer = await client(KEYS[0]).chat.completions.create({ model: TEXT_SLUG, messages: [{ role: "user", content: "Hi" }], max_tokens: 4 });
    expect(answer.choices[0].message.content!.length).toBeGreaterThan(0);
    const models = await client(KEYS[1]).models.list();
    expect(models.data.map((m) => m.id)).toContain(TEXT_SLUG);
  });

  it("refuses a client with another key, or none, on every API but /health", async () => {
    const refused = await client("sk-kiln-third")
      .chat.completions.create({ model: TEXT_SLUG, messages: [{ role: "user", content: "Hi" }], max_tokens: 4 })
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(AuthenticationError);
    expect(refused).toMatchObject({ status: 401, code: "invalid_api_key" });
    for (const [path, init] of [
      ["/v1/models", {}],
      ["/api/tags", {}],
      ["/tokenize", { method: "POST", body: JSON.stringify({ content: "hi" }), headers: { "content-type": "application/json" } }],
      ["/metrics", {}],
    ] as const) {
      expect((await fetch(`${root}${path}`, init)).status, path).toBe(401);
    }
    const metrics = await fetch(`${root}/metrics`, { headers: { authorization: `Bearer ${KEYS[1]}` } });
    expect(metrics.status).toBe(200);
    const health = await fetch(`${root}/health`);
    expect(health.status).toBe(200);
    expect(await health.json()).not.toHaveProperty("warnings");
    expect(server.stderr()).not.toContain("WARNING");
  });
});
