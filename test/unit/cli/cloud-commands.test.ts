/** `kiln keys` (limits, expiry, --json, --database) and `kiln usage`: argument handling and what they print, over a real SQLite file. */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { SqliteCloudStore } from "../../../src/cloud/store/sqlite-store.js";
import { openDatabase } from "../../../src/catalogue/db.js";
import keys, { keySpec } from "../../../src/cli/commands/keys.js";
import usage from "../../../src/cli/commands/usage.js";
import { UsageError } from "../../../src/cli/options.js";
import { capture } from "./capture.js";

const NOW = new Date("2030-01-01T00:00:00Z");

describe("keySpec", () => {
  it("turns the limits into integers: USD into nano-USD, exactly", () => {
    expect(keySpec({ rpm: 60, tpm: 10_000, maxConcurrent: 2, budgetUsdPerDay: "0.50", models: "smollm2-135m-instruct", expires: "2030-02-01" }, NOW)).toEqual({
      models: ["smollm2-135m-instruct"],
      limits: { requestsPerMinute: 60, tokensPerMinute: 10_000, maxConcurrent: 2, dailyBudgetNanoUsd: 500_000_000 },
      expiresAt: "2030-02-01T00:00:00.000Z",
      admin: false,
    });
    expect(keySpec({}, NOW)).toEqual({
      models: null,
      limits: { requestsPerMinute: null, tokensPerMinute: null, maxConcurrent: null, dailyBudgetNanoUsd: null },
      expiresAt: null,
      admin: false,
    });
    expect(keySpec({ admin: true }, NOW).admin).toBe(true);
    expect(keySpec({ budgetUsdPerDay: "0.000000001" }, NOW).limits?.dailyBudgetNanoUsd).toBe(1);
  });

  it("refuses a budget that is not an exact USD amount, and an expiry that is not a date or already past", () => {
    for (const budgetUsdPerDay of ["abc", "-1", "0.0000000001", "1e3", "99999999999"])
      expect(() => keySpec({ budgetUsdPerDay }, NOW), budgetUsdPerDay).toThrow(UsageError);
    for (const expires of ["tomorrow", "2029-12-31", "2030-13-01", "2030-02-01T00:00:00"]) expect(() => keySpec({ expires }, NOW), expires).toThrow(UsageError);
  });
});

describe("kiln keys and kiln usage on a database file", () => {
  let dir: string;
  let saved: string | undefined;
  beforeEach(() => {
    saved = process.env.KILN_HOME;
    dir = mkdtempSync(join(tmpdir(), "kiln-cloud-cli-"));
    process.env.KILN_HOME = join(dir, "home");
  });
  afterEach(() => {
    process.env.KILN_HOME = saved;
    rmSync(dir, { recursive: true, force: true });
  });

  it("create --json prints the key once with its record; list shows the prefix, limits and spend, never the key", async () => {
    const database = join(dir, "cloud.sqlite");
    const created = capture();
    expect(await keys.run(["create", "--name", "ci", "--rpm", "5", "--budget-usd-per-day", "1.25", "--database", database, "--json"], created.io)).toBe(0);
    const made = JSON.parse(created.out.stdout);
    expect(made).toMatchObject({
      id: expect.stringMatching(/^key_/),
      key: expect.stringMatching(/^kiln-/),
      name: "ci",
      limits: { requestsPerMinute: 5, dailyBudgetNanoUsd: 1_250_000_000, dailyBudgetUsd: "1.250000000" },
    });
    expect(made.prefix).toBe(made.key.slice(0, 9));

    // Two rows of usage, written as kiln serve would.
    const db = openDatabase({ path: database });
    const store = new SqliteCloudStore(db);
    const price = { inputNanoUsdPerMTok: 2_000_000, outputNanoUsdPerMTok: 4_000_000, nanoUsdPerAudioMinute: 0 };
    const at = new Date().toISOString();
    await store.writeLedger([
      {
        requestId: "r1",
        keyId: made.id,
        slug: "smollm2-135m-instruct",
        artifactId: null,
        promptTokens: 10,
        completionTokens: 5,
        audioMs: 0,
        price,
        costNanoUsd: 40,
        settledFrom: "completed",
        replicaId: "x",
        at,
      },
      {
        requestId: "r2",
        keyId: made.id,
        slug: "smollm2-135m-instruct",
        artifactId: null,
        promptTokens: 3,
        completionTokens: 1,
        audioMs: 0,
        price,
        costNanoUsd: 10,
        settledFrom: "cancelled",
        replicaId: "x",
        at,
      },
    ]);
    db.close();

    const listed = capture();
    expect(await keys.run(["list", "--database", database, "--json"], listed.io)).toBe(0);
    const [entry] = JSON.parse(listed.out.stdout);
    expect(entry).toMatchObject({ id: made.id, prefix: made.prefix, spentTodayNanoUsd: "50", spentTotalNanoUsd: "50", lastUsedAt: at });
    expect(listed.out.stdout).not.toContain(made.key);
    const table = capture();
    await keys.run(["list", "--database", database], table.io);
    expect(table.out.stdout).toContain(`${made.prefix}…`);
    expect(table.out.stdout).toContain("$0.000000050");

    const report = capture();
    expect(await usage.run(["--database", database, "--json", "--by", "model"], report.io)).toBe(0);
    expect(JSON.parse(report.out.stdout)).toEqual([
      { group: "smollm2-135m-instruct", requests: 2, promptTokens: 13, completionTokens: 6, audioMs: 0, costNanoUsd: "50", costUsd: "0.000000050" },
    ]);
    const text = capture();
    await usage.run(["--database", database, "--key", made.id], text.io);
    expect(text.out.stdout).toMatch(/TOTAL +2 +13 +6 +0 +0\.000000050/);
    const none = capture();
    await usage.run(["--database", database, "--json", "--since", "2999-01-01"], none.io);
    expect(JSON.parse(none.out.stdout)).toEqual([]);

    expect(await keys.run(["revoke", made.id, "--database", database], capture().io)).toBe(0);
    expect(await keys.run(["revoke", made.id, "--database", database], capture().io)).toBe(1);
  });

  it("usage refuses a bad --since and --by", async () => {
    for (const argv of [
      ["--since", "yesterday"],
      ["--by", "week"],
    ]) {
      const { io, out } = capture();
      expect(await usage.run(argv, io), argv.join(" ")).toBe(2);
      expect(out.stderr).toMatch(/^kiln usage: /);
    }
  });
});
