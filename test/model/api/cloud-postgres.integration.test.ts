/**
 * Cloud mode on the shared stores, one replica at a time: `kiln serve --cloud` with its keys, ledger
 * and reservations in a real Postgres and its limit counters in a real Redis. A replica killed in
 * the middle of a stream leaves its reservation, which the next replica charges once the first has
 * been silent past --orphan-timeout (no free tokens, no double charge); with Postgres gone, a key
 * the replica has not just checked gets a clear 503, never a free pass.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import pg from "pg";
import keys from "../../../src/cli/commands/keys.js";
import usage from "../../../src/cli/commands/usage.js";
import { capture } from "../../unit/cli/capture.js";
import { compiledArtifact, TEXT_SLUG } from "../../support/model.js";
import { type RunningServer, startServer, stopServer } from "../../support/server.js";
import { startPostgres, type RunningPostgres } from "../../support/servers/postgres.js";
import { startRedis, type RunningRedis } from "../../support/servers/redis.js";

let postgres: RunningPostgres;
let redis: RunningRedis;
const servers: RunningServer[] = [];
const savedSecret = process.env.KILN_KEY_SECRET;

async function kiln(command: typeof keys, argv: string[]): Promise<string> {
  const { io, out } = capture();
  const code = await command.run([...argv, "--database", postgres.url], io);
  if (code !== 0) throw new Error(`kiln ${command.name} ${argv.join(" ")} exited ${code}: ${out.stderr}`);
  return out.stdout;
}

const replica = async () => {
  const server = await startServer(TEXT_SLUG, ["--cloud", "--database", postgres.url, "--limits", redis.url, "--orphan-timeout", "2"]);
  servers.push(server);
  return server;
};

function chat(server: RunningServer, key: string, body: Record<string, unknown>) {
  return fetch(`${server.baseURL}/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: TEXT_SLUG, messages: [{ role: "user", content: "Tell me a long story about a lighthouse." }], temperature: 0, ...body }),
  });
}

async function query<T extends pg.QueryResultRow>(sql: string, args: unknown[] = []): Promise<T[]> {
  const client = new pg.Client({ connectionString: postgres.url });
  await client.connect();
  try {
    return (await client.query<T>(sql, args)).rows;
  } finally {
    await client.end();
  }
}

beforeAll(async () => {
  await compiledArtifact();
  [postgres, redis] = await Promise.all([startPostgres(), startRedis()]);
  process.env.KILN_KEY_SECRET = "fleet-secret-for-this-test-0123456789";
}, 240_000);

afterAll(async () => {
  for (const s of servers) await stopServer(s);
  await redis?.stop();
  await postgres?.stop();
  if (savedSecret === undefined) delete process.env.KILN_KEY_SECRET;
  else process.env.KILN_KEY_SECRET = savedSecret;
});

describe("a replica that dies mid-request", () => {
  it("leaves a reservation that the next replica charges once, at the reserved amount", async () => {
    const { id, key } = JSON.parse(await kiln(keys, ["create", "--name", "fleet", "--rpm", "100", "--json"]));
    const first = await replica();
    const ok = await chat(first, key, { max_tokens: 4 });
    expect(ok.status).toBe(200);
    expect(ok.headers.get("x-ratelimit-limit-requests")).toBe("100");

    // A long stream; once it is flowing, the replica is killed (no drain, no ledger row).
    const stream = await chat(first, key, { max_tokens: 300, stream: true });
    const reader = stream.body!.getReader();
    await reader.read();
    const [reservation] = await query<{ request_id: string; completion_tokens: string; nano_usd: string }>(
      "SELECT * FROM usage_reservations WHERE key_id = $1",
      [id],
    );
    expect(Number(reservation.completion_tokens)).toBe(300);
    first.process.kill("SIGKILL");
    await new Promise((r) => first.process.once("exit", r));

    const second = await replica();
    let charged: Array<{ settled_from: string; cost_nano_usd: string; completion_tokens: string }> = [];
    for (const end = Date.now() + 15_000; charged.length === 0 && Date.now() < end; await new Promise((r) => setTimeout(r, 200))) {
      charged = await query("SELECT * FROM usage_ledger WHERE request_id = $1", [reservation.request_id]);
    }
    expect(charged).toHaveLength(1);
    expect(charged[0]).toMatchObject({ settled_from: "reservation", completion_tokens: "300", cost_nano_usd: reservation.nano_usd });
    expect(await query("SELECT * FROM usage_reservations")).toEqual([]);

    // kiln usage sums both rows (the completed one and the charged reservation) in exact integers.
    const [line] = JSON.parse(await kiln(usage, ["--key", id, "--json"]));
    const rows = await query<{ cost_nano_usd: string }>("SELECT cost_nano_usd FROM usage_ledger WHERE key_id = $1", [id]);
    expect(line).toMatchObject({ requests: 2, costNanoUsd: String(rows.reduce((s, r) => s + BigInt(r.cost_nano_usd), 0n)) });
    expect((await chat(second, key, { max_tokens: 2 })).status).toBe(200);
  });
});

describe("Postgres unreachable", () => {
  it("fails closed: a clear 503 with retry-after for a key not just checked", async () => {
    const { key } = JSON.parse(await kiln(keys, ["create", "--name", "late", "--json"]));
    const server = servers.at(-1)!;
    await postgres.stop();
    const res = await chat(server, key, { max_tokens: 2 });
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toBe("5");
    const body = (await res.json()) as { error: { type: string; code: string; message: string } };
    expect(body.error).toMatchObject({ type: "server_error", code: "overloaded" });
    expect(body.error.message).toContain("cannot check API keys");
  });
});
