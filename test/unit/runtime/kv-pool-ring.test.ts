/**
 * The KV ring of sliding-window layers: where positions land, which position each ring index
 * reports, what a cut-back may keep, and that the scheduler's slot table allows exactly the prefix
 * reuse the pool can honour.
 */
import { describe, expect, it } from "vitest";
import { NO_POSITION, slidingCacheCapacity } from "../../../src/runtime/artifact/index.js";
import { KvPool } from "../../../src/runtime/kv-pool.js";
import { KvSlots, type SlotHolder } from "../../../src/scheduler/engine/kv-slots.js";

const WINDOW = 6;
// Layer 0 slides, layer 1 keeps every position.
const shape = { layers: 2, kvHeads: 2, headDim: 3, contextLength: 64, slidingWindow: { window: WINDOW, layers: [0] } };
const RING = slidingCacheCapacity(WINDOW);

/** New K (or V) for one slot at positions start..start+tokensPerRow-1, [1, kvHeads, tokensPerRow, headDim]: each float encodes its position, head and dim. */
function tokens(start: number, tokensPerRow: number, tag = 0): Float32Array {
  const out = new Float32Array(shape.kvHeads * tokensPerRow * shape.headDim);
  let i = 0;
  for (let h = 0; h < shape.kvHeads; h++)
    for (let s = 0; s < tokensPerRow; s++) for (let d = 0; d < shape.headDim; d++) out[i++] = tag + (start + s) * 100 + h * 10 + d;
  return out;
}

/** Runs steps of the given sizes on one slot, writing every layer. */
function write(pool: KvPool, slot: number, sizes: number[]): void {
  for (const tokensPerRow of sizes) {
    const start = pool.lengths[slot];
    pool.ensure(start + tokensPerRow);
    for (let l = 0; l < shape.layers; l++) pool.append(l, slot, 1, tokensPerRow, tokens(start, tokensPerRow), tokens(start, tokensPerRow, 0.5));
    pool.advance(slot, 1, tokensPerRow);
  }
}

function keyAt(pool: KvPool, layer: number, slot: number, index: number, h: number, d: number): number {
  const cap = pool.layerCapacity(layer);
  return pool.keys[layer][((slot * shape.kvHeads + h) * shape.headDim + d) * cap + index];
}

function valueAt(pool: KvPool, layer: number, slot: number, index: number, h: number, d: number): number {
  const cap = pool.layerCapacity(layer);
  return pool.values[layer][((slot * shape.kvHeads + h) * cap + index) * shape.headDim + d];
}

function ring(pool: KvPool, slot: number): number[] {
  const out = new BigInt64Array(pool.ringCapacity);
  pool.ringPositions(slot, 1, out);
  return [...out].map(Number);
}

/** Every ring index that reports a position holds that position's key and value, in every head and dim. */
function expectRingHoldsItsPositions(pool: KvPool, slot: number): void {
  const positions = ring(pool, slot);
  for (let i = 0; i < positions.length; i++) {
    const p = positions[i];
    if (p === NO_POSITION) continue;
    for (let h = 0; h < shape.kvHeads; h++) {
      for (let d = 0; d < shape.headDim; d++) {
        expect(keyAt(pool, 0, slot, i, h, d)).toBe(p * 100 + h * 10 + d);
        expect(valueAt(pool, 0, slot, i, h, d)).toBe(p * 100 + h * 10 + d + 0.5);
      }
    }
  }
}

describe("KvPool rings of sliding-window layers", () => {
  it("holds window - 1 positions plus a sixteenth of the window", () => {
    expect(slidingCacheCapacity(4096)).toBe(4351);
    expect(slidingCacheCapacity(1024)).toBe(1087);
    expect(slidingCacheCapacity(6)).toBe(6);
  });

  it("grows with the capacity until the ring's size, then wraps position p to index p % ring", () => {
    const pool = new KvPool(shape, 2, 4);
    expect(pool.ringCapacity).toBe(4);
    write(pool, 1, [3]);
    expect(ring(pool, 1)).toEqual([0, 1, 2, NO_POSITION]);
    expectRingHoldsItsPositions(pool, 1);
    write(pool, 1, [2, 1, 1]); // grows to capacity 8: the ring stops at RING
    expect(pool.capacity).toBe(8);
    expect(pool.ringCapacity).toBe(RING);
    expect(ring(pool, 1)).toEqual([6, 1, 2, 3, 4, 5]);
    expectRingHoldsItsPositions(pool, 1);
    // A step longer than the ring keeps its own last RING positions.
    write(pool, 1, [9, 1]);
    expect(pool.lengths[1]).toBe(17);
    expect(ring(pool, 1)).toEqual([12, 13, 14, 15, 16, 11]);
    expectRingHoldsItsPositions(pool, 1);
    // The full-cache layer kept every position in order; slot 0, empty, reports none.
    for (let p = 0; p < 17; p++) expect(keyAt(pool, 1, 1, p, 1, 2)).toBe(p * 100 + 12);
    expect(ring(pool, 0).every((p) => p === NO_POSITION)).toBe(true);
    // Memory: the sliding layer holds RING positions per slot, the other the whole capacity.
    expect(pool.keys[0].length).toBe(2 * shape.kvHeads * shape.headDim * RING);
    expect(pool.keys[1].length).toBe(2 * shape.kvHeads * shape.headDim * pool.capacity);
    expect(pool.bytes()).toBe(2 * 2 * shape.kvHeads * shape.headDim * (RING + pool.capacity) * 4);
  });

  it("cuts back only as far as the ring still holds the window before the cut", () => {
    const pool = new KvPool(shape, 2, 4);
    write(pool, 0, [20]);
    // The ring holds 14..19; a query at n needs n - 5 .. n - 1.
    expect(pool.canKeep(0, 20)).toBe(true);
    expect(pool.canKeep(0, 19)).toBe(true);
    expect(pool.canKeep(0, 18)).toBe(false);
    expect(pool.canKeep(0, 0)).toBe(true);
    expect(() => pool.truncate(0, 18)).toThrow(RangeError);
    expect(pool.lengths[0]).toBe(20);
    pool.truncate(0, 19);
    expect(ring(pool, 0)).toEqual([18, 13, 14, 15, 16, 17]); // index 1 (13) is stale, but outside every window from 19 on
    write(pool, 0, [1]);
    expectRingHoldsItsPositions(pool, 0);
    // Short sequences never wrapped: any cut-back.
    write(pool, 1, [3]);
    expect(pool.canKeep(1, 1)).toBe(true);
  });

  it("copies a whole ring to another slot", () => {
    const pool = new KvPool(shape, 3, 4);
    write(pool, 0, [7, 1, 1, 1, 1]);
    pool.copyPrefix(0, 2, 11);
    expect(ring(pool, 2)).toEqual(ring(pool, 0));
    expectRingHoldsItsPositions(pool, 2);
    for (let p = 0; p < 11; p++) expect(valueAt(pool, 1, 2, p, 0, 1)).toBe(p * 100 + 1.5);
    expect(() => pool.copyPrefix(0, 1, 9)).toThrow(RangeError);
  });
});

describe("KvSlots with sliding-window rings", () => {
  let ids = 0;
  const holder = (tokens: number[], cached: number): SlotHolder & { cached: number; exact: number } => ({
    id: ++ids,
    tokens,
    cached,
    exact: cached,
    ready: true,
    slot: -1,
  });

  it("reuses a cached prefix exactly when the pool can keep it", () => {
    const range = (n: number, from = 0) => Array.from({ length: n }, (_, i) => from + i);
    for (const cached of [3, 6, 12, 20]) {
      for (let shared = 1; shared <= cached; shared++) {
        const kv = new KvSlots(2, { reuse: "any", ring: { window: WINDOW, capacity: RING } });
        const pool = new KvPool(shape, 2, 4);
        const first = holder(range(cached), 0);
        kv.allocate(first, first.tokens, 0);
        write(pool, 0, [cached]);
        first.cached = cached;
        kv.release(first);
        const prompt = [...range(shared), ...range(5, 1000)];
        const next = holder(prompt, 0);
        const { reused } = kv.allocate(next, prompt, prompt.length - 1);
        expect(reused === shared || reused === 0).toBe(true);
        expect(reused === shared, `cached ${cached}, shared ${shared}`).toBe(pool.canKeep(0, shared));
      }
    }
  });
});
