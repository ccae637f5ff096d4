/** API keys: a keyed hash (HMAC) in the database, compared in constant time; a dump of the table yields no usable key. */
import { describe, expect, it } from "vitest";
import { hashKey, KeyStore, sameHash } from "../../../src/cloud/keys/key-store.js";
import { SqliteCloudStore } from "../../../src/cloud/store/sqlite-store.js";
import { openDatabase } from "../../../src/catalogue/db.js";
import { fakeApp, SLUG } from "../api/fake-model.js";
import { TEST_KEY_SECRET } from "./keys-support.js";

function setup(options: { secret?: Buffer; cacheMs?: number; now?: () => number } = {}) {
  const db = openDatabase({ path: ":memory:" });
  const store = new SqliteCloudStore(db);
  const keys = new KeyStore(store, options.secret ?? TEST_KEY_SECRET, { cacheMs: options.cacheMs ?? 0, now: options.now });
  return { db, store, keys };
}

const chat = { model: SLUG, messages: [{ role: "user", content: "hi" }] };

describe("key hashing", () => {
  it("is HMAC-SHA256 with the secret: another secret gives another hash", () => {
    const a = hashKey("kiln-abc", Buffer.from("secret-one-0123456789"));
    expect(a).toMatch(/^[0-9a-f]{64}$/);
    expect(hashKey("kiln-abc", Buffer.from("secret-one-0123456789"))).toBe(a);
    expect(hashKey("kiln-abc", Buffer.from("secret-two-0123456789"))).not.toBe(a);
  });

  it("compares hashes whole (constant time), refusing different lengths and empty ones", () => {
    const h = hashKey("kiln-abc", TEST_KEY_SECRET);
    expect(sameHash(h, h)).toBe(true);
    expect(sameHash(h, h.slice(0, -2) + (h.endsWith("00") ? "01" : "00"))).toBe(false);
    expect(sameHash(h, h.slice(0, 32))).toBe(false);
    expect(sameHash("", "")).toBe(false);
  });
});

describe("a dump of the keys table", () => {
  it("holds no usable key: neither a stored hash nor a prefix authenticates, and the keys need the secret", async () => {
    const { db, store, keys } = setup();
    const { key } = await keys.create("victim");
    const rows = db.prepare("SELECT * FROM api_keys").all() as Array<Record<string, string>>;
    const dump = JSON.stringify(rows);
    expect(dump).not.toContain(key);
    const { app } = await fakeApp({ auth: { mode: "cloud", keys } });
    const call = (k: string) => app.inject({ method: "POST", url: "/v1/chat/completions", payload: chat, headers: { authorization: `Bearer ${k}` } });
    for (const row of rows) {
      for (const stolen of [row.key_hash, row.key_prefix, row.id]) expect((await call(stolen)).statusCode).toBe(401);
    }
    expect((await call(key)).statusCode).toBe(200);
    // The same database with another secret (an attacker's own server) accepts nothing.
    const elsewhere = new KeyStore(store, Buffer.from("an-attackers-guess-at-the-secret"), { cacheMs: 0 });
    expect(await elsewhere.verify(key)).toBeNull();
  });
});

describe("the key store", () => {
  it("keeps limits, a short prefix, and an expiry after which the key stops working", async () => {
    let now = Date.parse("2030-01-01T00:00:00Z");
    const { keys } = setup({ now: () => now });
    const { key, record } = await keys.create("limited", {
      limits: { requestsPerMinute: 5, dailyBudgetNanoUsd: 1_000 },
      expiresAt: "2030-01-02T00:00:00.000Z",
    });
    expect(record.prefix).toBe(key.slice(0, 9));
    expect(record.limits).toEqual({ requestsPerMinute: 5, tokensPerMinute: null, maxConcurrent: null, dailyBudgetNanoUsd: 1_000 });
    expect(await keys.verify(key)).toMatchObject({ id: record.id, limits: record.limits });
    now = Date.parse("2030-01-02T00:00:00Z");
    expect(await keys.verify(key)).toBeNull();
  });

  it("caches a verified key for at most cacheMs: a revocation made elsewhere shows once it runs out", async () => {
    let now = 1_000_000;
    const { store, keys } = setup({ cacheMs: 2_000, now: () => now });
    const { key, record } = await keys.create("cached");
    expect(await keys.verify(key)).not.toBeNull();
    // Another replica (another KeyStore on the same database) revokes it.
    await new KeyStore(store, TEST_KEY_SECRET).revoke(record.id);
    expect(await keys.verify(key)).not.toBeNull();
    now += 2_001;
    expect(await keys.verify(key)).toBeNull();
  });

  it("fails closed: a database that cannot be reached is a 503, not a request let through", async () => {
    const { db, keys } = setup();
    const { key } = await keys.create("k");
    const { app } = await fakeApp({ auth: { mode: "cloud", keys } });
    db.close();
    const res = await app.inject({ method: "POST", url: "/v1/chat/completions", payload: chat, headers: { authorization: `Bearer ${key}` } });
    expect(res.statusCode).toBe(503);
    expect(res.headers["retry-after"]).toBe("5");
    expect(res.json().error).toMatchObject({ type: "server_error", code: "overloaded" });
    expect(res.json().error.message).toContain("cannot check API keys");
  });
});
