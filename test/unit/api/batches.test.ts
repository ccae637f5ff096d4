/**
 * The Files and Batch APIs on a fake model, through the app: an upload and its listing, a batch
 * whose requests go through the app's own routes (each answer the one the route gives, bad ones to
 * the error file, usage summed), input files that cannot run, cancelling, resuming an unfinished
 * batch in a new app over the same database, and one cloud key never seeing another's files or
 * batches while its batch runs as that key.
 */
import { describe, expect, it } from "vitest";
import { drainApp } from "../../../src/api/app.js";
import { Lifecycle } from "../../../src/api/context.js";
import { openDatabase } from "../../../src/catalogue/db.js";
import { SqliteBatchStore } from "../../../src/catalogue/stored-batches.js";
import { SqliteFileStore } from "../../../src/catalogue/stored-files.js";
import { sqliteKeyStore } from "../cloud/keys-support.js";
import { AUTH, fakeApp, fakeModel, SLUG } from "./fake-model.js";

type App = Awaited<ReturnType<typeof fakeApp>>["app"];

const BOUNDARY = "kilnboundary";

/** A multipart body of `fields` and one file part. */
function form(fields: Record<string, string>, file: { name: string; content: string } | null) {
  const parts = Object.entries(fields).map(([k, v]) => `--${BOUNDARY}\r\ncontent-disposition: form-data; name="${k}"\r\n\r\n${v}\r\n`);
  if (file)
    parts.push(
      `--${BOUNDARY}\r\ncontent-disposition: form-data; name="file"; filename="${file.name}"\r\ncontent-type: application/jsonl\r\n\r\n${file.content}\r\n`,
    );
  return { payload: parts.join("") + `--${BOUNDARY}--\r\n`, headers: { "content-type": `multipart/form-data; boundary=${BOUNDARY}` } };
}

const chatLine = (id: string, body: Record<string, unknown> = {}) =>
  JSON.stringify({ custom_id: id, method: "POST", url: "/v1/chat/completions", body: { model: SLUG, messages: [{ role: "user", content: "hi" }], ...body } });

async function upload(app: App, content: string, purpose = "batch", headers: Record<string, string> = AUTH) {
  const f = form({ purpose }, { name: "in.jsonl", content });
  return app.inject({ method: "POST", url: "/v1/files", payload: f.payload, headers: { ...headers, ...f.headers } });
}

async function createBatch(app: App, inputFileId: string, headers: Record<string, string> = AUTH, over: Record<string, unknown> = {}) {
  return app.inject({
    method: "POST",
    url: "/v1/batches",
    payload: { input_file_id: inputFileId, endpoint: "/v1/chat/completions", completion_window: "24h", ...over },
    headers,
  });
}

const FINAL = ["completed", "failed", "cancelled", "expired"];

async function settled(app: App, id: string, headers: Record<string, string> = AUTH): Promise<any> {
  for (let i = 0; i < 400; i++) {
    const batch = (await app.inject({ method: "GET", url: `/v1/batches/${id}`, headers })).json();
    if (FINAL.includes(batch.status)) return batch;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`batch ${id} did not finish`);
}

async function fileLines(app: App, id: string, headers: Record<string, string> = AUTH): Promise<any[]> {
  const res = await app.inject({ method: "GET", url: `/v1/files/${id}/content`, headers });
  expect(res.statusCode).toBe(200);
  return res.body
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));
}

describe("Files API", () => {
  it("stores an upload and answers it, its listing, its bytes and its deletion in the reference's shapes", async () => {
    const { app } = await fakeApp();
    const res = await upload(app, chatLine("a"));
    expect(res.statusCode).toBe(200);
    const file = res.json();
    expect(file).toMatchObject({
      object: "file",
      bytes: Buffer.byteLength(chatLine("a")),
      filename: "in.jsonl",
      purpose: "batch",
      status: "processed",
      expires_at: null,
    });
    expect(file.id).toMatch(/^file-/);
    expect((await app.inject({ method: "GET", url: `/v1/files/${file.id}`, headers: AUTH })).json()).toEqual(file);
    expect((await app.inject({ method: "GET", url: `/v1/files/${file.id}/content`, headers: AUTH })).body).toBe(chatLine("a"));
    const second = (await upload(app, "x", "user_data")).json();
    const list = (await app.inject({ method: "GET", url: "/v1/files", headers: AUTH })).json();
    expect(list).toMatchObject({ object: "list", has_more: false, first_id: second.id, last_id: file.id });
    expect(list.data.map((f: any) => f.id)).toEqual([second.id, file.id]);
    const page = (await app.inject({ method: "GET", url: `/v1/files?limit=1&order=asc`, headers: AUTH })).json();
    expect(page.data.map((f: any) => f.id)).toEqual([file.id]);
    expect(page.has_more).toBe(true);
    const next = (await app.inject({ method: "GET", url: `/v1/files?limit=1&order=asc&after=${file.id}`, headers: AUTH })).json();
    expect(next.data.map((f: any) => f.id)).toEqual([second.id]);
    expect((await app.inject({ method: "GET", url: "/v1/files?purpose=batch", headers: AUTH })).json().data.map((f: any) => f.id)).toEqual([file.id]);
    expect((await app.inject({ method: "DELETE", url: `/v1/files/${file.id}`, headers: AUTH })).json()).toEqual({ id: file.id, object: "file", deleted: true });
    const gone = await app.inject({ method: "GET", url: `/v1/files/${file.id}`, headers: AUTH });
    expect(gone.statusCode).toBe(404);
    expect(gone.json().error.message).toContain(file.id);
  });

  it("refuses an upload without its purpose, with an unknown purpose, without a file, or empty, naming the field", async () => {
    const { app } = await fakeApp();
    const cases: Array<[ReturnType<typeof form>, string]> = [
      [form({}, { name: "a.jsonl", content: "x" }), "purpose"],
      [form({ purpose: "nonsense" }, { name: "a.jsonl", content: "x" }), "purpose"],
      [form({ purpose: "batch" }, null), "file"],
      [form({ purpose: "batch" }, { name: "a.jsonl", content: "" }), "file"],
      [
        form({ purpose: "batch", "expires_after[anchor]": "created_at", "expires_after[seconds]": "60" }, { name: "a.jsonl", content: "x" }),
        "expires_after.seconds",
      ],
    ];
    for (const [f, param] of cases) {
      const res = await app.inject({ method: "POST", url: "/v1/files", payload: f.payload, headers: { ...AUTH, ...f.headers } });
      expect(res.statusCode, param).toBe(400);
      expect(res.json().error.param).toBe(param);
    }
    const json = await app.inject({ method: "POST", url: "/v1/files", payload: { purpose: "batch" }, headers: AUTH });
    expect(json.statusCode).toBe(400);
    expect(json.json().error.message).toContain("multipart/form-data");
  });

  it("takes expires_after as the official clients send it, and the file is gone past it", async () => {
    let now = Date.now();
    const db = openDatabase({ path: ":memory:", seed: false });
    const { app } = await fakeApp({ files: new SqliteFileStore(db, () => now), batches: new SqliteBatchStore(db) });
    const f = form({ purpose: "batch", "expires_after[anchor]": "created_at", "expires_after[seconds]": "3600" }, { name: "a.jsonl", content: "x" });
    const file = (await app.inject({ method: "POST", url: "/v1/files", payload: f.payload, headers: { ...AUTH, ...f.headers } })).json();
    expect(file.expires_at).toBe(file.created_at + 3600);
    now += 3601_000;
    expect((await app.inject({ method: "GET", url: `/v1/files/${file.id}`, headers: AUTH })).statusCode).toBe(404);
  });
});

describe("Batch API", () => {
  it("answers each line as its route does, bad ones to the error file, and sums usage", async () => {
    const { app } = await fakeApp();
    const lines = [chatLine("one"), chatLine("two", { max_tokens: 2 }), chatLine("bad", { messages: [] }), chatLine("three", { n: 2 })];
    const file = (await upload(app, lines.join("\n") + "\n")).json();
    const created = await createBatch(app, file.id, AUTH, { metadata: { job: "nightly" } });
    expect(created.statusCode).toBe(200);
    expect(created.json()).toMatchObject({
      object: "batch",
      endpoint: "/v1/chat/completions",
      input_file_id: file.id,
      completion_window: "24h",
      metadata: { job: "nightly" },
    });
    const batch = await settled(app, created.json().id);
    expect(batch.status).toBe("completed");
    expect(batch.request_counts).toEqual({ total: 4, completed: 3, failed: 1 });
    for (const field of ["in_progress_at", "finalizing_at", "completed_at"]) expect(batch[field], field).toBeGreaterThanOrEqual(batch.created_at);
    expect(batch.expires_at).toBe(batch.created_at + 86_400);
    expect(batch.model).toBe(SLUG);

    const output = await fileLines(app, batch.output_file_id);
    expect(output.map((l) => l.custom_id)).toEqual(["one", "two", "three"]);
    const direct = await app.inject({ method: "POST", url: "/v1/chat/completions", payload: JSON.parse(lines[1]).body, headers: AUTH });
    expect(output[1].response.status_code).toBe(200);
    expect(output[1].response.request_id).toMatch(/^req_/);
    expect(output[1].response.body.choices).toEqual(direct.json().choices);
    expect(output[2].response.body.choices).toHaveLength(2);
    const usage = output.map((l) => l.response.body.usage);
    expect(batch.usage).toMatchObject({
      input_tokens: usage.reduce((s, u) => s + u.prompt_tokens, 0),
      output_tokens: usage.reduce((s, u) => s + u.completion_tokens, 0),
    });
    expect(batch.usage.total_tokens).toBe(batch.usage.input_tokens + batch.usage.output_tokens);

    const errors = await fileLines(app, batch.error_file_id);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ custom_id: "bad", error: null, response: { status_code: 400, body: { error: { param: "messages" } } } });
    const metrics = (await app.inject({ method: "GET", url: "/metrics" })).body;
    expect(metrics).toContain('kiln_batch_requests_total{endpoint="/v1/chat/completions",outcome="completed"} 3');
    expect(metrics).toContain('kiln_batch_requests_total{endpoint="/v1/chat/completions",outcome="failed"} 1');
    const outputFile = (await app.inject({ method: "GET", url: `/v1/files/${batch.output_file_id}`, headers: AUTH })).json();
    expect(outputFile).toMatchObject({ purpose: "batch_output", filename: `${batch.id}_output.jsonl` });
  });

  it("fails a batch whose input file has bad lines, listing each with its line, and runs none of it", async () => {
    const { app, fake } = await fakeApp();
    const content = [
      chatLine("a"),
      "not json",
      JSON.stringify({ method: "POST", url: "/v1/chat/completions", body: {} }),
      chatLine("a"),
      JSON.stringify({ custom_id: "c", method: "GET", url: "/v1/chat/completions", body: {} }),
      JSON.stringify({ custom_id: "d", method: "POST", url: "/v1/completions", body: {} }),
      chatLine("e", { stream: true }),
    ].join("\n");
    const batch = await settled(app, (await createBatch(app, (await upload(app, content)).json().id)).json().id);
    expect(batch.status).toBe("failed");
    expect(batch.failed_at).toBeGreaterThanOrEqual(batch.created_at);
    expect(batch.errors.object).toBe("list");
    expect(batch.errors.data.map((e: any) => [e.line, e.code, e.param])).toEqual([
      [2, "invalid_json_line", null],
      [3, "missing_required_parameter", "custom_id"],
      [4, "duplicate_custom_id", "custom_id"],
      [5, "invalid_value", "method"],
      [6, "mismatched_endpoint", "url"],
      [7, "invalid_value", "body.stream"],
    ]);
    expect(batch.output_file_id).toBeNull();
    expect(fake.backend.calls).toHaveLength(0);
  });

  it("refuses a batch of an unknown file, of a file not uploaded for batches, or of a bad endpoint or window, naming the field", async () => {
    const { app } = await fakeApp();
    const other = (await upload(app, chatLine("a"), "user_data")).json();
    const good = (await upload(app, chatLine("a"))).json();
    const cases: Array<[string, Record<string, unknown>, number, string | null]> = [
      ["file-nope", {}, 404, null],
      [other.id, {}, 400, "input_file_id"],
      [good.id, { endpoint: "/v1/audio/transcriptions" }, 400, "endpoint"],
      [good.id, { completion_window: "1h" }, 400, "completion_window"],
    ];
    for (const [id, over, status, param] of cases) {
      const res = await createBatch(app, id, AUTH, over);
      expect(res.statusCode, JSON.stringify(over)).toBe(status);
      expect(res.json().error.param).toBe(param);
    }
    expect((await app.inject({ method: "GET", url: "/v1/batches/batch_nope", headers: AUTH })).statusCode).toBe(404);
    expect((await app.inject({ method: "POST", url: "/v1/batches/batch_nope/cancel", headers: AUTH })).statusCode).toBe(404);
  });

  it("cancels: no more lines start, the batch ends cancelled with what it answered, the rest in the error file", async () => {
    const { app } = await fakeApp({ fake: fakeModel({ tokenDelayMs: 20 }), batchConcurrency: 1 });
    const lines = Array.from({ length: 6 }, (_, i) => chatLine(`r${i}`));
    const created = (await createBatch(app, (await upload(app, lines.join("\n"))).json().id)).json();
    const cancelled = await app.inject({ method: "POST", url: `/v1/batches/${created.id}/cancel`, headers: AUTH });
    expect(cancelled.json()).toMatchObject({ status: "cancelling" });
    const batch = await settled(app, created.id);
    expect(batch.status).toBe("cancelled");
    expect(batch.cancelled_at).toBeGreaterThanOrEqual(batch.cancelling_at);
    // The reference's object: kiln's own count of what was never sent stays inside.
    expect(batch).not.toHaveProperty("unsent_requests");
    const answered = batch.request_counts.completed;
    expect(answered).toBeLessThan(6);
    const errors = await fileLines(app, batch.error_file_id);
    expect(errors).toHaveLength(6 - answered);
    expect(errors[0]).toMatchObject({ response: null, error: { code: "batch_cancelled" } });
    // Cancelling an ended batch answers it as it is.
    expect((await app.inject({ method: "POST", url: `/v1/batches/${created.id}/cancel`, headers: AUTH })).json().status).toBe("cancelled");
  });

  it("a draining server leaves its batch unfinished; a new app over the same database resumes it and answers every line once", async () => {
    const db = openDatabase({ path: ":memory:", seed: false });
    const stores = () => ({ files: new SqliteFileStore(db), batches: new SqliteBatchStore(db) });
    const lifecycle = new Lifecycle();
    const first = await fakeApp({ fake: fakeModel({ tokenDelayMs: 5 }), batchConcurrency: 2, lifecycle, ...stores() });
    const lines = Array.from({ length: 12 }, (_, i) => chatLine(`r${i}`));
    const created = (await createBatch(first.app, (await upload(first.app, lines.join("\n"))).json().id)).json();
    while ((await first.app.inject({ method: "GET", url: `/v1/batches/${created.id}`, headers: AUTH })).json().request_counts.completed < 2) {
      await new Promise((r) => setTimeout(r, 5));
    }
    await drainApp(first.app, lifecycle);
    const left = (await new SqliteBatchStore(db).get(created.id, null))!;
    expect(left.status).toBe("in_progress");
    const done = (left.request_counts as { completed: number }).completed;
    expect(done).toBeGreaterThanOrEqual(2);
    expect(done).toBeLessThan(12);

    const second = await fakeApp(stores());
    await second.app.ready();
    const batch = await settled(second.app, created.id);
    expect(batch.status).toBe("completed");
    expect(batch.request_counts).toEqual({ total: 12, completed: 12, failed: 0 });
    const output = await fileLines(second.app, batch.output_file_id);
    expect(output.map((l) => l.custom_id)).toEqual(lines.map((_, i) => `r${i}`));
    expect(second.fake.backend.calls.length).toBeGreaterThan(0);
  });

  it("a batch's requests wait behind clients' own requests for a slot; vLLM's priority orders those", async () => {
    const { app } = await fakeApp({ fake: fakeModel({ tokenDelayMs: 15, maxRunning: 1 }), batchConcurrency: 4 });
    const lines = Array.from({ length: 4 }, (_, i) => chatLine(`r${i}`));
    const created = (await createBatch(app, (await upload(app, lines.join("\n"))).json().id)).json();
    while ((await app.inject({ method: "GET", url: `/v1/batches/${created.id}`, headers: AUTH })).json().status !== "in_progress") {
      await new Promise((r) => setTimeout(r, 2));
    }
    await new Promise((r) => setTimeout(r, 20));
    const finished: string[] = [];
    const chat = (name: string, over: Record<string, unknown> = {}) =>
      app
        .inject({ method: "POST", url: "/v1/chat/completions", headers: AUTH, payload: { model: SLUG, messages: [{ role: "user", content: "hi" }], ...over } })
        .then(async (res) => {
          expect(res.statusCode).toBe(200);
          finished.push(
            `${name} after ${(await app.inject({ method: "GET", url: `/v1/batches/${created.id}`, headers: AUTH })).json().request_counts.completed}`,
          );
        });
    const late = chat("late", { priority: 2 });
    await new Promise((r) => setTimeout(r, 5));
    await Promise.all([late, chat("client")]);
    // The client's request ran ahead of the batch's waiting lines (the one running then, maybe the next, were done); one of priority 2 behind them all.
    expect(finished).toEqual([expect.stringMatching(/^client after [12]$/), "late after 4"]);
    expect((await settled(app, created.id)).request_counts).toEqual({ total: 4, completed: 4, failed: 0 });
  });

  it("lists a key's batches newest first, by pages", async () => {
    const { app } = await fakeApp();
    const file = (await upload(app, chatLine("a"))).json();
    const ids = [];
    for (let i = 0; i < 3; i++) ids.push((await createBatch(app, file.id)).json().id);
    for (const id of ids) await settled(app, id);
    const page = (await app.inject({ method: "GET", url: "/v1/batches?limit=2", headers: AUTH })).json();
    expect(page).toMatchObject({ object: "list", has_more: true, first_id: ids[2], last_id: ids[1] });
    const rest = (await app.inject({ method: "GET", url: `/v1/batches?limit=2&after=${ids[1]}`, headers: AUTH })).json();
    expect(rest.data.map((b: any) => b.id)).toEqual([ids[0]]);
    expect(rest.has_more).toBe(false);
  });

  it("in cloud mode a batch runs as its key (its model list holds) and another key sees none of its files or batches", async () => {
    const db = openDatabase({ path: ":memory:" });
    const keys = sqliteKeyStore(db);
    const a = (await keys.create("a", { models: ["someone-else"] })).key;
    const b = (await keys.create("b")).key;
    const as = (key: string) => ({ authorization: `Bearer ${key}` });
    const { app } = await fakeApp({ auth: { mode: "cloud", keys }, files: new SqliteFileStore(db), batches: new SqliteBatchStore(db) });
    const file = (await upload(app, chatLine("x"), "batch", as(a))).json();
    expect((await createBatch(app, file.id, as(b))).statusCode).toBe(404);
    const created = (await createBatch(app, file.id, as(a))).json();
    const batch = await settled(app, created.id, as(a));
    expect(batch.request_counts).toEqual({ total: 1, completed: 0, failed: 1 });
    const [line] = await fileLines(app, batch.error_file_id, as(a));
    expect(line.response).toMatchObject({ status_code: 403, body: { error: { code: "model_not_allowed" } } });
    for (const url of [`/v1/batches/${created.id}`, `/v1/files/${file.id}`, `/v1/files/${batch.error_file_id}/content`]) {
      expect((await app.inject({ method: "GET", url, headers: as(b) })).statusCode, url).toBe(404);
    }
    expect((await app.inject({ method: "GET", url: "/v1/batches", headers: as(b) })).json().data).toEqual([]);
    expect((await app.inject({ method: "GET", url: "/v1/files", headers: as(b) })).json().data).toEqual([]);
    expect((await app.inject({ method: "GET", url: "/v1/batches", headers: { authorization: "Bearer kiln-internal-guess" } })).statusCode).toBe(401);
  });
});
