/**
 * Cloud mode as a fleet, all real: Postgres (keys, ledger, reservations), Redis (limit counters),
 * three `kiln serve --cloud` replicas of the embedded model, and nginx in front of them. Checks that
 * a limit holds for the fleet, that the ledger's totals equal what clients got (plus the
 * reservation of a request whose replica was killed), that revoked and expired keys fail on every
 * replica, that a database dump holds no usable key, and that what clients store is the fleet's: a
 * response continued on another replica, a batch whose replica is killed finished by another.
 */
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { promisify } from "node:util";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getModel } from "../../../src/catalogue/catalogue.js";
import { costNanoUsd, priceOf, scaledPrice } from "../../../src/cloud/money.js";
import { compiledArtifact, TEXT_SLUG } from "../../support/model.js";
import { startFleet, type CloudSettings, type RunningFleet } from "../../support/servers/fleet.js";
import { postgresBinary, startPostgres, type RunningPostgres } from "../../support/servers/postgres.js";
import { startRedis, type RunningRedis } from "../../support/servers/redis.js";

const run = promisify(execFile);
/** Seconds of silence after which a replica is taken for dead and its reservations charged (short, for the test). */
const ORPHAN_TIMEOUT_S = 3;

let postgres: RunningPostgres;
let redis: RunningRedis;
let fleet: RunningFleet;
let cloud: CloudSettings;
let stopIds: number[];

beforeAll(async () => {
  stopIds = (await compiledArtifact()).manifest.stopTokenIds;
  [postgres, redis] = await Promise.all([startPostgres(), startRedis()]);
  cloud = { databaseUrl: postgres.url, limitsUrl: redis.url, keySecret: randomBytes(32).toString("hex") };
  fleet = await startFleet({
    replicas: 3,
    slug: TEXT_SLUG,
    cloud,
    serveArgs: ["--threads", "1", "--max-running", "4", "--kv-memory-mb", "64", "--orphan-timeout", String(ORPHAN_TIMEOUT_S)],
  });
}, 300_000);

afterAll(async () => {
  await fleet?.stop();
  await redis?.stop();
  await postgres?.stop();
});

// ── helpers ───────────────────────────────────────────────────────────────────────────────────

async function kiln(args: string[]): Promise<string> {
  const { stdout } = await run(process.execPath, ["bin/kiln.mjs", ...args, "--database", cloud.databaseUrl], {
    env: { ...process.env, KILN_KEY_SECRET: cloud.keySecret },
  });
  return stdout;
}

async function createKey(name: string, flags: string[] = []): Promise<{ id: string; key: string }> {
  return JSON.parse(await kiln(["keys", "create", "--name", name, ...flags, "--json"])) as { id: string; key: string };
}

const replicaUrl = (i: number) => `http://127.0.0.1:${fleet.replicas[i].port}`;

function chat(base: string, key: string, body: Record<string, unknown>, signal?: AbortSignal): Promise<Response> {
  return fetch(`${base}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
    body: JSON.stringify({ model: TEXT_SLUG, temperature: 0, ...body }),
    signal,
  });
}

interface StreamResult {
  id: string;
  /** Content chunks received (one token each). */
  received: number;
  usage: { prompt_tokens: number; completion_tokens: number } | null;
  /** How the stream ended: "done" ([DONE] seen), "aborted" (by us), or "broken" (the connection failed). */
  end: "done" | "aborted" | "broken";
}

/**
 * A streamed chat completion; `onChunk` sees the count of content chunks so far and may abort
 * (return "abort") or act (kill a replica). End-of-generation tokens are banned so the answer runs
 * to `max_tokens` unless cut.
 */
async function stream(base: string, key: string, maxTokens: number, onChunk?: (received: number) => "abort" | void): Promise<StreamResult> {
  const controller = new AbortController();
  const result: StreamResult = { id: "", received: 0, usage: null, end: "broken" };
  const logitBias = Object.fromEntries(stopIds.map((id) => [String(id), -100]));
  try {
    const res = await chat(
      base,
      key,
      {
        messages: [{ role: "user", content: "Tell me a long story about a dragon." }],
        max_tokens: maxTokens,
        stream: true,
        stream_options: { include_usage: true },
        logit_bias: logitBias,
      },
      controller.signal,
    );
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return result;
      buffer += decoder.decode(value, { stream: true });
      let end: number;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const data = buffer.slice(0, end).replace(/^data: /, "");
        buffer = buffer.slice(end + 2);
        if (data === "[DONE]") {
          result.end = "done";
          continue;
        }
        const chunk = JSON.parse(data);
        result.id ||= chunk.id;
        if (chunk.usage) result.usage = chunk.usage;
        if (chunk.choices?.[0]?.delta?.content) {
          result.received++;
          if (onChunk?.(result.received) === "abort") {
            result.end = "aborted";
            controller.abort();
            return result;
          }
        }
      }
    }
  } catch (error) {
    if (result.end !== "aborted") result.end = "broken";
    if (!result.id) throw error;
    return result;
  }
}

interface LedgerRow {
  request_id: string;
  prompt_tokens: string;
  completion_tokens: string;
  cost_nano_usd: string;
  settled_from: string;
}

async function ledgerRows(keyId: string): Promise<LedgerRow[]> {
  const client = new pg.Client(cloud.databaseUrl);
  await client.connect();
  try {
    return (
      await client.query<LedgerRow>("SELECT request_id, prompt_tokens, completion_tokens, cost_nano_usd, settled_from FROM usage_ledger WHERE key_id = $1", [
        keyId,
      ])
    ).rows;
  } finally {
    await client.end();
  }
}

/** The documented rule, from the catalogue's USD prices: ceil((prompt × in + completion × out) / 1e6) nano-USD per request. */
function expectedCostNanoUsd(promptTokens: number, completionTokens: number): bigint {
  const { inputUsdPerMillionTokens = 0, outputUsdPerMillionTokens = 0 } = getModel(TEXT_SLUG).prices;
  const product =
    BigInt(promptTokens) * BigInt(Math.round(inputUsdPerMillionTokens * 1e9)) + BigInt(completionTokens) * BigInt(Math.round(outputUsdPerMillionTokens * 1e9));
  return (product + 999_999n) / 1_000_000n;
}

async function until<T>(what: string, timeoutMs: number, probe: () => Promise<T | null>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== null) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

const modelsStatus = async (base: string, key: string) => (await fetch(`${base}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).status;

// ── the checks ────────────────────────────────────────────────────────────────────────────────

describe("cloud mode as a fleet of three replicas behind nginx", () => {
  it("gives a key limited to N requests per minute exactly N successes across the fleet", async () => {
    const { key } = await createKey("rpm", ["--rpm", "5"]);
    // Twelve requests round-robin over three replicas: per-replica counting would admit all twelve.
    const answers = await Promise.all(Array.from({ length: 12 }, () => chat(fleet.url, key, { messages: [{ role: "user", content: "Hi" }], max_tokens: 1 })));
    const ok = answers.filter((r) => r.status === 200);
    const limited = answers.filter((r) => r.status === 429);
    expect(ok).toHaveLength(5);
    expect(limited).toHaveLength(7);
    for (const r of limited) {
      expect(Number(r.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      expect(r.headers.get("x-ratelimit-limit-requests")).toBe("5");
      expect(r.headers.get("x-ratelimit-remaining-requests")).toBe("0");
      // A duration as formatDuration writes it: "20ms", "59.5s", or "1m0s" for a whole minute.
      expect(r.headers.get("x-ratelimit-reset-requests")).toMatch(/^(\d+ms|(\d+m)?\d+(\.\d+)?s)$/);
      expect(((await r.json()) as { error: unknown }).error).toMatchObject({ code: "rate_limit_exceeded" });
    }
    for (const r of ok) expect(r.headers.get("x-ratelimit-limit-requests")).toBe("5");
  });

  it("refuses revoked and expired keys on every replica within seconds", async () => {
    const expiresAt = Date.now() + 8_000;
    const [revoked, expiring] = await Promise.all([createKey("to-revoke"), createKey("to-expire", ["--expires", new Date(expiresAt).toISOString()])]);
    for (let i = 0; i < 3; i++) {
      expect(await modelsStatus(replicaUrl(i), revoked.key)).toBe(200);
      expect(await modelsStatus(replicaUrl(i), expiring.key)).toBe(200);
    }
    await kiln(["keys", "revoke", revoked.id]);
    const revokedAt = Date.now();
    await until("the revocation on every replica", 5_000, async () => {
      const statuses = await Promise.all([0, 1, 2].map((i) => modelsStatus(replicaUrl(i), revoked.key)));
      return statuses.every((s) => s === 401) ? true : null;
    });
    expect(Date.now() - revokedAt).toBeLessThan(5_000);
    await until("the expiry on every replica", expiresAt + 3_000 - Date.now(), async () => {
      const statuses = await Promise.all([0, 1, 2].map((i) => modelsStatus(replicaUrl(i), expiring.key)));
      return statuses.every((s) => s === 401) ? true : null;
    });
    const res = await chat(fleet.url, expiring.key, { messages: [{ role: "user", content: "Hi" }], max_tokens: 1 });
    expect(res.status).toBe(401);
    expect(((await res.json()) as { error: unknown }).error).toMatchObject({ code: "invalid_api_key" });
  });

  it("keeps no usable key in a dump of the database", async () => {
    const live = await createKey("dumped");
    expect(await modelsStatus(fleet.url, live.key)).toBe(200);
    const { stdout: dump } = await run(postgresBinary("pg_dump"), ["-h", "127.0.0.1", "-p", String(postgres.port), "-U", "postgres", "kiln"], {
      maxBuffer: 64 << 20,
    });
    expect(dump).toContain(live.id); // the dump is of the right database
    expect(dump).not.toContain(live.key);
    // Every token-like string of the dump, tried as a key: none works.
    const candidates = [...new Set(dump.match(/[A-Za-z0-9_\-]{12,}/g) ?? [])];
    expect(candidates.length).toBeGreaterThan(10);
    const statuses: number[] = [];
    for (let i = 0; i < candidates.length; i += 16) {
      statuses.push(...(await Promise.all(candidates.slice(i, i + 16).map((c) => modelsStatus(replicaUrl(0), c)))));
    }
    expect(statuses.filter((s) => s !== 401)).toEqual([]);
  });

  it("continues a stored response on another replica, and reads it back on a third", async () => {
    const { key } = await createKey("responses");
    const respond = async (base: string, body: Record<string, unknown>) => {
      const res = await fetch(`${base}/v1/responses`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
        body: JSON.stringify({ model: TEXT_SLUG, max_output_tokens: 4, temperature: 0, ...body }),
      });
      expect(res.status).toBe(200);
      return (await res.json()) as { id: string };
    };
    const first = await respond(replicaUrl(0), { input: "My name is Ada." });
    const second = await respond(replicaUrl(1), { input: "What is my name?", previous_response_id: first.id });
    const items = (await (
      await fetch(`${replicaUrl(2)}/v1/responses/${second.id}/input_items?order=asc`, { headers: { authorization: `Bearer ${key}` } })
    ).json()) as {
      data: Array<{ type: string; content?: Array<{ text?: string }> }>;
    };
    expect(items.data.filter((i) => i.type === "message").map((i) => i.content?.[0]?.text)[0]).toBe("My name is Ada.");
    expect(items.data.length).toBe(3);
  });

  it("leaves a ledger equal to what clients received, plus the reservation of a request whose replica was killed", async () => {
    const { id: keyId, key } = await createKey("ledger");
    // Concurrent streams through nginx: three run to max_tokens, two are aborted by their clients.
    const [completed, aborted] = await Promise.all([
      Promise.all([0, 1, 2].map(() => stream(fleet.url, key, 6))),
      Promise.all([0, 1].map(() => stream(fleet.url, key, 120, (n) => (n === 3 ? "abort" : undefined)))),
    ]);
    for (const s of completed) expect(s).toMatchObject({ end: "done", received: 6, usage: { completion_tokens: 6 } });
    for (const s of aborted) expect(s).toMatchObject({ end: "aborted", received: 3 });
    const promptTokens = completed[0].usage!.prompt_tokens;

    // A stream on replica 2 directly, killed (SIGKILL) mid-answer: no ledger row from it, ever.
    const victim = fleet.replicas[2];
    const killed = await stream(replicaUrl(2), key, 100, (n) => void (n === 2 && victim.process.kill("SIGKILL")));
    expect(killed.end).toBe("broken");
    expect(killed.usage).toBeNull();
    // nginx routes around the dead replica.
    const after = await stream(fleet.url, key, 4);
    expect(after).toMatchObject({ end: "done", usage: { completion_tokens: 4 } });

    // A surviving replica charges the killed request from its reservation once the dead one has been silent long enough.
    const rows = await until("the killed request's reservation charged", 30_000, async () => {
      const found = await ledgerRows(keyId);
      return found.length === 7 ? found : null;
    });
    const row = (id: string) => rows.find((r) => r.request_id === id)!;
    for (const s of [...completed, after]) {
      expect(row(s.id)).toMatchObject({
        settled_from: "completed",
        prompt_tokens: String(s.usage!.prompt_tokens),
        completion_tokens: String(s.usage!.completion_tokens),
      });
    }
    for (const s of aborted) {
      const billed = Number(row(s.id).completion_tokens);
      expect(row(s.id).settled_from).toBe("cancelled");
      // Tokens already on their way when the client hung up are billed too, but the generation stopped.
      expect(billed).toBeGreaterThanOrEqual(s.received);
      expect(billed).toBeLessThan(120);
    }
    expect(row(killed.id)).toMatchObject({ settled_from: "reservation", prompt_tokens: String(promptTokens), completion_tokens: "100" });

    // Every row costs exactly the documented rule; the totals of `kiln usage` are their exact sum.
    let total = 0n;
    for (const r of rows) {
      const cost = expectedCostNanoUsd(Number(r.prompt_tokens), Number(r.completion_tokens));
      expect(BigInt(r.cost_nano_usd)).toBe(cost);
      total += cost;
    }
    const fromClients =
      [...completed, after].reduce((sum, s) => sum + expectedCostNanoUsd(s.usage!.prompt_tokens, s.usage!.completion_tokens), 0n) +
      aborted.reduce((sum, s) => sum + expectedCostNanoUsd(promptTokens, Number(row(s.id).completion_tokens)), 0n) +
      expectedCostNanoUsd(promptTokens, 100);
    expect(total).toBe(fromClients);
    const [line] = JSON.parse(await kiln(["usage", "--key", keyId, "--json"])) as { requests: number; completionTokens: number; costNanoUsd: string }[];
    expect(line).toMatchObject({ requests: 7, costNanoUsd: String(total) });
    expect(line.completionTokens).toBe(rows.reduce((sum, r) => sum + Number(r.completion_tokens), 0));
  });

  it("shares a key's files and batches across the fleet, and another replica finishes a batch whose replica was killed", async () => {
    const { id: keyId, key } = await createKey("batches");
    const headers = { authorization: `Bearer ${key}` };
    const count = 16;
    const lines = Array.from({ length: count }, (_, i) =>
      JSON.stringify({
        custom_id: `c${i}`,
        method: "POST",
        url: "/v1/completions",
        body: { model: TEXT_SLUG, prompt: `Count from ${i}:`, max_tokens: 16, temperature: 0, ignore_eos: true },
      }),
    );
    // Uploaded through replica 1, the batch made on replica 0 (which runs it), read through replica 1 (replica 2 was killed above).
    const form = new FormData();
    form.append("purpose", "batch");
    form.append("file", new Blob([lines.join("\n")]), "requests.jsonl");
    const file = (await (await fetch(`${replicaUrl(1)}/v1/files`, { method: "POST", headers, body: form })).json()) as { id: string };
    const created = await fetch(`${replicaUrl(0)}/v1/batches`, {
      method: "POST",
      headers: { ...headers, "content-type": "application/json" },
      body: JSON.stringify({ input_file_id: file.id, endpoint: "/v1/completions", completion_window: "24h" }),
    });
    expect(created.status).toBe(200);
    const { id } = (await created.json()) as { id: string };
    const batchAt = async (base: string) => (await (await fetch(`${base}/v1/batches/${id}`, { headers })).json()) as any;
    const before = await until("two requests of the batch answered", 60_000, async () => {
      const now = await batchAt(replicaUrl(1));
      return now.request_counts.completed >= 2 ? now : null;
    });
    fleet.replicas[0].process.kill("SIGKILL");
    expect(before.status).toBe("in_progress");
    expect(before.request_counts.completed).toBeLessThan(count);
    const batch = await until("the batch finished by another replica", 90_000, async () => {
      const now = await batchAt(replicaUrl(1));
      return ["completed", "failed", "cancelled", "expired"].includes(now.status) ? now : null;
    });
    expect(batch.status).toBe("completed");
    expect(batch.request_counts).toEqual({ total: count, completed: count, failed: 0 });
    const output = (await (await fetch(`${replicaUrl(1)}/v1/files/${batch.output_file_id}/content`, { headers })).text())
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as { custom_id: string; response: { body: { usage: { completion_tokens: number } } } });
    expect(output.map((l) => l.custom_id)).toEqual(Array.from({ length: count }, (_, i) => `c${i}`));
    expect(output.every((l) => l.response.body.usage.completion_tokens === 16)).toBe(true);
    // Every request the batch answered is charged at the batch price (half the model's, by default).
    const halfPrice = scaledPrice(priceOf(getModel(TEXT_SLUG)), 0.5);
    const answered = (await ledgerRows(keyId)).filter((r) => r.settled_from === "completed");
    expect(answered.length).toBeGreaterThanOrEqual(count);
    for (const r of answered) {
      const cost = costNanoUsd(halfPrice, { promptTokens: Number(r.prompt_tokens), completionTokens: Number(r.completion_tokens), audioMs: 0 });
      expect(Number(r.cost_nano_usd)).toBe(cost);
      expect(BigInt(cost)).toBeLessThan(expectedCostNanoUsd(Number(r.prompt_tokens), Number(r.completion_tokens)));
    }
    // Another key finds none of it.
    const other = { authorization: `Bearer ${(await createKey("batches-other")).key}` };
    for (const url of [`/v1/batches/${id}`, `/v1/files/${file.id}`]) expect((await fetch(`${replicaUrl(1)}${url}`, { headers: other })).status, url).toBe(404);
  });
});
