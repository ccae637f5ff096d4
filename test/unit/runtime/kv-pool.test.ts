import { describe, expect, it } from "vitest";
import { KvPool } from "../../../src/runtime/kv-pool.js";

const shape = { layers: 2, kvHeads: 2, headDim: 3, contextLength: 64 };

/** New K/V for `rows` slots × `tokensPerRow` tokens, [rows, kvHeads, tokensPerRow, headDim], values encoding their coordinates. */
function step(rows: number, tokensPerRow: number, tag: number): Float32Array {
  const out = new Float32Array(rows * shape.kvHeads * tokensPerRow * shape.headDim);
  let i = 0;
  for (let r = 0; r < rows; r++)
    for (let h = 0; h < shape.kvHeads; h++)
      for (let s = 0; s < tokensPerRow; s++) for (let d = 0; d < shape.headDim; d++) out[i++] = tag + r * 1000 + h * 100 + s * 10 + d;
  return out;
}

function key(pool: KvPool, layer: number, slot: number, head: number, pos: number, d: number): number {
  return pool.keys[layer][((slot * shape.kvHeads + head) * shape.headDim + d) * pool.capacity + pos];
}

function value(pool: KvPool, layer: number, slot: number, head: number, pos: number, d: number): number {
  return pool.values[layer][((slot * shape.kvHeads + head) * pool.capacity + pos) * shape.headDim + d];
}

describe("KvPool", () => {
  it("stores keys transposed and values row-major at each slot's length", () => {
    const pool = new KvPool(shape, 3, 4);
    pool.append(0, 1, 2, 2, step(2, 2, 0), step(2, 2, 50000));
    pool.advance(1, 2, 2);
    expect([...pool.lengths]).toEqual([0, 2, 2]);
    // slot 2 = row 1, head 1, token 1, dim 2
    expect(key(pool, 0, 2, 1, 1, 2)).toBe(1000 + 100 + 10 + 2);
    expect(value(pool, 0, 2, 1, 1, 2)).toBe(50000 + 1000 + 100 + 10 + 2);
    pool.append(0, 1, 1, 1, step(1, 1, 7), step(1, 1, 9));
    pool.advance(1, 1, 1);
    expect(key(pool, 0, 1, 0, 2, 1)).toBe(7 + 1);
    expect(value(pool, 0, 1, 0, 2, 1)).toBe(9 + 1);
  });

  it("grows capacity in chunks and keeps every cached position", () => {
    const pool = new KvPool(shape, 2, 4);
    pool.append(1, 0, 2, 3, step(2, 3, 0), step(2, 3, 500));
    pool.advance(0, 2, 3);
    const before = [key(pool, 1, 1, 1, 2, 0), value(pool, 1, 1, 1, 2, 2), key(pool, 1, 0, 0, 0, 1)];
    pool.ensure(9);
    expect(pool.capacity).toBe(12);
    expect([key(pool, 1, 1, 1, 2, 0), value(pool, 1, 1, 1, 2, 2), key(pool, 1, 0, 0, 0, 1)]).toEqual(before);
  });

  it("never grows past the context length unless asked for more", () => {
    const pool = new KvPool({ ...shape, contextLength: 10 }, 1, 8);
    pool.ensure(9);
    expect(pool.capacity).toBe(10);
  });

  it("copies a slot whole and truncates for prefix reuse", () => {
    const pool = new KvPool(shape, 3, 4);
    pool.append(0, 2, 1, 2, step(1, 2, 3), step(1, 2, 4));
    pool.advance(2, 1, 2);
    pool.copySlot(2, 0);
    expect(pool.lengths[0]).toBe(2);
    expect(key(pool, 0, 0, 1, 1, 2)).toBe(key(pool, 0, 2, 1, 1, 2));
    pool.truncate(0, 1);
    expect(pool.lengths[0]).toBe(1);
    pool.truncate(0, 5);
    expect(pool.lengths[0]).toBe(1);
  });

  it("copies only a prefix of a slot and refuses more than it holds", () => {
    const pool = new KvPool(shape, 2, 8);
    pool.append(1, 0, 1, 5, step(1, 5, 0), step(1, 5, 900));
    pool.advance(0, 1, 5);
    pool.copyPrefix(0, 1, 3);
    expect(pool.lengths[1]).toBe(3);
    for (let p = 0; p < 3; p++) {
      expect(key(pool, 1, 1, 1, p, 2)).toBe(key(pool, 1, 0, 1, p, 2));
      expect(value(pool, 1, 1, 0, p, 1)).toBe(value(pool, 1, 0, 0, p, 1));
    }
    expect(key(pool, 1, 1, 1, 3, 2)).toBe(0);
    expect(() => pool.copyPrefix(1, 0, 4)).toThrow(RangeError);
  });

  it("applies several prefix copies as if at once (beams swapping caches, one forking to two)", () => {
    const pool = new KvPool(shape, 3, 4);
    for (let l = 0; l < shape.layers; l++) pool.append(l, 0, 3, 3, step(3, 3, l * 10000), step(3, 3, 50000 + l * 10000));
    pool.advance(0, 3, 3);
    const was = (slot: number) => [key(pool, 1, slot, 1, 2, 2), value(pool, 1, slot, 0, 1, 1)];
    const [k0, k1, k2] = [was(0), was(1), was(2)];
    // 0 takes 1's, 1 takes 0's, 2 takes 1's prefix of two positions.
    pool.copyPrefixes([
      { from: 1, to: 0, length: 3 },
      { from: 0, to: 1, length: 3 },
      { from: 1, to: 2, length: 2 },
    ]);
    expect(was(0)).toEqual(k1);
    expect(was(1)).toEqual(k0);
    expect(value(pool, 1, 2, 0, 1, 1)).toBe(k1[1]);
    expect(k2).not.toEqual(k1);
    expect([...pool.lengths]).toEqual([3, 3, 2]);
  });

  it("reports its memory", () => {
    const pool = new KvPool(shape, 2, 4);
    expect(pool.bytes()).toBe(2 * 2 * 2 * 2 * 3 * 4 * 4);
  });
});
