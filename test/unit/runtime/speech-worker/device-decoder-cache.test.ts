/**
 * The decoder cache a GPU keeps, without a GPU: its helper graphs run on the CPU provider here (the
 * model tests run them on WebGPU), against the cache in JavaScript memory fed the same writes and
 * moves. Only the positions each slot holds are compared; beyond them neither cache promises anything.
 */
import * as ort from "onnxruntime-node";
import { afterAll, describe, expect, it } from "vitest";
import { presentEntry, SPEECH_GRAPH } from "../../../../src/runtime/artifact/index.js";
import { type DecoderCache, HostDecoderCache } from "../../../../src/runtime/speech-worker/decoder-cache.js";
import { decoderPastSpan, DeviceDecoderCache } from "../../../../src/runtime/speech-worker/device-decoder-cache.js";

const D = SPEECH_GRAPH.decoder;
const shape = { layers: 2, kvHeads: 2, headDim: 3, contextLength: 16 } as const;
const TEXT_CONTEXT = 16;
const SLOTS = 4;

let seed = 11;
const random = (n: number) => Float32Array.from({ length: n }, () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31) * 2 - 1);

/** Presents of `rows` rows of `tokens` new positions for every layer, [2 * layers, rows, heads, tokens, head_dim], as the decoder returns them. */
function presents(rows: number, tokens: number): ort.InferenceSession.ReturnType {
  const dims = [2 * shape.layers, rows, shape.kvHeads, tokens, shape.headDim];
  return { [D.presents]: new ort.Tensor("float32", random(dims.reduce((a, b) => a * b, 1)), dims) };
}

/** Slot `slot`'s cached keys and values per layer, [head][position][d], read through the cache's past feeds. */
async function contents(cache: DecoderCache, slot: number): Promise<Array<{ keys: number[][][]; values: number[][][] }>> {
  const past = await cache.pastFeeds(slot, 1, cache.lengths[slot] + 1);
  const n = cache.lengths[slot];
  const span = past.positions;
  const heads = [...Array(shape.kvHeads).keys()];
  const result = [];
  for (let l = 0; l < shape.layers; l++) {
    const keys = past.tensors[D.pastKey(l)];
    const values = past.tensors[D.pastValue(l)];
    expect(keys.dims).toEqual([1, shape.kvHeads, shape.headDim, span]);
    expect(values.dims).toEqual([1, shape.kvHeads, span, shape.headDim]);
    const k = keys.data as Float32Array;
    const v = values.data as Float32Array;
    result.push({
      keys: heads.map((h) => Array.from({ length: n }, (_, p) => Array.from({ length: shape.headDim }, (_, d) => k[(h * shape.headDim + d) * span + p]))),
      values: heads.map((h) => Array.from({ length: n }, (_, p) => Array.from(v.subarray((h * span + p) * shape.headDim, (h * span + p + 1) * shape.headDim)))),
    });
  }
  past.release();
  return result;
}

describe("decoderPastSpan", () => {
  it("is the next multiple of 64 at or above the longest row, at least 64, at most the capacity", () => {
    expect(decoderPastSpan(0, 449)).toBe(64);
    expect(decoderPastSpan(1, 449)).toBe(64);
    expect(decoderPastSpan(64, 449)).toBe(64);
    expect(decoderPastSpan(65, 449)).toBe(128);
    expect(decoderPastSpan(300, 449)).toBe(320);
    expect(decoderPastSpan(448, 449)).toBe(448);
    expect(decoderPastSpan(449, 449)).toBe(449);
    expect(decoderPastSpan(3, 17)).toBe(17);
  });
});

describe("DeviceDecoderCache (its graphs on the CPU provider)", () => {
  const caches: DecoderCache[] = [];
  afterAll(async () => {
    for (const c of caches) await c.dispose();
  });

  /** The device cache and the host cache fed `steps`, then each slot compared. */
  async function both(steps: (cache: DecoderCache, presents: (rows: number, tokens: number) => ort.InferenceSession.ReturnType) => Promise<void>) {
    const device = await DeviceDecoderCache.create(shape, SLOTS, TEXT_CONTEXT, "cpu");
    const host = new HostDecoderCache(shape, SLOTS);
    caches.push(device, host);
    const script: ort.InferenceSession.ReturnType[] = [];
    seed = 11;
    await steps(device, (rows, tokens) => {
      const p = presents(rows, tokens);
      script.push(p);
      return p;
    });
    let at = 0;
    await steps(host, () => script[at++]);
    expect(Array.from(device.lengths)).toEqual(Array.from(host.lengths));
    for (let slot = 0; slot < SLOTS; slot++) expect(await contents(device, slot), `slot ${slot}`).toEqual(await contents(host, slot));
    return device;
  }

  it("writes each row's new positions after the ones it holds, across several calls and row ranges", async () => {
    const device = await both(async (cache, p) => {
      await cache.write(0, [true, true, true, true], 3, p(4, 3));
      await cache.write(1, [true, true], 1, p(2, 1));
      await cache.write(0, [true], 2, p(1, 2));
      await cache.write(2, [true, true], 1, p(2, 1));
    });
    expect(Array.from(device.lengths)).toEqual([5, 4, 5, 4]);
  });

  it("leaves a row that is not kept as it was, even one already full", async () => {
    const device = await both(async (cache, p) => {
      await cache.write(0, [true, true, true, true], 2, p(4, 2));
      for (let i = 0; i < TEXT_CONTEXT - 2; i++) await cache.write(1, [true], 1, p(1, 1));
      await cache.write(0, [false, false, true, false], 1, p(4, 1));
    });
    expect(Array.from(device.lengths)).toEqual([2, TEXT_CONTEXT, 3, 2]);
  });

  it("moves slots as beams reorder: a fork, a cycle and a truncation in one call, each reading the cache as it was", async () => {
    const device = await both(async (cache, p) => {
      await cache.write(0, [true, true, true, true], 4, p(4, 4));
      await cache.copyPrefixes([
        { from: 0, to: 1, length: 4 },
        { from: 1, to: 2, length: 3 },
        { from: 2, to: 0, length: 4 },
        { from: 3, to: 3, length: 2 },
      ]);
      await cache.write(0, [true, true, true, true], 1, p(4, 1));
    });
    expect(Array.from(device.lengths)).toEqual([5, 5, 4, 3]);
  });

  it("reads a past of at least one position, and refuses to copy positions a slot does not hold", async () => {
    const device = await DeviceDecoderCache.create(shape, SLOTS, TEXT_CONTEXT, "cpu");
    caches.push(device);
    const past = await device.pastFeeds(0, 2);
    expect(past.positions).toBeGreaterThan(0);
    expect(past.tensors[D.pastKey(0)].dims).toEqual([2, shape.kvHeads, shape.headDim, past.positions]);
    past.release();
    await expect(device.copyPrefixes([{ from: 0, to: 1, length: 1 }])).rejects.toThrow(/holds 0 positions/);
  });

  it("keeps a half-precision decoder's float16 keys and values bit for bit through writes and moves, in half the bytes", async () => {
    const half = await DeviceDecoderCache.create(shape, SLOTS, TEXT_CONTEXT, "cpu", "float16");
    const full = await DeviceDecoderCache.create(shape, SLOTS, TEXT_CONTEXT, "cpu");
    caches.push(half, full);
    expect(half.bytes() * 2).toBe(full.bytes());
    const dims = [2, shape.kvHeads, 3, shape.headDim];
    const count = dims.reduce((a, b) => a * b, 1);
    // Half-precision bit patterns of 1.0 upwards, a different run per layer and kind.
    const bits = (offset: number) => Uint16Array.from({ length: count }, (_, i) => 0x3c00 + offset + i);
    const packed = new Uint16Array(2 * shape.layers * count);
    for (let l = 0; l < shape.layers; l++) {
      packed.set(bits(100 * l), presentEntry(l, "key") * count);
      packed.set(bits(100 * l + 50), presentEntry(l, "value") * count);
    }
    const out = { [D.presents]: new ort.Tensor("float16", packed, [2 * shape.layers, ...dims]) };
    await half.write(1, [true, true], 3, out);
    await half.copyPrefixes([{ from: 2, to: 0, length: 3 }]);
    const past = await half.pastFeeds(0, 3);
    const span = past.positions;
    for (let l = 0; l < shape.layers; l++) {
      const keys = past.tensors[D.pastKey(l)];
      const values = past.tensors[D.pastValue(l)];
      expect([keys.type, values.type]).toEqual(["float16", "float16"]);
      const k = keys.data as Uint16Array;
      const v = values.data as Uint16Array;
      // Slot 0 (row 0) holds slot 2's positions, the presents' second row; slot 1 (row 1) their first.
      for (const [row, present] of [
        [0, 1],
        [1, 0],
      ])
        for (let h = 0; h < shape.kvHeads; h++)
          for (let p = 0; p < 3; p++)
            for (let d = 0; d < shape.headDim; d++) {
              const at = ((present * shape.kvHeads + h) * 3 + p) * shape.headDim + d;
              expect(k[((row * shape.kvHeads + h) * shape.headDim + d) * span + p]).toBe(0x3c00 + 100 * l + at);
              expect(v[((row * shape.kvHeads + h) * span + p) * shape.headDim + d]).toBe(0x3c00 + 100 * l + 50 + at);
            }
    }
    past.release();
    expect(Array.from(half.lengths)).toEqual([3, 3, 3, 0]);
  });
});
