/**
 * Cloud mode end to end, one replica: the real `kiln serve --cloud` over the real model, real HTTP,
 * and a real SQLite database file; keys made and usage read with the real `kiln keys` and
 * `kiln usage`. Limits answer 429 in the API's shape with retry-after and the rate-limit headers;
 * a streamed answer and a stream the client abandons are charged for the tokens produced; the
 * ledger's totals equal, to the nano-dollar, what the clients were told they used; a revoked key
 * stops working within seconds.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { costNanoUsd, priceOf } from "../../../src/cloud/money.js";
import { getModel } from "../../../src/catalogue/catalogue.js";
import { openDatabase } from "../../../src/catalogue/db.js";
import keys from "../../../src/cli/commands/keys.js";
import usage from "../../../src/cli/commands/usage.js";
import { capture } from "../../unit/cli/capture.js";
import { compiledArtifact, TEXT_SLUG } from "../../support/model.js";
import { type RunningServer, startServer, stopServer } from "../../support/server.js";

const PRICE = priceOf(getModel(TEXT_SLUG));

let dir: string;
let database: string;
let server: RunningServer;
const savedEnv = { secret: process.env.KILN_KEY_SECRET, spool: process.env.KILN_USAGE_SPOOL };

async function kiln(command: typeof keys, argv: string[]): Promise<string> {
  const { io, out } = capture();
  const code = await command.run([...argv, "--database", database], io);
  if (code !== 0) throw new Error(`kiln ${command.name} ${argv.join(" ")} exited ${code}: ${out.stderr}`);
  return out.stdout;
}

async function createKey(name: string, ...limits: string[]): Promise<{ id: string; key: string }> {
  return JSON.parse(await kiln(keys, ["create", "--name", name, ...limits, "--json"]));
}

function chat(key: string, body: Record<string, unknown>, signal?: AbortSignal) {
  return fetch(`${server.baseURL}/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: TEXT_SLUG, messages: [{ role: "user", content: "Count from one to fifty in words." }], temperature: 0, ...body }),
    signal,
  });
}

/** The ledger rows of a key, read from the database file the server writes. */
function ledgerOf(keyId: string): Array<{ request_id: string; prompt_tokens: number; completion_tokens: number; cost_nano_usd: number; settled_from: string }> {
  const db = openDatabase({ path: database, seed: false });
  try {
    return db.prepare("SELECT * FROM usage WHERE key_id = ? ORDER BY created_at").all(keyId) as any[];
  } finally {
    db.close();
  }
}

async function until<T>(what: () => T | undefined | false, timeoutMs = 10_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = what();
    if (v) return v;
    if (Date.now() > end) throw new Error("timed out waiting");
    await new Promise((r) => setTimeout(r, 100));
  }
}

beforeAll(async () => {
  await compiledArtifact();
  dir = mkdtempSync(join(tmpdir(), "kiln-cloud-e2e-"));
  database = join(dir, "cloud.sqlite");
  process.env.KILN_KEY_SECRET = "e2e-secret-of-this-test-0123456789";
  process.env.KILN_USAGE_SPOOL = join(dir, "spool.jsonl");
  server = await startServer(TEXT_SLUG, ["--cloud", "--database", database]);
}, 240_000);

afterAll(async () => {
  await stopServer(server);
  process.env.KILN_KEY_SECRET = savedEnv.secret;
  process.env.KILN_USAGE_SPOOL = savedEnv.spool;
  if (savedEnv.secret === undefined) delete process.env.KILN_KEY_SECRET;
  if (savedEnv.spool === undefined) delete process.env.KILN_USAGE_SPOOL;
  rmSync(dir, { recursive: true, force: true });
});

describe("limits", () => {
  it("answers 429 rate_limit_exceeded past the key's requests per minute, with retry-after and the six headers", async () => {
    const { key } = await createKey("rpm", "--rpm", "2", "--tpm", "100000");
    for (let i = 0; i < 2; i++) {
      const ok = await chat(key, { max_tokens: 2 });
      expect(ok.status).toBe(200);
      expect(ok.headers.get("x-ratelimit-limit-requests")).toBe("2");
      expect(ok.headers.get("x-ratelimit-remaining-requests")).toBe(String(1 - i));
      expect(ok.headers.get("x-ratelimit-limit-tokens")).toBe("100000");
      expect(Number(ok.headers.get("x-ratelimit-remaining-tokens"))).toBeLessThan(100_000);
      expect(ok.headers.get("x-ratelimit-reset-requests")).toMatch(/^(\d+ms|[\d.]+s|\d+m[\d.]+s)$/);
      expect(ok.headers.get("x-ratelimit-reset-tokens")).toMatch(/^(\d+ms|[\d.]+s|\d+m[\d.]+s)$/);
    }
    const refused = await chat(key, { max_tokens: 2 });
    expect(refused.status).toBe(429);
    expect((await refused.json()) as object).toEqual({ error: { message: expect.any(String), type: "requests", param: null, code: "rate_limit_exceeded" } });
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(refused.headers.get("x-ratelimit-remaining-requests")).toBe("0");
  });

  it("reserves the model's remaining context when max_tokens is absent: 429 tokens for a key with a small tokens-per-minute", async () => {
    const { key } = await createKey("tpm", "--tpm", "500");
    const refused = await chat(key, {});
    expect(refused.status).toBe(429);
    expect(((await refused.json()) as any).error).toMatchObject({ type: "tokens", code: "rate_limit_exceeded" });
    expect((await chat(key, { max_tokens: 8 })).status).toBe(200);
  });
});

describe("the ledger", () => {
  it("charges whole, streamed and abandoned requests for the tokens produced; kiln usage equals what clients were told, to the nano-dollar", async () => {
    const { id, key } = await createKey("billing");
    const told: Array<{ prompt_tokens: number; completion_tokens: number }> = [];

    const whole = await chat(key, { max_tokens: 12 });
    told.push(((await whole.json()) as any).usage);

    const streamed = await chat(key, { max_tokens: 16, stream: true, stream_options: { include_usage: true } });
    const events = (await streamed.text())
      .split("\n\n")
      .filter((b) => b.startsWith("data: {"))
      .map((b) => JSON.parse(b.slice(6)));
    told.push(events.at(-1).usage);

    // A stream abandoned after a few chunks: the client never learns its usage; the ledger has it.
    const controller = new AbortController();
    const abandoned = await chat(key, { max_tokens: 200, stream: true }, controller.signal);
    const reader = abandoned.body!.getReader();
    let received = 0;
    for (let text = ""; received < 4; ) {
      const { value } = await reader.read();
      text += new TextDecoder().decode(value);
      received = (text.match(/"content":"[^"]/g) ?? []).length;
    }
    controller.abort();

    const rows = await until(() => {
      const r = ledgerOf(id);
      return r.length === 3 && r;
    });
    const cut = rows.find((r) => r.settled_from === "cancelled")!;
    expect(cut).toBeDefined();
    expect(cut.completion_tokens).toBeGreaterThanOrEqual(received);
    expect(cut.completion_tokens).toBeLessThan(200);
    expect(cut.cost_nano_usd).toBe(costNanoUsd(PRICE, { promptTokens: cut.prompt_tokens, completionTokens: cut.completion_tokens, audioMs: 0 }));
    expect(rows.filter((r) => r.settled_from === "completed")).toHaveLength(2);

    // What the clients were told, plus the abandoned stream's tokens, priced by the one rule, row by row.
    const everything = [
      ...told.map((u) => ({ promptTokens: u.prompt_tokens, completionTokens: u.completion_tokens })),
      { promptTokens: cut.prompt_tokens, completionTokens: cut.completion_tokens },
    ];
    const expectedCost = everything.reduce((sum, u) => sum + costNanoUsd(PRICE, { ...u, audioMs: 0 }), 0);
    const [line] = JSON.parse(await kiln(usage, ["--key", id, "--json"]));
    expect(line).toEqual({
      group: id,
      requests: 3,
      promptTokens: everything.reduce((s, u) => s + u.promptTokens, 0),
      completionTokens: everything.reduce((s, u) => s + u.completionTokens, 0),
      audioMs: 0,
      costNanoUsd: String(expectedCost),
      costUsd: expect.stringMatching(/^0\.\d{9}$/),
    });
    expect(expectedCost).toBeGreaterThan(0);
  });
});

describe("keys", () => {
  it("a revoked key gets 401 within seconds; a key never shown to the server gets 401", async () => {
    const { id, key } = await createKey("short-lived");
    expect((await chat(key, { max_tokens: 1 })).status).toBe(200);
    await kiln(keys, ["revoke", id]);
    const started = Date.now();
    let status = 200;
    while (status === 200 && Date.now() - started < 5_000) {
      status = (await chat(key, { max_tokens: 1 })).status;
      if (status === 200) await new Promise((r) => setTimeout(r, 200));
    }
    expect(status).toBe(401);
    expect(Date.now() - started).toBeLessThan(5_000);
    expect((await chat("kiln-not-a-real-key-at-all", { max_tokens: 1 })).status).toBe(401);
  });
});
