/**
 * A local server shared on a network, as an operator starts it: the real `kiln serve` process on
 * every interface, over HTTPS (--ssl-keyfile, --ssl-certfile: a self-signed certificate made by
 * openssl), with its keys in $KILN_API_KEY (comma-separated), driven by the official `openai`
 * client. A client with one of the keys is answered, streams included; one with another key, or
 * none, gets the client's AuthenticationError, on the OpenAI routes and on Ollama's, llama.cpp's
 * and the metrics; /health stays open and names no exposure, since keys are checked.
 */
import { request as httpRequest } from "node:http";
import OpenAI, { AuthenticationError } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TEXT_SLUG } from "../../support/model.js";
import { type RunningServer, startServer, stopServer } from "../../support/server.js";
import { fetchTrusting, selfSignedCertificate } from "../../support/tls.js";

const KEYS = ["sk-kiln-first", "sk-kiln-second"];

let server: RunningServer;
/** The server on its loopback address: it listens on every interface. */
let root: string;
let trusting: typeof fetch;

beforeAll(async () => {
  const tls = selfSignedCertificate();
  trusting = fetchTrusting(tls.cert);
  server = await startServer(TEXT_SLUG, ["--max-running", "2", "--host", "0.0.0.0", "--ssl-keyfile", tls.keyfile, "--ssl-certfile", tls.certfile], {
    env: { KILN_API_KEY: KEYS.join(",") },
  });
  root = server.root.replace(/\/\/[^:/]+:/, "//127.0.0.1:");
}, 180_000);

afterAll(async () => {
  expect(await stopServer(server)).toBe(0);
});

const client = (apiKey: string) => new OpenAI({ baseURL: `${root}/v1`, apiKey, maxRetries: 0, fetch: trusting });

describe("kiln serve over HTTPS with $KILN_API_KEY", () => {
  it("serves HTTPS only, and answers a client that sends either key, streams included", async () => {
    expect(root).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    const answer = await client(KEYS[0]).chat.completions.create({ model: TEXT_SLUG, messages: [{ role: "user", content: "Hi" }], max_tokens: 4 });
    expect(answer.choices[0].message.content!.length).toBeGreaterThan(0);
    const stream = await client(KEYS[1]).chat.completions.create({
      model: TEXT_SLUG,
      messages: [{ role: "user", content: "Count to ten." }],
      max_tokens: 12,
      stream: true,
    });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? "";
    expect(text.length).toBeGreaterThan(0);
    // Plain HTTP on the same port gets no answer from the API.
    const plain = await new Promise<string>((resolve) => {
      const req = httpRequest(`${root.replace("https:", "http:")}/v1/models`, (res) => resolve(`status ${res.statusCode}`));
      req.on("error", (err) => resolve(err.message));
      req.end();
    });
    expect(plain).not.toBe("status 200");
    // Neither does a client that does not trust the certificate.
    await expect(fetch(`${root}/health`)).rejects.toThrow();
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
      expect((await trusting(`${root}${path}`, init)).status, path).toBe(401);
    }
    const metrics = await trusting(`${root}/metrics`, { headers: { authorization: `Bearer ${KEYS[1]}` } });
    expect(metrics.status).toBe(200);
    const health = await trusting(`${root}/health`);
    expect(health.status).toBe(200);
    expect(await health.json()).not.toHaveProperty("warnings");
    expect(server.stderr()).not.toContain("WARNING");
  });
});
