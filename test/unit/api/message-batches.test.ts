/**
 * Anthropic's Message Batches API on a fake model, through the app: a batch of inline requests run
 * through POST /v1/messages (each result the message that route answers, a bad request's its error
 * in Anthropic's shape), the batch object's counts and times, its results as JSON Lines at its
 * `results_url`, cancelling (canceled results), deleting (its files too), listing by pages both ways,
 * errors in Anthropic's shape, and the two batch APIs not seeing each other's batches.
 */
import { describe, expect, it } from "vitest";
import { AUTH, fakeApp, fakeModel, SLUG, word } from "./fake-model.js";

type App = Awaited<ReturnType<typeof fakeApp>>["app"];

const HELLO = [word("Hello"), word(" world"), word("!")];
const params = (over: Record<string, unknown> = {}) => ({ model: SLUG, max_tokens: 50, messages: [{ role: "user", content: "hi" }], ...over });

async function create(app: App, requests: unknown[]) {
  return app.inject({ method: "POST", url: "/v1/messages/batches", payload: { requests }, headers: AUTH });
}

async function ended(app: App, id: string): Promise<any> {
  for (let i = 0; i < 400; i++) {
    const batch = (await app.inject({ method: "GET", url: `/v1/messages/batches/${id}`, headers: AUTH })).json();
    if (batch.processing_status === "ended") return batch;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`message batch ${id} did not end`);
}

async function results(app: App, url: string): Promise<any[]> {
  const res = await app.inject({ method: "GET", url: new URL(url).pathname, headers: AUTH });
  expect(res.statusCode).toBe(200);
  return res.body
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));
}

describe("Message Batches API", () => {
  it("runs each request through /v1/messages and answers the batch and its results in Anthropic's shapes", async () => {
    const { app } = await fakeApp({ fake: fakeModel({ script: HELLO }) });
    const res = await create(app, [
      { custom_id: "good-1", params: params() },
      { custom_id: "bad", params: params({ max_tokens: 0 }) },
      { custom_id: "good_2", params: params({ system: "Be brief." }) },
    ]);
    expect(res.statusCode).toBe(200);
    const created = res.json();
    expect(created).toMatchObject({
      id: expect.stringMatching(/^msgbatch_/),
      type: "message_batch",
      processing_status: "in_progress",
      request_counts: { processing: 3, succeeded: 0, errored: 0, canceled: 0, expired: 0 },
      ended_at: null,
      archived_at: null,
      cancel_initiated_at: null,
      results_url: null,
    });
    expect(Date.parse(created.expires_at) - Date.parse(created.created_at)).toBe(24 * 3600 * 1000);

    const batch = await ended(app, created.id);
    expect(batch.request_counts).toEqual({ processing: 0, succeeded: 2, errored: 1, canceled: 0, expired: 0 });
    expect(Date.parse(batch.ended_at)).toBeGreaterThanOrEqual(Date.parse(batch.created_at));
    expect(batch.results_url).toBe(`http://localhost:80/v1/messages/batches/${created.id}/results`);

    const byId = new Map((await results(app, batch.results_url)).map((r) => [r.custom_id, r.result]));
    expect([...byId.keys()].sort()).toEqual(["bad", "good-1", "good_2"]);
    // Each result is what POST /v1/messages answers the same request.
    const alone = (await app.inject({ method: "POST", url: "/v1/messages", payload: params(), headers: AUTH })).json();
    expect(byId.get("good-1")).toEqual({ type: "succeeded", message: { ...alone, id: expect.stringMatching(/^msg_/) } });
    expect(byId.get("good-1").message.content).toEqual([{ type: "text", text: "Hello world!" }]);
    const error = (await app.inject({ method: "POST", url: "/v1/messages", payload: params({ max_tokens: 0 }), headers: AUTH })).json();
    expect(error.type).toBe("error");
    expect(byId.get("bad")).toEqual({ type: "errored", error });
  });

  it("refuses a malformed batch whole, in Anthropic's error shape, naming the request", async () => {
    const { app } = await fakeApp();
    const cases: Array<[unknown[], string]> = [
      [[], "requests"],
      [
        [
          { custom_id: "a", params: params() },
          { custom_id: "a", params: params() },
        ],
        "requests[1].custom_id",
      ],
      [[{ custom_id: "has space", params: params() }], "requests[0].custom_id"],
      [[{ custom_id: "a".repeat(65), params: params() }], "requests[0].custom_id"],
      [[{ custom_id: "a", params: params({ stream: true }) }], "requests[0].params.stream"],
      [[{ custom_id: "a" }], "requests[0].params"],
    ];
    for (const [requests, where] of cases) {
      const res = await create(app, requests);
      expect(res.statusCode, where).toBe(400);
      expect(res.json().type).toBe("error");
      expect(res.json().error.type).toBe("invalid_request_error");
      expect(res.json().error.message, where).toContain(`'${where}'`);
    }
    for (const [method, url] of [
      ["GET", "/v1/messages/batches/msgbatch_nope"],
      ["POST", "/v1/messages/batches/msgbatch_nope/cancel"],
      ["DELETE", "/v1/messages/batches/msgbatch_nope"],
      ["GET", "/v1/messages/batches/msgbatch_nope/results"],
    ] as const) {
      const res = await app.inject({ method, url, headers: AUTH });
      expect(res.statusCode, url).toBe(404);
      expect(res.json()).toEqual({ type: "error", error: { type: "not_found_error", message: "No such Message Batch: msgbatch_nope" } });
    }
  });

  it("cancels: the requests it never sent are canceled; results and deletion wait for its end, and deletion takes its files", async () => {
    const { app } = await fakeApp({ fake: fakeModel({ script: HELLO, tokenDelayMs: 20 }), batchConcurrency: 1 });
    const created = (
      await create(
        app,
        Array.from({ length: 6 }, (_, i) => ({ custom_id: `r${i}`, params: params() })),
      )
    ).json();
    for (const [method, url] of [
      ["GET", `/v1/messages/batches/${created.id}/results`],
      ["DELETE", `/v1/messages/batches/${created.id}`],
    ] as const) {
      const early = await app.inject({ method, url, headers: AUTH });
      expect(early.statusCode, url).toBe(400);
      expect(early.json().error).toMatchObject({ type: "invalid_request_error", message: expect.stringContaining("still processing") });
    }
    const cancelling = (await app.inject({ method: "POST", url: `/v1/messages/batches/${created.id}/cancel`, headers: AUTH })).json();
    expect(cancelling.processing_status).toBe("canceling");
    expect(cancelling.cancel_initiated_at).not.toBeNull();
    const batch = await ended(app, created.id);
    const { succeeded, canceled } = batch.request_counts;
    expect(succeeded).toBeLessThan(6);
    expect(batch.request_counts).toEqual({ processing: 0, succeeded, errored: 0, canceled: 6 - succeeded, expired: 0 });
    const types = (await results(app, batch.results_url)).map((r) => r.result.type);
    expect(types.filter((t) => t === "canceled")).toHaveLength(canceled);
    expect(types.filter((t) => t === "succeeded")).toHaveLength(succeeded);

    const files = (await app.inject({ method: "GET", url: "/v1/files", headers: AUTH })).json().data;
    expect(files.length).toBeGreaterThanOrEqual(2);
    const deleted = await app.inject({ method: "DELETE", url: `/v1/messages/batches/${created.id}`, headers: AUTH });
    expect(deleted.json()).toEqual({ id: created.id, type: "message_batch_deleted" });
    expect((await app.inject({ method: "GET", url: `/v1/messages/batches/${created.id}`, headers: AUTH })).statusCode).toBe(404);
    expect((await app.inject({ method: "GET", url: "/v1/files", headers: AUTH })).json().data).toEqual([]);
  });

  it("lists a key's message batches newest first, by pages after and before a batch, apart from the Batch API's", async () => {
    const { app } = await fakeApp({ fake: fakeModel({ script: HELLO }) });
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await create(app, [{ custom_id: "a", params: params() }])).json().id);
    const list = async (query: string) => (await app.inject({ method: "GET", url: `/v1/messages/batches${query}`, headers: AUTH })).json();
    const first = await list("?limit=2");
    expect(first).toMatchObject({ has_more: true, first_id: ids[2], last_id: ids[1] });
    expect(first.data.map((b: any) => b.type)).toEqual(["message_batch", "message_batch"]);
    expect((await list(`?limit=2&after_id=${ids[1]}`)).data.map((b: any) => b.id)).toEqual([ids[0]]);
    const before = await list(`?limit=1&before_id=${ids[0]}`);
    expect(before.data.map((b: any) => b.id)).toEqual([ids[1]]);
    expect(before.has_more).toBe(true);
    expect((await list(`?before_id=${ids[0]}`)).data.map((b: any) => b.id)).toEqual([ids[2], ids[1]]);
    // The Batch API's list and routes know nothing of them, nor these of its batches.
    expect((await app.inject({ method: "GET", url: "/v1/batches", headers: AUTH })).json().data).toEqual([]);
    expect((await app.inject({ method: "GET", url: `/v1/batches/${ids[0]}`, headers: AUTH })).statusCode).toBe(404);
    for (const id of ids) await ended(app, id);
  });
});
