import { describe, expect, it } from "vitest";
import { EngineClosedError, OverloadedError } from "../../../src/scheduler/errors.js";
import { SerialEngine } from "../../../src/scheduler/serial-engine.js";
import type { GenerationEvent, GenerationRequest, GenerationStream } from "../../../src/scheduler/types.js";
import { fakeBackend } from "./fake-backend.js";

const vocab = ["a", "b", "c", "S", "T", "O", "P", "!"];
const request = (over: Partial<GenerationRequest> = {}): GenerationRequest => ({ promptIds: [1], maxTokens: 100, sampling: {}, ...over });

async function collect(stream: GenerationStream) {
  const events: GenerationEvent[] = [];
  for await (const e of stream) events.push(e);
  const text = events.map((e) => (e.type === "delta" ? e.text : "")).join("");
  const finish = events.filter((e) => e.type === "finish");
  return { events, text, finish };
}

describe("SerialEngine", () => {
  it("streams token deltas then a finish event", async () => {
    const engine = new SerialEngine(fakeBackend({ vocab, script: [0, 1, 2] }), { name: "m" });
    const { events, text, finish } = await collect(engine.submit(request()));
    expect(text).toBe("abc");
    expect(events.filter((e) => e.type === "delta").map((e) => e.type === "delta" && e.completionTokens)).toEqual([1, 2, 3]);
    expect(finish).toMatchObject([{ type: "finish", choice: 0, reason: "stop", completionTokens: 3 }]);
  });

  it("ends with length at maxTokens", async () => {
    const engine = new SerialEngine(fakeBackend({ vocab, script: [0, 1, 2, 0, 1] }), { name: "m" });
    const { text, finish } = await collect(engine.submit(request({ maxTokens: 2 })));
    expect(text).toBe("ab");
    expect(finish[0]).toMatchObject({ reason: "length", completionTokens: 2 });
  });

  it("runs one sequence at a time, in arrival order", async () => {
    const backend = fakeBackend({ vocab, script: (prompt) => [prompt[0], prompt[0]], tokenDelayMs: 2 });
    const engine = new SerialEngine(backend, { name: "m" });
    const order: number[] = [];
    const runs = [0, 1, 2].map(async (i) => {
      for await (const e of engine.submit(request({ promptIds: [i] }))) if (e.type === "finish") order.push(i);
    });
    await Promise.all(runs);
    expect(backend.maxConcurrent).toBe(1);
    expect(order).toEqual([0, 1, 2]);
  });

  it("refuses requests beyond the waiting queue with OverloadedError", async () => {
    const engine = new SerialEngine(fakeBackend({ vocab, script: [0, 1], tokenDelayMs: 5 }), { name: "m", maxWaiting: 2 });
    const streams = [engine.submit(request()), engine.submit(request()), engine.submit(request())];
    expect(engine.load).toEqual({ waiting: 2, running: 1 });
    expect(() => engine.submit(request())).toThrow(OverloadedError);
    const results = await Promise.all(streams.map(collect));
    expect(results.map((r) => r.text)).toEqual(["ab", "ab", "ab"]);
    expect(engine.load).toEqual({ waiting: 0, running: 0 });
  });

  it("removes a waiting request whose signal aborts, without generating it", async () => {
    const backend = fakeBackend({ vocab, script: [0, 1, 2], tokenDelayMs: 5 });
    const engine = new SerialEngine(backend, { name: "m" });
    const first = collect(engine.submit(request()));
    const controller = new AbortController();
    const second = collect(engine.submit(request(), controller.signal));
    expect(engine.load.waiting).toBe(1);
    controller.abort();
    expect(engine.load.waiting).toBe(0);
    expect((await second).finish).toMatchObject([{ reason: "cancelled", completionTokens: 0 }]);
    await first;
    expect(backend.started).toBe(1);
  });

  it("stops computing the tokens of a running request once its client goes away", async () => {
    const backend = fakeBackend({ vocab, script: Array(1000).fill(0), tokenDelayMs: 1 });
    const engine = new SerialEngine(backend, { name: "m" });
    const controller = new AbortController();
    const events: GenerationEvent[] = [];
    for await (const e of engine.submit(request({ maxTokens: 1000 }), controller.signal)) {
      events.push(e);
      if (events.length === 3) controller.abort();
    }
    expect(events.at(-1)).toMatchObject({ type: "finish", reason: "cancelled" });
    const computed = backend.computed;
    expect(computed).toBeLessThan(10);
    await new Promise((r) => setTimeout(r, 30));
    expect(backend.computed).toBe(computed);
  });

  it("cancels when the consumer stops iterating, and moves on to the next request", async () => {
    const backend = fakeBackend({ vocab, script: Array(1000).fill(1), tokenDelayMs: 1 });
    const engine = new SerialEngine(backend, { name: "m" });
    const next = engine.submit(request({ maxTokens: 3 }));
    for await (const e of engine.submit(request({ maxTokens: 1000 }))) {
      if (e.type === "delta") break;
    }
    expect((await collect(next)).text).toBe("bbb");
    expect(backend.computed).toBeLessThan(10);
  });

  it("ends at a stop string split across tokens; the stop text never comes out", async () => {
    const engine = new SerialEngine(fakeBackend({ vocab, script: [0, 3, 4, 5, 6, 7, 1] }), { name: "m" });
    const { events, text, finish } = await collect(engine.submit(request({ stop: ["STOP"] })));
    expect(text).toBe("a");
    expect(events.map((e) => (e.type === "delta" ? e.text : "|"))).toEqual(["a", "", "", "", "", "|"]);
    expect(finish[0]).toMatchObject({ reason: "stop", completionTokens: 5 });
  });

  it("releases held-back text when generation ends without the stop string", async () => {
    const engine = new SerialEngine(fakeBackend({ vocab, script: [0, 3, 4] }), { name: "m" });
    const { text, finish } = await collect(engine.submit(request({ stop: ["STOP"] })));
    expect(text).toBe("aST");
    expect(finish[0]).toMatchObject({ reason: "stop" });
  });

  it("generates n choices one after another with seed + index", async () => {
    const backend = fakeBackend({ vocab, script: (_p, s) => [Number(s.seed ?? 0) % 3] });
    const engine = new SerialEngine(backend, { name: "m" });
    const { events } = await collect(engine.submit(request({ n: 3, sampling: { seed: 10, temperature: 1 } })));
    expect(events.map((e) => `${e.choice}:${e.type === "delta" ? e.text : e.reason}`)).toEqual(["0:b", "0:stop", "1:c", "1:stop", "2:a", "2:stop"]);
    expect(backend.samplings.map((s) => s.seed)).toEqual([10, 11, 12]);
  });

  it("reports log probabilities with the text they belong to", async () => {
    const engine = new SerialEngine(fakeBackend({ vocab, script: [0, 1] }), { name: "m" });
    const { events } = await collect(engine.submit(request({ logprobs: { top: 1 } })));
    const deltas = events.filter((e) => e.type === "delta");
    expect(deltas[0]).toMatchObject({ text: "a", logprobs: [{ token: "a", logprob: -0.5, bytes: [97], top: [{ token: "a", logprob: -0.5 }] }] });
    expect(deltas[1]).toMatchObject({ text: "b", logprobs: [{ token: "b", logprob: -1.5 }] });
  });

  it("fails the stream when the backend throws, and keeps serving others", async () => {
    const engine = new SerialEngine(fakeBackend({ vocab, script: [0, 1], failAt: { index: 1, error: new Error("boom") } }), { name: "m" });
    await expect(collect(engine.submit(request()))).rejects.toThrow("boom");
    await expect(collect(engine.submit(request()))).rejects.toThrow("boom");
    expect(engine.load).toEqual({ waiting: 0, running: 0 });
  });

  it("validates requests", () => {
    const engine = new SerialEngine(fakeBackend({ vocab, script: [] }), { name: "m" });
    expect(() => engine.submit(request({ promptIds: [] }))).toThrow(RangeError);
    expect(() => engine.submit(request({ maxTokens: 0 }))).toThrow(RangeError);
    expect(() => engine.submit(request({ n: 0 }))).toThrow(RangeError);
  });

  it("close() lets running and queued requests finish, then refuses new ones", async () => {
    const engine = new SerialEngine(fakeBackend({ vocab, script: [0, 1], tokenDelayMs: 3 }), { name: "m" });
    const a = collect(engine.submit(request()));
    const b = collect(engine.submit(request()));
    const closed = engine.close();
    expect(() => engine.submit(request())).toThrow(EngineClosedError);
    await closed;
    expect((await a).text).toBe("ab");
    expect((await b).text).toBe("ab");
  });
});
