import { describe, expect, it } from "vitest";
import type { AlignRequest, DecodeRequest, EncodeRequest } from "../../../../src/runtime/speech-worker/protocol.js";
import { OverloadedError } from "../../../../src/scheduler/index.js";
import { SpeechEngine, type SpeechRunner } from "../../../../src/scheduler/speech/index.js";

/** A fake worker that records each call and answers token = slot * 100 + past. */
function fakeRunner(slots = 4) {
  const calls: Array<{ op: string; slots: number[]; tokensPerRow?: number }> = [];
  const runner: SpeechRunner = {
    slots,
    async encode(r: Omit<EncodeRequest, "op">) {
      calls.push({ op: "encode", slots: [r.slot] });
      await new Promise((resolve) => setTimeout(resolve, 2));
      return { runMs: 2 };
    },
    async decode(r: Omit<DecodeRequest, "op">) {
      calls.push({ op: "decode", slots: r.rows.flatMap((row) => (row ? [row.slot] : [])), tokensPerRow: r.tokensPerRow });
      await new Promise((resolve) => setTimeout(resolve, 1));
      return { rows: r.rows.map((row) => (row ? { token: row.slot * 100 + row.past, logprob: -0.1 } : null)), runMs: 1 };
    },
    async align(r: Omit<AlignRequest, "op">) {
      calls.push({ op: "align", slots: [r.slot] });
      return { starts: [], runMs: 0 };
    },
  };
  return { runner, calls };
}

/** A transcription-like run: encode, then `steps` one-token decoder steps. */
async function transcribeLike(engine: SpeechEngine, steps: number, signal?: AbortSignal): Promise<number[]> {
  return engine.withSlot(async (slot) => {
    await engine.encode({ slot, mel: new Float32Array(4) });
    const out: number[] = [];
    for (let past = 0; past < steps; past++) {
      const r = await engine.decode({ slot, past, tokens: [1], sample: null });
      out.push(r.token!);
    }
    return out;
  }, signal);
}

describe("SpeechEngine", () => {
  it("batches the one-token decoder steps of running transcriptions into one call", async () => {
    const { runner, calls } = fakeRunner();
    const engine = new SpeechEngine(runner, { name: "w" });
    const results = await Promise.all([transcribeLike(engine, 5), transcribeLike(engine, 5), transcribeLike(engine, 5)]);
    expect(results[0]).toEqual([0, 1, 2, 3, 4]);
    expect(results[2]).toEqual([200, 201, 202, 203, 204]);
    const decodes = calls.filter((c) => c.op === "decode");
    expect(decodes.length).toBeLessThan(15);
    expect(Math.max(...decodes.map((c) => c.slots.length))).toBe(3);
    expect(engine.stats.decodeRows).toBe(15);
  });

  it("serves calls oldest first, so a new window's encoder run is not starved by running decoders", async () => {
    const { runner, calls } = fakeRunner(2);
    const engine = new SpeechEngine(runner, { name: "w" });
    const long = transcribeLike(engine, 40);
    await new Promise((resolve) => setTimeout(resolve, 10));
    const late = transcribeLike(engine, 1);
    await Promise.all([long, late]);
    const lateEncode = calls.findIndex((c, i) => i > 0 && c.op === "encode");
    const longDecodes = calls.filter((c, i) => i < lateEncode && c.op === "decode").length;
    expect(longDecodes).toBeLessThan(40);
  });

  it("queues beyond its slots, refuses past maxWaiting, and lets a waiter abort", async () => {
    const { runner } = fakeRunner(1);
    const engine = new SpeechEngine(runner, { name: "w", maxWaiting: 1 });
    const first = transcribeLike(engine, 3);
    const abort = new AbortController();
    const waiting = transcribeLike(engine, 1, abort.signal);
    await expect(transcribeLike(engine, 1)).rejects.toBeInstanceOf(OverloadedError);
    abort.abort(new Error("client gone"));
    await expect(waiting).rejects.toThrow("client gone");
    await expect(first).resolves.toHaveLength(3);
    expect(engine.stats.waiting).toBe(0);
    await expect(transcribeLike(engine, 1)).resolves.toHaveLength(1);
  });

  it("fails only the calls of a failed worker message", async () => {
    const { runner } = fakeRunner(2);
    let fail = true;
    const engine = new SpeechEngine(
      {
        ...runner,
        slots: 2,
        encode: async (r) => {
          if (r.slot === 0 && fail) {
            fail = false;
            throw new Error("boom");
          }
          return runner.encode(r);
        },
      },
      { name: "w" },
    );
    const [a, b] = await Promise.allSettled([transcribeLike(engine, 2), transcribeLike(engine, 2)]);
    expect(a.status).toBe("rejected");
    expect(b.status).toBe("fulfilled");
    await expect(transcribeLike(engine, 1)).resolves.toHaveLength(1);
  });
});
