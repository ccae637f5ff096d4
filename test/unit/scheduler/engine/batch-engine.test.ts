import { describe, expect, it } from "vitest";
import { BatchEngine, type BatchEngineOptions } from "../../../../src/scheduler/engine/batch-engine.js";
import { EngineClosedError, OverloadedError } from "../../../../src/scheduler/errors.js";
import type { GenerationEvent, GenerationRequest, GenerationStream } from "../../../../src/scheduler/types.js";
import { fakeStepRunner, type FakeStepRunner, type FakeStepOptions } from "./fake-step-runner.js";

const LETTERS = "abcdefghijklmnopqrstuvwxyz".split("");
const EOS = 26;
const vocab = [...LETTERS, "<eos>", "S", "T", "O", "P"];
const request = (over: Partial<GenerationRequest> = {}): GenerationRequest => ({ promptIds: [1, 2, 3], maxTokens: 8, sampling: {}, ...over });
const prompt = (length: number, salt = 0) => Array.from({ length }, (_, i) => (i * 7 + salt) % 26);

function setup(backend: Partial<FakeStepOptions> = {}, engine: Partial<BatchEngineOptions> = {}) {
  const fake = fakeStepRunner({ slots: 4, vocab, stopTokenIds: [EOS], ...backend });
  return { fake, engine: new BatchEngine(fake, fake, { name: "m", contextLength: fake.contextLength, stopTokenIds: fake.stopTokenIds, ...engine }) };
}

async function collect(stream: GenerationStream) {
  const events: GenerationEvent[] = [];
  for await (const e of stream) events.push(e);
  const texts: string[] = [];
  for (const e of events) if (e.type === "delta") texts[e.choice] = (texts[e.choice] ?? "") + e.text;
  const finish = events.filter((e) => e.type === "finish");
  return { events, text: texts[0] ?? "", texts, finish };
}

/** What a request gives when it runs alone on a fresh engine. */
async function alone(req: GenerationRequest, backend: Partial<FakeStepOptions> = {}, engine: Partial<BatchEngineOptions> = {}) {
  const { engine: e } = setup({ ...backend, slots: 1, stepDelayMs: 0 }, { ...engine, maxRunning: 1 });
  return collect(e.submit(req));
}

const decodes = (fake: FakeStepRunner) => fake.calls.filter((c) => c.kind === "decode");
const prefills = (fake: FakeStepRunner) => fake.calls.filter((c) => c.kind === "prefill");

describe("BatchEngine", () => {
  it("streams token deltas then a finish event", async () => {
    const { engine } = setup({ next: (h) => h.length % 3 });
    const { events, text, finish } = await collect(engine.submit(request({ maxTokens: 3 })));
    expect(text).toBe("abc");
    expect(events.filter((e) => e.type === "delta").map((e) => e.type === "delta" && e.completionTokens)).toEqual([1, 2, 3]);
    expect(finish).toMatchObject([{ type: "finish", choice: 0, reason: "length", completionTokens: 3 }]);
    expect(engine.load).toEqual({ waiting: 0, running: 0 });
  });

  it("ends at a stop token (not emitted), a stop string (never released) or the context end", async () => {
    const script = (tokens: number[]) => (h: readonly number[]) => tokens[h.length - 3] ?? 0;
    const atEos = await collect(setup({ next: script([0, 1, EOS, 2]) }).engine.submit(request()));
    expect(atEos.text).toBe("ab");
    expect(atEos.finish[0]).toMatchObject({ reason: "stop", completionTokens: 2 });
    const atString = await collect(setup({ next: script([0, 27, 28, 29, 30, 1]) }).engine.submit(request({ stop: ["STOP"] })));
    expect(atString.text).toBe("a");
    expect(atString.finish[0]).toMatchObject({ reason: "stop", completionTokens: 5, stopReason: "STOP" });
    const atContext = await collect(setup({ next: () => 0, contextLength: 6 }).engine.submit(request({ maxTokens: 100 })));
    expect(atContext.finish[0]).toMatchObject({ reason: "length", completionTokens: 3 });
    // Only the request's own stops are a stop reason: not the model's end-of-turn token, not the budget.
    expect([atEos, atContext].map((r) => "stopReason" in r.finish[0])).toEqual([false, false]);
  });

  it("names the request's stop string that matched first; text held back for a stop string that never came is no stop", async () => {
    const script = (tokens: number[]) => (h: readonly number[]) => tokens[h.length - 3] ?? 0;
    const first = await collect(setup({ next: script([0, 27, 28, 29, 30, 1]) }).engine.submit(request({ stop: ["TOP", "aS"] })));
    expect(first.finish[0]).toMatchObject({ reason: "stop", stopReason: "aS" });
    const held = await collect(setup({ next: script([0, 1, 3]) }).engine.submit(request({ stop: ["abc"], maxTokens: 2 })));
    expect(held.text).toBe("ab");
    expect(held.finish[0]).toMatchObject({ reason: "length" });
    expect("stopReason" in held.finish[0]).toBe(false);
  });

  it("ends at a request's stop token as at the model's, or keeps it and a stop string with includeStop", async () => {
    const script = (tokens: number[]) => (h: readonly number[]) => tokens[h.length - 3] ?? 0;
    const next = script([0, 27, 1, 28, 29, 30, 2]);
    const atToken = await collect(setup({ next }).engine.submit(request({ sampling: { stop_token_ids: [27] } })));
    expect(atToken.text).toBe("a");
    expect(atToken.finish[0]).toMatchObject({ reason: "stop", completionTokens: 1, stopReason: 27 });
    const kept = await collect(setup({ next }).engine.submit(request({ sampling: { stop_token_ids: [27] }, includeStop: true })));
    expect(kept.text).toBe("aS");
    expect(kept.finish[0]).toMatchObject({ reason: "stop", completionTokens: 2, stopReason: 27 });
    const keptString = await collect(setup({ next: script([0, 27, 28, 29, 30, 1]) }).engine.submit(request({ stop: ["TOP", "STOP"], includeStop: true })));
    expect(keptString.text).toBe("aSTOP");
    expect(keptString.finish[0]).toMatchObject({ reason: "stop", completionTokens: 5, stopReason: "STOP" });
    // The model's own end-of-turn token listed in stop_token_ids is still the model's end.
    const eos = await collect(setup({ next: script([0, EOS]) }).engine.submit(request({ sampling: { stop_token_ids: [EOS] } })));
    expect(eos.finish[0].type === "finish" && eos.finish[0].stopReason).toBeUndefined();
  });

  it("reports log probabilities with the text they belong to", async () => {
    const { engine } = setup({ next: () => 0 });
    const { events } = await collect(engine.submit(request({ maxTokens: 2, logprobs: { top: 1 } })));
    const deltas = events.filter((e) => e.type === "delta");
    expect(deltas[0]).toMatchObject({ text: "a", logprobs: [{ token: "a", logprob: -0.25, bytes: [97], top: [{ token: "a" }] }] });
  });

  it("admits up to the slots, queues up to maxWaiting, and refuses beyond with OverloadedError", async () => {
    const { engine, fake } = setup({ slots: 2, stepDelayMs: 2 }, { maxWaiting: 2 });
    const streams = [0, 1, 2, 3].map((i) => engine.submit(request({ promptIds: prompt(5, i), maxTokens: 4 })));
    expect(() => engine.submit(request())).toThrow(OverloadedError);
    await new Promise((r) => setTimeout(r, 1));
    expect(engine.load).toEqual({ waiting: 2, running: 2 });
    expect(engine.stats.snapshot()).toMatchObject({ running: 2, waiting: 2, slots: 2 });
    const results = await Promise.all(streams.map(collect));
    expect(results.map((r) => r.finish[0].reason)).toEqual(["length", "length", "length", "length"]);
    expect(Math.max(...fake.calls.map((c) => c.rows))).toBe(2);
    expect(engine.load).toEqual({ waiting: 0, running: 0 });
    // Room again once the queue drained.
    expect((await collect(engine.submit(request({ maxTokens: 1 })))).finish).toHaveLength(1);
  });

  it("gives every request the output it gets alone, whatever runs beside it", async () => {
    const reqs = [0, 1, 2, 3, 4, 5].map((i) => request({ promptIds: prompt(3 + i * 9, i), maxTokens: 4 + i * 3, sampling: { seed: i } }));
    const { engine, fake } = setup({ slots: 3 }, { stepTokens: 16, prefillChunk: 8 });
    const together = await Promise.all(reqs.map((r) => collect(engine.submit(r))));
    for (let i = 0; i < reqs.length; i++) expect(together[i].text).toBe((await alone(reqs[i])).text);
    expect(Math.max(...decodes(fake).map((c) => c.rows))).toBe(3);
  });

  it("interleaves a long prompt's chunks with the others' decoding: nobody's next token stalls", async () => {
    const { engine, fake } = setup({ slots: 4 }, { stepTokens: 40, prefillChunk: 32 });
    const short = engine.submit(request({ promptIds: prompt(4), maxTokens: 30 }));
    const shortEvents: GenerationEvent[] = [];
    const shortDone = (async () => {
      for await (const e of short) shortEvents.push(e);
    })();
    while (shortEvents.length < 2) await new Promise((r) => setTimeout(r, 1));
    const longPrompt = prompt(320, 3);
    const long = collect(engine.submit(request({ promptIds: longPrompt, maxTokens: 2 })));
    await Promise.all([shortDone, long]);
    // Each step: one decode call for the short request, then at most one 32-token chunk (40 - 1 left).
    const longSeq = prefills(fake).find((c) => c.tokensPerRow === 32)!.seqIds[0];
    const longChunks = fake.calls.filter((c) => c.kind === "prefill" && c.seqIds[0] === longSeq);
    expect(longChunks.map((c) => c.tokensPerRow)).toEqual(Array(10).fill(32));
    let sinceDecode = 0;
    for (const c of fake.calls.slice(fake.calls.indexOf(longChunks[0]), fake.calls.indexOf(longChunks[9]))) {
      if (c.kind === "decode") sinceDecode = 0;
      else expect(++sinceDecode).toBe(1);
    }
    expect((await long).text).toBe((await alone(request({ promptIds: longPrompt, maxTokens: 2 }), {}, { stepTokens: 40, prefillChunk: 32 })).text);
  });

  it("cuts prompts at multiples of the prefill chunk whatever the budget left", async () => {
    const { engine, fake } = setup({ slots: 4 }, { stepTokens: 50, prefillChunk: 16 });
    await Promise.all([engine.submit(request({ promptIds: prompt(40, 1) })), engine.submit(request({ promptIds: prompt(21, 2) }))].map(collect));
    const starts = new Map<number, number[]>();
    for (const c of prefills(fake)) starts.set(c.seqIds[0], [...(starts.get(c.seqIds[0]) ?? []), c.tokensPerRow]);
    expect([...starts.values()]).toEqual([
      [16, 16, 8],
      [16, 5],
    ]);
    for (let i = 0; i < fake.calls.length; ) {
      // Per step (a decode call or the first prefill starts one): never past the budget.
      let tokens = 0;
      let j = i;
      do tokens += fake.calls[j].rows * fake.calls[j].tokensPerRow;
      while (++j < fake.calls.length && fake.calls[j].kind === "prefill" && fake.calls[j - 1].kind === "prefill" && tokens + fake.calls[j].tokensPerRow <= 50);
      expect(tokens).toBeLessThanOrEqual(50);
      i = j;
    }
  });

  it("admits first come first served: with one slot, requests finish in arrival order", async () => {
    const { engine } = setup({ slots: 1, stepDelayMs: 1 });
    const order: number[] = [];
    await Promise.all(
      [0, 1, 2, 3].map(async (i) => {
        for await (const e of engine.submit(request({ promptIds: prompt(2 + (3 - i) * 5, i), maxTokens: 2 }))) if (e.type === "finish") order.push(i);
      }),
    );
    expect(order).toEqual([0, 1, 2, 3]);
  });

  it("admits a waiting request of a smaller priority first, arrival order within a priority; a running one is never stopped", async () => {
    const { engine } = setup({ slots: 1, stepDelayMs: 1 });
    const order: string[] = [];
    const run = (name: string, priority?: number) =>
      (async () => {
        for await (const e of engine.submit(request({ promptIds: prompt(3, name.length), maxTokens: 2, ...(priority !== undefined ? { priority } : {}) })))
          if (e.type === "finish") order.push(name);
      })();
    const first = run("running", 5);
    await new Promise((r) => setTimeout(r, 0));
    await Promise.all([first, run("batch", 1), run("plain"), run("urgent", -1), run("plain2", 0), run("batch2", 1)]);
    expect(order).toEqual(["running", "urgent", "plain", "plain2", "batch", "batch2"]);
  });

  it("lets a newcomer of a smaller priority overtake a waiting request only within the aging time of its arrival", async () => {
    let clock = 0;
    const { engine } = setup({ slots: 1, stepDelayMs: 1 }, { now: () => clock, priorityAgingMs: 1000 });
    const order: string[] = [];
    const run = (name: string, priority: number, at: number) => {
      clock = at;
      const stream = engine.submit(request({ promptIds: prompt(3, name.length), maxTokens: 2, priority }));
      return (async () => {
        for await (const e of stream) if (e.type === "finish") order.push(name);
      })();
    };
    const runs = [
      run("running", 0, 0),
      run("batch", 1, 0),
      run("soon", 0, 999),
      run("late", 0, 1000),
      run("urgent late", -1, 1500),
      run("later batch", 1, 2000),
    ];
    await Promise.all(runs);
    expect(order).toEqual(["running", "urgent late", "soon", "batch", "late", "later batch"]);
  });

  describe("constraints compiled away from the steps", () => {
    const SCHEMA_X = { type: "json_schema" as const, schema: '{"type":"string"}' };
    const SCHEMA_Y = { type: "json_schema" as const, schema: '{"type":"integer"}' };
    /** The fake runner with a grammar thread whose compiles the test finishes, and a log of which sequences each call ran while one was under way. */
    function withCompiles(options: { waits?: (seqId: number, spec: { schema?: string }) => boolean } = {}) {
      const fake = fakeStepRunner({ slots: 4, vocab, stopTokenIds: [EOS], stepDelayMs: 1 });
      const compiled = new Set<string>([SCHEMA_X.schema]);
      const compiles: Array<{ spec: string; finish: (err?: Error) => void }> = [];
      const duringCompile: number[][] = [];
      const runner = Object.assign(Object.create(fake) as typeof fake, {
        slots: fake.slots,
        step: async (call: Parameters<typeof fake.step>[0]) => {
          if (compiles.length > 0) duringCompile.push(call.seqIds);
          return fake.step(call);
        },
        constraintPrepared: (spec: { schema?: string }) => compiled.has(spec.schema ?? ""),
        prepareConstraint: (spec: { schema?: string }) =>
          new Promise<void>((resolve, reject) =>
            compiles.push({
              spec: spec.schema ?? "",
              finish: (err) => {
                compiles.splice(0, 1);
                if (err) return reject(err);
                compiled.add(spec.schema ?? "");
                resolve();
              },
            }),
          ),
        ...(options.waits ? { constraintWaits: options.waits } : {}),
      });
      const engine = new BatchEngine(runner, fake, { name: "m", contextLength: fake.contextLength, stopTokenIds: fake.stopTokenIds });
      return { engine, compiles, duringCompile };
    }

    /** Runs a request to its end, returning its events. */
    const started = (engine: BatchEngine, req: GenerationRequest) =>
      (async () => {
        const events: GenerationEvent[] = [];
        for await (const e of engine.submit(req)) events.push(e);
        return events;
      })();

    it("steps a constrained sequence whose masks do not wait behind the compile (another grammar thread holds them)", async () => {
      // The runner says only sequences held to SCHEMA_Y wait (they would live where it compiles).
      const { engine, compiles, duringCompile } = withCompiles({ waits: (_seqId, spec) => spec.schema === SCHEMA_Y.schema });
      const constrained = started(engine, request({ promptIds: prompt(3, 1), maxTokens: 30, constraint: SCHEMA_X }));
      await new Promise((r) => setTimeout(r, 10));
      const compiling = started(engine, request({ promptIds: prompt(3, 3), maxTokens: 5, constraint: SCHEMA_Y }));
      while (compiles.length === 0) await new Promise((r) => setTimeout(r, 1));
      const before = duringCompile.length;
      await new Promise((r) => setTimeout(r, 15));
      // The SCHEMA_X sequence went on stepping while SCHEMA_Y compiled.
      expect(duringCompile.length).toBeGreaterThan(before);
      expect(new Set(duringCompile.slice(before).flat()).size).toBe(1);
      compiles[0].finish();
      const results = await Promise.all([constrained, compiling]);
      expect(results.map((events) => events.filter((e) => e.type === "delta").length)).toEqual([30, 5]);
      const stats = engine.stats.snapshot();
      expect([stats.constraintCompileSeconds.count, stats.constraintCompilesRefused]).toEqual([1, 0]);
      expect(stats.constraintCompileSeconds.sum).toBeGreaterThan(0.01);
    });

    it("runs the others while a constraint compiles, holding the constrained ones, then runs it", async () => {
      const { engine, compiles, duringCompile } = withCompiles();
      const started = (name: string, req: GenerationRequest) => {
        const stream = engine.submit(req);
        return (async () => {
          const events: GenerationEvent[] = [];
          for await (const e of stream) events.push(e);
          return events;
        })().then((events) => ({ name, events }));
      };
      const constrained = started("constrained", request({ promptIds: prompt(3, 1), maxTokens: 30, constraint: SCHEMA_X }));
      const plain = started("plain", request({ promptIds: prompt(3, 2), maxTokens: 30 }));
      await new Promise((r) => setTimeout(r, 10));
      const compiling = started("compiling", request({ promptIds: prompt(3, 3), maxTokens: 5, constraint: SCHEMA_Y }));
      while (compiles.length === 0) await new Promise((r) => setTimeout(r, 1));
      const before = duringCompile.length;
      await new Promise((r) => setTimeout(r, 15));
      // Steps went on while it compiled, with the plain sequence only.
      expect(duringCompile.length).toBeGreaterThan(before);
      const seen = new Set(duringCompile.slice(before).flat());
      expect(seen.size).toBe(1);
      compiles[0].finish();
      const results = await Promise.all([constrained, plain, compiling]);
      for (const { name, events } of results)
        expect(
          events.filter((e) => e.type === "finish"),
          name,
        ).toHaveLength(1);
      expect(results.map((r) => r.events.filter((e) => e.type === "delta").length)).toEqual([30, 30, 5]);
    });

    it("fails only the request whose constraint cannot be compiled", async () => {
      const { engine, compiles } = withCompiles();
      const plain = collect(engine.submit(request({ promptIds: prompt(3, 2), maxTokens: 10 })));
      const refused = collect(engine.submit(request({ promptIds: prompt(3, 3), maxTokens: 5, constraint: SCHEMA_Y })));
      while (compiles.length === 0) await new Promise((r) => setTimeout(r, 1));
      compiles[0].finish(new Error("the engine refused it"));
      await expect(refused).rejects.toThrow("the engine refused it");
      expect((await plain).finish).toHaveLength(1);
      // Counted for /metrics: one compile, refused.
      const stats = engine.stats.snapshot();
      expect([stats.constraintCompileSeconds.count, stats.constraintCompilesRefused]).toEqual([1, 1]);
    });
  });

  it("never starves the oldest prompt: it gets a chunk every step while short requests keep coming", async () => {
    const { engine, fake } = setup({ slots: 3 }, { stepTokens: 20, prefillChunk: 16 });
    const long = collect(engine.submit(request({ promptIds: prompt(160, 5), maxTokens: 1 })));
    const shorts: Array<Promise<unknown>> = [];
    let finished = false;
    void long.then(() => (finished = true));
    for (let i = 0; i < 40 && !finished; i++) {
      shorts.push(collect(engine.submit(request({ promptIds: prompt(3, i), maxTokens: 3 }))));
      await new Promise((r) => setTimeout(r, 0));
    }
    await long;
    await Promise.all(shorts);
    const longSeq = fake.calls[0].seqIds[0];
    const chunks = fake.calls.filter((c) => c.kind === "prefill" && c.seqIds[0] === longSeq).length;
    expect(chunks).toBe(10);
    // Ten chunks of 16 tokens, one per step: at most ten decode calls in between.
    const first = fake.calls.findIndex((c) => c.seqIds[0] === longSeq);
    const last = fake.calls.findLastIndex((c) => c.seqIds[0] === longSeq);
    expect(fake.calls.slice(first, last).filter((c) => c.kind === "decode").length).toBeLessThanOrEqual(10);
  });

  it("frees a cancelled request's slot at the next step; the waiting one takes it", async () => {
    const { engine, fake } = setup({ slots: 1, stepDelayMs: 1 });
    const controller = new AbortController();
    const events: GenerationEvent[] = [];
    const next = collect(engine.submit(request({ promptIds: prompt(4, 9), maxTokens: 3 })));
    for await (const e of engine.submit(request({ maxTokens: 1000 }), controller.signal)) {
      events.push(e);
      if (events.length === 3) controller.abort();
    }
    expect(events.at(-1)).toMatchObject({ type: "finish", reason: "cancelled", completionTokens: 3 });
    const cancelledSeq = fake.opened[0].seqId;
    const computed = fake.calls.filter((c) => c.seqIds.includes(cancelledSeq)).length;
    expect(computed).toBeLessThanOrEqual(5);
    expect((await next).finish[0]).toMatchObject({ reason: "length", completionTokens: 3 });
    expect(fake.closed).toContain(cancelledSeq);
    expect(fake.calls.filter((c) => c.seqIds.includes(cancelledSeq)).length).toBe(computed);
    expect(engine.load).toEqual({ waiting: 0, running: 0 });
  });

  it("removes a waiting request at once when cancelled, without computing it", async () => {
    const { engine, fake } = setup({ slots: 1, stepDelayMs: 2 });
    const first = collect(engine.submit(request({ maxTokens: 3 })));
    const controller = new AbortController();
    const second = collect(engine.submit(request({ n: 2 }), controller.signal));
    controller.abort();
    expect((await second).finish).toMatchObject([
      { choice: 0, reason: "cancelled", completionTokens: 0 },
      { choice: 1, reason: "cancelled", completionTokens: 0 },
    ]);
    await first;
    expect(fake.opened).toHaveLength(1);
  });

  it("cancels when the consumer stops iterating, and moves on", async () => {
    const { engine, fake } = setup({ slots: 1 });
    const later = engine.submit(request({ maxTokens: 3 }));
    for await (const e of engine.submit(request({ maxTokens: 1000 }))) if (e.type === "delta") break;
    expect((await collect(later)).finish[0]).toMatchObject({ reason: "length", completionTokens: 3 });
    expect(fake.calls.length).toBeLessThan(10);
  });

  it("keeps running sequences in consecutive slots: the last one moves into a finished one's hole", async () => {
    const { engine, fake } = setup({ slots: 4 });
    const reqs = [3, 9, 5, 12].map((maxTokens, i) => request({ promptIds: prompt(4 + i, i), maxTokens, sampling: { seed: i } }));
    const results = await Promise.all(reqs.map((r) => collect(engine.submit(r))));
    for (let i = 0; i < reqs.length; i++) expect(results[i].text).toBe((await alone(reqs[i])).text);
    const ds = decodes(fake);
    expect(ds.every((c) => c.firstSlot === 0)).toBe(true);
    expect(ds.map((c) => c.rows)).toEqual([...Array(2).fill(4), ...Array(2).fill(3), ...Array(4).fill(2), ...Array(3).fill(1)]);
    expect(fake.copies.filter((c) => c.from !== c.to).length).toBeGreaterThanOrEqual(1);
  });

  it("waits for a slot when all are taken", async () => {
    const { engine, fake } = setup({ slots: 2 });
    const results = await Promise.all([5, 2, 4].map((maxTokens, i) => collect(engine.submit(request({ promptIds: prompt(3, i), maxTokens })))));
    expect(results.map((r) => r.finish[0].completionTokens)).toEqual([5, 2, 4]);
    expect(Math.max(...fake.calls.map((c) => c.rows))).toBe(2);
    const third = fake.opened[2].seqId;
    const firstClose = fake.closed[0];
    expect(fake.opened.findIndex((o) => o.seqId === third)).toBe(2);
    expect(firstClose).toBe(fake.opened[1].seqId); // the 2-token one finished, then the third got its slot
    expect(engine.stats.snapshot().queueSeconds.count).toBe(3);
  });

  it("reuses a cached prompt prefix (whole chunks) instead of computing it, and counts the hit", async () => {
    const { engine, fake } = setup({ slots: 2 }, { prefillChunk: 8 });
    const base = prompt(30, 4);
    const a = request({ promptIds: base, maxTokens: 3 });
    const b = request({ promptIds: [...base.slice(0, 21), 5, 6, 7], maxTokens: 5 });
    await collect(engine.submit(a));
    const textB = (await collect(engine.submit(b))).text;
    expect(textB).toBe((await alone(b, {}, { prefillChunk: 8 })).text);
    const bSeq = fake.opened[1].seqId;
    expect(
      prefills(fake)
        .filter((c) => c.seqIds[0] === bSeq)
        .map((c) => c.tokensPerRow),
    ).toEqual([8]); // 24 - 16 reused
    expect(engine.stats.snapshot().prefix).toMatchObject({ lookups: 2, promptTokens: 54, hitTokens: 16, hitRate: 16 / 54 });
  });

  it("reuses any cached prefix in 'any' mode, from a running sequence too", async () => {
    const { engine, fake } = setup({ slots: 2, stepDelayMs: 1 }, { prefillChunk: 8, prefixReuse: "any" });
    const base = prompt(13, 2);
    const a = collect(engine.submit(request({ promptIds: base, maxTokens: 20 })));
    await new Promise((r) => setTimeout(r, 10));
    const b = request({ promptIds: [...base.slice(0, 11), 9], maxTokens: 4 });
    expect((await collect(engine.submit(b))).finish[0].completionTokens).toBe(4);
    await a;
    const bSeq = fake.opened[1].seqId;
    expect(
      prefills(fake)
        .filter((c) => c.seqIds[0] === bSeq)
        .map((c) => c.tokens),
    ).toEqual([[9]]);
    expect(engine.stats.snapshot().prefix.hitTokens).toBe(11);
  });

  it("n = 3 shares one prefill: one prompt pass, three samplers, three different choices", async () => {
    const { engine, fake } = setup({ slots: 4 }, { prefillChunk: 8 });
    const req = request({ promptIds: prompt(20, 1), maxTokens: 6, n: 3, sampling: { seed: 42, temperature: 1 } });
    const { texts, finish } = await collect(engine.submit(req));
    expect(prefills(fake).map((c) => c.tokensPerRow)).toEqual([8, 8, 4]);
    expect(prefills(fake).at(-1)!.forks).toBe(2);
    expect(fake.opened.map((o) => o.stream)).toEqual([0, 1, 2]);
    expect(new Set(texts).size).toBe(3);
    expect(finish.map((f) => f.choice).sort()).toEqual([0, 1, 2]);
    expect(texts[0]).toBe((await alone({ ...req, n: 1 })).text); // choice 0 is what n = 1 gives
    expect(engine.stats.snapshot().sharedPromptTokens).toBe(40);
    expect(Math.max(...decodes(fake).map((c) => c.rows))).toBe(3);
  });

  it("runs n choices beyond the free slots as slots free up, reusing the prompt", async () => {
    const { engine, fake } = setup({ slots: 2 }, { prefillChunk: 4 });
    const req = request({ promptIds: prompt(10, 3), maxTokens: 3, n: 3, sampling: { seed: 1, temperature: 1 } });
    const { texts, finish } = await collect(engine.submit(req));
    expect(finish).toHaveLength(3);
    expect(texts.every((t) => t.length === 3)).toBe(true);
    const third = fake.opened[2].seqId;
    expect(
      prefills(fake)
        .filter((c) => c.seqIds[0] === third)
        .map((c) => c.tokensPerRow),
    ).toEqual([2]); // 8 of 10 reused
  });

  it("fails only the requests of a failing forward pass; the others carry on", async () => {
    const { engine } = setup({ slots: 2, failForwardOf: { opened: 1, message: "boom" } });
    const bad = collect(engine.submit(request({ promptIds: prompt(5), maxTokens: 3 })));
    const good = collect(engine.submit(request({ promptIds: prompt(4), maxTokens: 3 })));
    await expect(bad).rejects.toThrow("boom");
    expect((await good).finish[0]).toMatchObject({ reason: "length", completionTokens: 3 });
    expect(engine.load).toEqual({ waiting: 0, running: 0 });
  });

  it("carries slot operations inside the step message: one message per model call", async () => {
    const { engine, fake } = setup({ slots: 2 });
    await Promise.all([0, 1, 2].map((i) => collect(engine.submit(request({ promptIds: prompt(5, i), maxTokens: 3 })))));
    await engine.close();
    // Every message ran a forward pass except the one that delivers the last closes.
    expect(fake.messages).toBe(fake.calls.length + 1);
    const first = fake.calls[0];
    expect(first.ops.map((o) => o.op)).toEqual(["copy", "open", "copy", "open"]);
    expect(fake.closed).toHaveLength(3);
    expect(fake.samplers.size).toBe(0);
  });

  it("a failed slot operation fails only the sequence it names", async () => {
    // The second request's prefix copy fails in the worker; the first and third are untouched.
    const secondSeq = 2;
    const { engine } = setup({ slots: 3, failOp: { match: (op) => op.op === "copy" && op.seqId === secondSeq, message: "copy failed: slot 9 holds 0" } });
    const reqs = [0, 1, 2].map((i) => request({ promptIds: prompt(6, i), maxTokens: 4 }));
    const [a, b, c] = reqs.map((r) => collect(engine.submit(r)));
    await expect(b).rejects.toThrow(/copy failed/);
    expect((await a).text).toBe((await alone(reqs[0])).text);
    expect((await c).text).toBe((await alone(reqs[2])).text);
    expect(engine.load).toEqual({ waiting: 0, running: 0 });
    // Its slot was not trusted again: a new request gets a full prefill there.
    expect((await collect(engine.submit(reqs[1]))).text).toBe((await alone(reqs[1])).text);
  });

  it("a message that never comes back fails its call's sequences and those its operations named, and no others", async () => {
    const lost = new Error("worker gone");
    const { engine } = setup({ slots: 2, stepDelayMs: 1, failWhen: { match: (c) => c.rows === 1 && c.tokensPerRow === 7, error: lost } });
    const early = collect(engine.submit(request({ promptIds: prompt(3), maxTokens: 6 })));
    await new Promise((r) => setTimeout(r, 5));
    const late = collect(engine.submit(request({ promptIds: prompt(7, 1), maxTokens: 3 })));
    await expect(late).rejects.toThrow("worker gone");
    expect((await early).finish[0]).toMatchObject({ reason: "length", completionTokens: 6 });
  });

  it("pauses a choice whose reader falls behind, keeps the others decoding, and resumes it when read", async () => {
    const { engine, fake } = setup({ slots: 2, stepDelayMs: 1, next: () => 0 }, { maxBacklog: 8 });
    const slow = engine.submit(request({ promptIds: prompt(3), maxTokens: 200 }));
    const fast = collect(engine.submit(request({ promptIds: prompt(3, 1), maxTokens: 40 })));
    expect((await fast).finish[0].completionTokens).toBe(40);
    await new Promise((r) => setTimeout(r, 20));
    const snapshot = engine.stats.snapshot();
    expect(snapshot.paused).toBe(1);
    const computedWhilePaused = fake.computed;
    await new Promise((r) => setTimeout(r, 20));
    expect(fake.computed).toBe(computedWhilePaused); // nothing is generated for nobody
    const unread = await collect(slow);
    expect(unread.finish[0]).toMatchObject({ reason: "length", completionTokens: 200 });
    expect(engine.stats.snapshot().paused).toBe(0);
  });

  it("validates requests", () => {
    const { engine } = setup({ contextLength: 10 });
    expect(() => engine.submit(request({ promptIds: [] }))).toThrow(RangeError);
    expect(() => engine.submit(request({ promptIds: prompt(10) }))).toThrow(/context/);
    expect(() => engine.submit(request({ maxTokens: -1 }))).toThrow(RangeError);
    expect(() => engine.submit(request({ maxTokens: 1.5 }))).toThrow(RangeError);
    expect(() => engine.submit(request({ n: 0 }))).toThrow(RangeError);
  });

  it("close() lets running and queued requests finish, then refuses new ones", async () => {
    const { engine } = setup({ slots: 1, stepDelayMs: 1 });
    const a = collect(engine.submit(request({ maxTokens: 2 })));
    const b = collect(engine.submit(request({ maxTokens: 2 })));
    const closed = engine.close();
    expect(() => engine.submit(request())).toThrow(EngineClosedError);
    await closed;
    expect((await a).finish[0].completionTokens).toBe(2);
    expect((await b).finish[0].completionTokens).toBe(2);
  });

  it("reports batch sizes, queue times and gauges, and calls its hooks", async () => {
    const { engine } = setup({ slots: 4 });
    const steps: number[] = [];
    const queued: number[] = [];
    const stop = engine.stats.observe({ onStep: (s) => steps.push(s.decodeRows), onQueued: (s) => queued.push(s) });
    await Promise.all([0, 1, 2].map((i) => collect(engine.submit(request({ promptIds: prompt(3, i), maxTokens: 4 })))));
    stop();
    const snap = engine.stats.snapshot();
    expect(queued).toHaveLength(3);
    expect(snap.queueSeconds.count).toBe(3);
    expect(snap.batchSize.count).toBe(steps.filter((n) => n > 0).length);
    expect(snap.batchSize.sum).toBe(9); // 3 sequences x 3 decode steps (the first token comes from prefill)
    expect(snap.completionTokens).toBe(12);
    expect(snap.promptTokensComputed).toBe(9);
    expect(snap).toMatchObject({ running: 0, waiting: 0 });
    expect(snap.batchSize.counts.at(-1)).toBe(snap.batchSize.count);
  });
});

describe("BatchEngine drafts (prompt lookup)", () => {
  /** A "model" that continues "abcdefghij" over and over, except where `swerve` says otherwise. */
  const cycle =
    (swerve: Record<number, number> = {}) =>
    (h: readonly number[]) =>
      swerve[h.length] ?? h.length % 10;
  const cyclePrompt = Array.from({ length: 10 }, (_, i) => i);
  const checks = (fake: FakeStepRunner) => fake.calls.filter((c) => c.verify);

  it("checks a lone sequence's drafts in one call each and answers exactly what it answers without them", async () => {
    for (const swerve of [{}, { 14: 25 }, { 13: 25, 19: 24, 20: 23 }, { 25: EOS }] as Array<Record<number, number>>) {
      const req = request({ promptIds: cyclePrompt, maxTokens: 20 });
      const plain = await alone(req, { next: cycle(swerve) });
      const { fake, engine } = setup({ next: cycle(swerve) }, { draftTokens: 4 });
      const drafted = await collect(engine.submit(req));
      expect(drafted.text).toBe(plain.text);
      const withoutTimes = (f: GenerationEvent[]) => f.map((e) => ({ ...e, decodeSeconds: 0 }));
      expect(withoutTimes(drafted.finish)).toEqual(withoutTimes(plain.finish));
      expect(checks(fake).length).toBeGreaterThan(0);
      expect(checks(fake).every((c) => c.rows === 1 && c.tokensPerRow <= 5)).toBe(true);
      // Fewer model calls than tokens: confirmed drafts cost no call of their own.
      expect(fake.calls.length).toBeLessThan(plain.finish[0].completionTokens);
      // Nothing sampled past what was kept: no draft reaches beyond max tokens.
      expect(fake.computed).toBe(drafted.finish[0].completionTokens + (drafted.finish[0].reason === "stop" ? 1 : 0));
    }
  });

  it("confirms whole drafts of a repeating answer, and counts proposed and confirmed tokens", async () => {
    const { fake, engine } = setup({ next: cycle() }, { draftTokens: 4 });
    const { text, finish } = await collect(engine.submit(request({ promptIds: cyclePrompt, maxTokens: 21 })));
    expect(text).toBe("abcdefghijabcdefghija");
    expect(finish[0]).toMatchObject({ reason: "length", completionTokens: 21 });
    // The prefill samples the first token, two decode steps the next two (their last 3 tokens, 8 9 0
    // and 9 0 1, occur nowhere before), then each check confirms its whole draft and one more token.
    expect(fake.calls.map((c) => c.tokens.join(""))).toEqual(["0123456789", "0", "1", "23456", "78901", "23456", "789"]);
    expect(engine.stats.snapshot()).toMatchObject({ draftTokens: 14, draftTokensAccepted: 14, completionTokens: 21 });
  });

  it("ends at a stop string or a stop token inside a confirmed draft, and at the context end", async () => {
    const req = request({ promptIds: cyclePrompt, maxTokens: 30 });
    const atString = await collect(setup({ next: cycle() }, { draftTokens: 4 }).engine.submit({ ...req, stop: ["ef"] }));
    expect(atString.text).toBe("abcd");
    expect(atString.finish[0]).toMatchObject({ reason: "stop", stopReason: "ef" });
    const atEos = await collect(setup({ next: cycle({ 23: EOS }) }, { draftTokens: 4 }).engine.submit(req));
    expect(atEos.text).toBe("abcdefghijabc");
    expect(atEos.finish[0]).toMatchObject({ reason: "stop", completionTokens: 13 });
    // The fake throws past the context: a draft never reaches beyond it.
    const atContext = await collect(setup({ next: cycle(), contextLength: 24 }, { draftTokens: 8 }).engine.submit(req));
    expect(atContext.finish[0]).toMatchObject({ reason: "length", completionTokens: 14 });
  });

  it("a cancel between checks ends the choice at the next step; the waiting request then runs and drafts too", async () => {
    const { fake, engine } = setup({ next: cycle(), slots: 1, stepDelayMs: 1 }, { draftTokens: 4 });
    const controller = new AbortController();
    const events: GenerationEvent[] = [];
    const waiting = collect(engine.submit(request({ promptIds: cyclePrompt, maxTokens: 12 })));
    for await (const e of engine.submit(request({ promptIds: cyclePrompt, maxTokens: 1000 }), controller.signal)) {
      events.push(e);
      // Mid-way through the first check's five tokens.
      if (events.length === 6) controller.abort();
    }
    const cancelled = fake.opened[0].seqId;
    expect(events.at(-1)).toMatchObject({ type: "finish", reason: "cancelled" });
    expect(fake.calls.filter((c) => c.seqIds.includes(cancelled)).length).toBeLessThanOrEqual(5);
    expect((await waiting).text).toBe("abcdefghijab");
    expect(fake.calls.filter((c) => c.verify && !c.seqIds.includes(cancelled)).length).toBeGreaterThan(0);
    expect(fake.closed).toContain(cancelled);
    expect(engine.load).toEqual({ waiting: 0, running: 0 });
  });

  it("drafts only for a sequence decoding alone, and never with draftTokens 0", async () => {
    const { fake, engine } = setup({ next: cycle(), stepDelayMs: 1 }, { draftTokens: 4 });
    const req = request({ promptIds: cyclePrompt, maxTokens: 12 });
    const [a, b] = await Promise.all([collect(engine.submit(req)), collect(engine.submit({ ...req, maxTokens: 30 }))]);
    expect([a.text, b.text]).toEqual(["abcdefghijab", "abcdefghijabcdefghijabcdefghij"]);
    const together = fake.calls.filter((c) => c.kind === "decode" && c.rows === 2);
    expect(together.length).toBeGreaterThan(0);
    // Checks come only once the shorter one has finished.
    const lastTogether = fake.calls.lastIndexOf(together.at(-1)!);
    expect(fake.calls.findIndex((c) => c.verify)).toBeGreaterThan(lastTogether);
    const off = setup({ next: cycle() }, { draftTokens: 0 });
    await collect(off.engine.submit(req));
    expect(checks(off.fake)).toEqual([]);
  });
});

describe("BatchEngine line time limit", () => {
  it("ends a choice at the first token holding a line break once the limit has passed since its first token", async () => {
    let clock = 0;
    const lines = [0, 31, 1, 31, 2, 31, 3, 31]; // a, newline, b, newline, ... (id 31 is "\n")
    const backend = { vocab: [...vocab, "\n"], next: (h: readonly number[]) => ((clock += 10), lines[h.length - 3] ?? 4) };
    const limited = await collect(setup(backend, { now: () => clock }).engine.submit(request({ maxTokens: 8, lineTimeLimitMs: 25 })));
    // Tokens at 10, 20, 30, 40 ms: the newline at 20 is 10 ms after the first, the one at 40 is 30.
    expect(limited.text).toBe("a\nb\n");
    expect(limited.finish[0]).toMatchObject({ reason: "length", completionTokens: 4 });
    clock = 0;
    const whole = await collect(setup(backend, { now: () => clock }).engine.submit(request({ maxTokens: 8 })));
    expect(whole.text).toBe("a\nb\nc\nd\n");
  });
});

describe("BatchEngine predictions", () => {
  const cycle = (h: readonly number[]) => h.length % 10;
  const req = (prediction: number[], maxTokens = 20) => request({ promptIds: [20, 21, 22], maxTokens, prediction });
  // The "model" writes 3 4 5 6 7 8 9 0 1 ... after a prompt of 3 tokens.
  const answer = (n: number) => Array.from({ length: n }, (_, i) => (i + 3) % 10);

  it("checks a prediction the answer follows as drafts, even with lookup drafts off, and counts it", async () => {
    const plain = await alone(req([]), { next: cycle });
    const { fake, engine } = setup({ next: cycle }, { draftTokens: 0 });
    const predicted = await collect(engine.submit(req(answer(20))));
    expect(predicted.text).toBe(plain.text);
    // The prefill samples the first token, two checks of 8 confirm 9 tokens each, and a decode step
    // the last (a draft leaves room for the token its check adds). Confirmed: 16 of the prediction's 20.
    expect(fake.calls.map((c) => c.tokensPerRow)).toEqual([3, 9, 9, 1]);
    expect(predicted.finish[0]).toMatchObject({ completionTokens: 20, prediction: { accepted: 16, rejected: 4 } });
    expect(plain.finish[0].prediction).toBeUndefined();
  });

  it("picks a prediction up again after the answer departs from it, nearest where the answer stands", async () => {
    // The prediction has two tokens the model does not write (25 at 5, 24 at 12).
    const prediction = answer(20);
    prediction[5] = 25;
    prediction[12] = 24;
    const plain = await alone(req([]), { next: cycle });
    const { fake, engine } = setup({ next: cycle }, { draftTokens: 0 });
    const predicted = await collect(engine.submit(req(prediction)));
    expect(predicted.text).toBe(plain.text);
    const accepted = predicted.finish[0].prediction!.accepted;
    expect(accepted).toBeGreaterThan(10);
    expect(predicted.finish[0].prediction!.rejected).toBe(20 - accepted);
    expect(fake.calls.length).toBeLessThan(12);
  });

  it("checks the predictions of several sequences at once, each in a call of its own, the others decoding together", async () => {
    const plain = await alone(req([]), { next: cycle });
    const { fake, engine } = setup({ next: cycle, stepDelayMs: 1 }, { draftTokens: 0 });
    const [a, b, c] = await Promise.all([req(answer(20)), req(answer(20)), req([])].map((r) => collect(engine.submit(r))));
    for (const x of [a, b, c]) expect(x.text).toBe(plain.text);
    for (const x of [a, b]) expect(x.finish[0].prediction!.accepted).toBeGreaterThan(10);
    expect(c.finish[0].prediction).toBeUndefined();
    // Two sequences' checks, and the third decoding alone beside them.
    const checked = new Set(fake.calls.filter((call) => call.verify).map((call) => call.seqIds[0]));
    expect(checked.size).toBe(2);
    const firstCheck = fake.calls.findIndex((call) => call.verify);
    const beside = fake.calls.slice(firstCheck).filter((call) => call.kind === "decode" && !checked.has(call.seqIds[0]));
    expect(beside.length).toBeGreaterThan(0);
    expect(fake.calls.length).toBeLessThan(3 + 20 * 3);
  });

  it("beside others, holds off checking a prediction the answer has left for eight steps after each poor check", async () => {
    const { fake, engine } = setup({ next: cycle, stepDelayMs: 1 }, { draftTokens: 0 });
    // Every third token of the prediction is one the model does not write: each check confirms at most two of eight.
    const poor = answer(40).map((t, i) => (i % 3 === 2 ? 25 : t));
    const [held] = await Promise.all([collect(engine.submit(req(poor, 40))), collect(engine.submit(req([], 50)))]);
    expect(held.finish[0].completionTokens).toBe(40);
    // A check, eight steps without, a check...: a few checks over its 40 tokens, where every other step would check without holding off.
    const checks = fake.calls.filter((call) => call.verify).length;
    expect(checks).toBeGreaterThan(0);
    expect(checks).toBeLessThanOrEqual(6);
  });

  it("checks at most four predictions a step: a fifth and sixth decode together meanwhile", async () => {
    const { fake, engine } = setup({ next: cycle, slots: 6, stepDelayMs: 1 }, { draftTokens: 0, maxRunning: 6 });
    const answers = await Promise.all(Array.from({ length: 6 }, () => collect(engine.submit(req(answer(20))))));
    for (const x of answers) expect(x.finish[0].completionTokens).toBe(20);
    const firstCheck = fake.calls.findIndex((call) => call.verify);
    expect(fake.calls.slice(firstCheck).some((call) => call.kind === "decode" && call.rows === 2)).toBe(true);
  });

  it("leaves predictions unused where the runner cannot check drafts", async () => {
    const { fake, engine } = setup({ next: cycle }, { checksDrafts: false, draftTokens: 4 });
    const predicted = await collect(engine.submit(req(answer(20))));
    expect(fake.calls.filter((c) => c.verify)).toEqual([]);
    expect(predicted.finish[0]).toMatchObject({ completionTokens: 20, prediction: { accepted: 0, rejected: 20 } });
  });
});
