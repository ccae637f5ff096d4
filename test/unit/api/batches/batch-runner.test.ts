/**
 * The batch runner with a fake endpoint: it keeps at most `concurrency` requests running, asks
 * again after an answer that names a wait (and records a final one at once), and ends a batch
 * past its completion window as `expired`, the requests it never sent in the error file.
 */
import { describe, expect, it } from "vitest";
import { BatchRunner, COMPLETION_WINDOW_SECONDS, type LineAnswer, type SendLine } from "../../../../src/api/batches/batch-runner.js";
import { openDatabase } from "../../../../src/catalogue/db.js";
import { BatchStore, type BatchObject } from "../../../../src/catalogue/stored-batches.js";
import { FileStore } from "../../../../src/catalogue/stored-files.js";

const ENDPOINT = "/v1/completions";

function setup(send: SendLine, options: { concurrency?: number; now?: () => number } = {}) {
  const db = openDatabase({ path: ":memory:", seed: false });
  const files = new FileStore(db, options.now);
  const runner = new BatchRunner(new BatchStore(db), files, send, options);
  const input = (count: number) => {
    const content = Array.from({ length: count }, (_, i) =>
      JSON.stringify({ custom_id: `r${i}`, method: "POST", url: ENDPOINT, body: { prompt: `p${i}` } }),
    ).join("\n");
    files.save(
      { id: "file-in", keyId: null, createdAt: 0, expiresAt: null, filename: "in.jsonl", purpose: "batch", bytes: content.length },
      Buffer.from(content),
    );
    return runner.create({ endpoint: ENDPOINT, inputFileId: "file-in", metadata: null, outputExpiresAfter: null }, { id: null });
  };
  const settled = async (batch: BatchObject) => {
    for (let i = 0; i < 500 && !["completed", "failed", "cancelled", "expired"].includes(runner.get(batch.id, null)!.status); i++)
      await new Promise((r) => setTimeout(r, 5));
    return runner.get(batch.id, null)!;
  };
  const lines = (id: unknown) =>
    files
      .content(String(id), null)!
      .toString()
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
  return { runner, input, settled, lines };
}

const ok = (body: Record<string, unknown>): LineAnswer => ({
  status: 200,
  requestId: "req_1",
  body: { echo: body, usage: { prompt_tokens: 3, completion_tokens: 2 } },
});

describe("BatchRunner", () => {
  it("keeps at most `concurrency` requests running", async () => {
    let running = 0;
    let most = 0;
    const send: SendLine = async (_endpoint, body) => {
      most = Math.max(most, ++running);
      await new Promise((r) => setTimeout(r, 3));
      running--;
      return ok(body);
    };
    const { input, settled } = setup(send, { concurrency: 3 });
    const batch = await settled(input(12));
    expect(batch.request_counts).toEqual({ total: 12, completed: 12, failed: 0 });
    expect(batch.usage).toMatchObject({ input_tokens: 36, output_tokens: 24, total_tokens: 60 });
    expect(most).toBe(3);
  });

  it("asks again after an answer naming a wait, and records a final failure at once", async () => {
    const asked = new Map<string, number>();
    const send: SendLine = async (_endpoint, body) => {
      const n = (asked.get(String(body.prompt)) ?? 0) + 1;
      asked.set(String(body.prompt), n);
      if (body.prompt === "p0" && n < 3) return { status: 503, requestId: "", body: { error: { code: "overloaded" } }, retryAfter: 0.01 };
      if (body.prompt === "p1") return { status: 400, requestId: "req_x", body: { error: { param: "prompt" } } };
      return ok(body);
    };
    const { input, settled, lines } = setup(send);
    const batch = await settled(input(2));
    expect(asked.get("p0")).toBe(3);
    expect(asked.get("p1")).toBe(1);
    expect(batch.request_counts).toEqual({ total: 2, completed: 1, failed: 1 });
    expect(lines(batch.output_file_id)[0]).toMatchObject({ custom_id: "r0", response: { status_code: 200 } });
    expect(lines(batch.error_file_id)[0]).toMatchObject({ custom_id: "r1", response: { status_code: 400, request_id: "req_x" } });
  });

  it("ends a batch past its completion window as expired, the requests it never sent in the error file", async () => {
    let now = Date.now();
    const send: SendLine = async (_endpoint, body) => {
      // The first answer takes longer than the window.
      now += (COMPLETION_WINDOW_SECONDS + 1) * 1000;
      return ok(body);
    };
    const { input, settled, lines } = setup(send, { concurrency: 1, now: () => now });
    const batch = await settled(input(3));
    expect(batch.status).toBe("expired");
    expect(batch.expired_at).toBeGreaterThan(Number(batch.expires_at));
    expect(batch.request_counts).toEqual({ total: 3, completed: 1, failed: 2 });
    expect(lines(batch.error_file_id).map((l) => [l.custom_id, l.error.code])).toEqual([
      ["r1", "batch_expired"],
      ["r2", "batch_expired"],
    ]);
  });

  it("answers a request the endpoint threw on as a 500 in the API's shape", async () => {
    const { input, settled, lines } = setup(async () => {
      throw new Error("boom");
    });
    const batch = await settled(input(1));
    expect(batch.request_counts).toEqual({ total: 1, completed: 0, failed: 1 });
    expect(lines(batch.error_file_id)[0].response).toMatchObject({ status_code: 500, body: { error: { type: "server_error" } } });
  });
});
