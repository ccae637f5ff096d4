/**
 * The usage spool over an asynchronous ledger (Postgres's): a write that rejects after `record`
 * returned goes to the spool, is settled once the ledger takes writes again, and `close` waits for
 * writes in flight. The ledger here is a fake that rejects on demand (one module under test).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { SpooledUsageRecorder, UsageSpool } from "../../../src/cloud/usage-spool.js";
import type { LedgerEntry, UsageLedger } from "../../../src/cloud/usage.js";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function asyncLedger() {
  const rows = new Map<string, LedgerEntry>();
  const ledger: UsageLedger & { down: boolean; rows: Map<string, LedgerEntry> } = {
    down: false,
    rows,
    async write(entries) {
      await new Promise((r) => setTimeout(r, 5));
      if (ledger.down) throw new Error("connect ECONNREFUSED 127.0.0.1:5432");
      for (const e of entries) if (!rows.has(e.requestId)) rows.set(e.requestId, e);
    },
  };
  return ledger;
}

const quiet = { info: () => undefined, warn: () => undefined, error: () => undefined };
const usage = (requestId: string) => ({
  requestId,
  keyId: "key_a",
  slug: "m",
  promptTokens: 3,
  completionTokens: 4,
  price: { inputNanoUsdPerMTok: 1, outputNanoUsdPerMTok: 2, nanoUsdPerAudioMinute: 0 },
  costNanoUsd: 1,
  replicaId: "r1",
  settledFrom: "cancelled" as const,
});

describe("the spool over an asynchronous ledger", () => {
  it("spools a rejected write with its price and cost, settles it once when the ledger is back, and waits at close", async () => {
    const dir = mkdtempSync(join(tmpdir(), "kiln-spool-async-"));
    dirs.push(dir);
    const spoolPath = join(dir, "spool.jsonl");
    const ledger = asyncLedger();
    const recorder = new SpooledUsageRecorder({ ledger, spoolPath, log: quiet, settleIntervalMs: 0 });
    ledger.down = true;
    recorder.record(usage("req-1"));
    await new Promise((r) => setTimeout(r, 30));
    expect(ledger.rows.size).toBe(0);
    const spooled = new UsageSpool(spoolPath).read().entries;
    expect(spooled).toMatchObject([{ requestId: "req-1", price: { outputNanoUsdPerMTok: 2 }, costNanoUsd: 1, replicaId: "r1", settledFrom: "cancelled" }]);
    expect(recorder.admits()).toBe(true); // the spool keeps it: still serving

    recorder.record(usage("req-2")); // straight to the spool while the ledger is down
    ledger.down = false;
    recorder.settle();
    recorder.record(usage("req-3"));
    await recorder.close();
    expect([...ledger.rows.keys()].sort()).toEqual(["req-1", "req-2", "req-3"]);
    expect(new UsageSpool(spoolPath).hasEntries()).toBe(false);
  });
});
