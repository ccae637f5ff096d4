import { describe, expect, it } from "vitest";
import { KvSlots, type SlotHolder } from "../../../../src/scheduler/engine/kv-slots.js";

let ids = 0;
function holder(tokens: number[], cached = tokens.length, ready = false): SlotHolder & { ready: boolean; cached: number; exact: number } {
  return { id: ++ids, tokens, cached, exact: cached, ready, slot: -1 };
}

describe("KvSlots", () => {
  it("allocates the lowest free slot and truncates it in place", () => {
    const kv = new KvSlots(3, { reuse: "off" });
    const a = holder([1, 2]);
    const b = holder([3]);
    expect(kv.allocate(a, a.tokens, 1)).toEqual({ slot: 0, reused: 0, exact: 0 });
    expect(kv.allocate(b, b.tokens, 0).slot).toBe(1);
    expect(kv.free).toBe(1);
    expect(kv.takeCopies()).toEqual([
      { from: 0, to: 0, length: 0, seqId: a.id },
      { from: 1, to: 1, length: 0, seqId: b.id },
    ]);
  });

  it("moves the last ready holder into a finished one's hole", () => {
    const kv = new KvSlots(4);
    const hs = [0, 1, 2, 3].map((i) => holder([i, i], 2, true));
    for (const h of hs) kv.allocate(h, h.tokens, 0);
    kv.takeCopies();
    kv.release(hs[1]);
    kv.pack();
    expect(kv.takeCopies()).toEqual([{ from: 3, to: 1, length: 2, seqId: hs[3].id }]);
    expect(hs[3].slot).toBe(1);
    expect(kv.runs()).toEqual([{ first: 0, holders: [hs[0], hs[3], hs[2]] }]);
  });

  it("moves a prefilling holder out of the way of a ready one when a slot is free", () => {
    const kv = new KvSlots(4);
    const prefilling = holder([1, 2, 3], 3, false);
    const ready = holder([4], 1, false);
    kv.allocate(prefilling, prefilling.tokens, 0);
    kv.allocate(ready, ready.tokens, 0);
    kv.takeCopies();
    ready.ready = true;
    kv.pack();
    expect(kv.takeCopies()).toEqual([
      { from: 0, to: 2, length: 3, seqId: prefilling.id },
      { from: 1, to: 0, length: 1, seqId: ready.id },
    ]);
    expect(kv.runs()).toEqual([{ first: 0, holders: [ready] }]);
  });

  it("decodes a straggler in a call of its own when no slot is free to move through", () => {
    const kv = new KvSlots(2);
    const prefilling = holder([1, 2, 3], 3, false);
    const ready = holder([4], 1, false);
    kv.allocate(prefilling, prefilling.tokens, 0);
    kv.allocate(ready, ready.tokens, 0);
    kv.takeCopies();
    ready.ready = true;
    kv.pack();
    expect(kv.takeCopies()).toEqual([]);
    expect(kv.runs()).toEqual([{ first: 1, holders: [ready] }]);
  });

  it("reuses whole chunks of an exact cached prefix, from a running or a finished sequence", () => {
    const kv = new KvSlots(3, { reuse: "exact", align: 4 });
    const running = holder([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 10, true);
    running.exact = 9; // positions past the prompt came from decoding
    kv.allocate(running, [], 0);
    const a = holder([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    expect(kv.allocate(a, a.tokens, 11)).toEqual({ slot: 1, reused: 8, exact: 8 });
    kv.release(running);
    const b = holder([1, 2, 3, 4, 5, 0]);
    expect(kv.allocate(b, b.tokens, 5)).toEqual({ slot: 0, reused: 4, exact: 4 }); // in place: its own slot's leftover
    expect(kv.takeCopies()).toEqual([
      { from: 0, to: 0, length: 0, seqId: running.id },
      { from: 0, to: 1, length: 8, seqId: a.id },
      { from: 0, to: 0, length: 4, seqId: b.id },
    ]);
    expect(kv.prefix).toEqual({ lookups: 2, promptTokens: 18, hitTokens: 12 });
  });

  it("reuses any cached prefix in 'any' mode, up to maxReuse", () => {
    const kv = new KvSlots(2, { reuse: "any" });
    const src = holder([5, 6, 7, 8, 9], 5, true);
    src.exact = 2;
    kv.allocate(src, [], 0);
    const a = holder([5, 6, 7, 8, 9]);
    expect(kv.allocate(a, a.tokens, 4)).toEqual({ slot: 1, reused: 4, exact: 2 });
  });

  it("forgets an untrustworthy cache", () => {
    const kv = new KvSlots(1, { reuse: "any" });
    const a = holder([1, 2, 3]);
    kv.allocate(a, [], 0);
    kv.takeCopies();
    kv.release(a, false);
    expect(kv.takeCopies()).toEqual([{ from: 0, to: 0, length: 0 }]); // a truncation that names nobody
    const b = holder([1, 2, 3, 4]);
    expect(kv.allocate(b, b.tokens, 3).reused).toBe(0);
  });
});
