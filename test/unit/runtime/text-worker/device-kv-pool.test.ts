/**
 * The device KV pool without a device: the past span a step reads, and how a step's run is bound to
 * the pools (the pools' tensors here are zeros made on the CPU; the model tests run them on WebGPU).
 */
import * as ort from "onnxruntime-node";
import { describe, expect, it } from "vitest";
import { DEVICE_GRAPH } from "../../../../src/runtime/artifact/index.js";
import { DeviceKvPool, type DevicePoolWrites, pastSpan } from "../../../../src/runtime/text-worker/device-kv-pool.js";

describe("pastSpan", () => {
  it("is the next power of two at or above the longest row, at least 64", () => {
    expect(pastSpan(1, 4096)).toBe(64);
    expect(pastSpan(64, 4096)).toBe(64);
    expect(pastSpan(65, 4096)).toBe(128);
    expect(pastSpan(600, 4096)).toBe(1024);
    expect(pastSpan(2049, 4096)).toBe(4096);
  });

  it("never exceeds the capacity, which need not be a power of two", () => {
    expect(pastSpan(16, 16)).toBe(16);
    expect(pastSpan(700, 768)).toBe(768);
    expect(pastSpan(768, 768)).toBe(768);
  });

  it("takes few values over a whole context, so the steps' shapes stay few", () => {
    const spans = new Set(Array.from({ length: 4096 }, (_, i) => pastSpan(i + 1, 4096)));
    expect([...spans]).toEqual([64, 128, 256, 512, 1024, 2048, 4096]);
  });
});

describe("DeviceKvPool's binding of a run", () => {
  const shape = { layers: 2, kvHeads: 1, headDim: 2 };
  const noSlotCopy = {} as ort.InferenceSession; // no slot copy runs here
  const pool = (writes: DevicePoolWrites) => DeviceKvPool.create(shape, 2, 4, noSlotCopy, "cpu", "float32", writes);
  const bound = (p: DeviceKvPool) => {
    const feeds: Record<string, ort.Tensor> = {};
    const fetches: Record<string, ort.Tensor | null> = {};
    p.bindPools(feeds, fetches);
    return { feeds, fetches };
  };

  it("in place: each pool is both a feed and the fetch its output is written to, and stays the cache", async () => {
    const p = await pool("inplace");
    const { feeds, fetches } = bound(p);
    for (let l = 0; l < shape.layers; l++) {
      expect(fetches[DEVICE_GRAPH.keyPoolOut(l)]).toBe(feeds[DEVICE_GRAPH.keyPool(l)]);
      expect(fetches[DEVICE_GRAPH.valuePoolOut(l)]).toBe(feeds[DEVICE_GRAPH.valuePool(l)]);
    }
    expect(new Set(Object.values(feeds)).size).toBe(2 * shape.layers); // every pool its own buffer
    // onnxruntime-node returns second handles on the pools' buffers: the pools' own tensors stay the cache.
    const handles = Object.fromEntries(Object.keys(fetches).map((name) => [name, new ort.Tensor("float32", new Float32Array(16), [2, 1, 4, 2])]));
    p.replacePools(handles);
    const next = bound(p).feeds;
    for (const name of Object.keys(feeds)) expect(next[name]).toBe(feeds[name]);
    await p.dispose();
  });

  it("fresh: no fetch is given, and the run's outputs become the cache", async () => {
    const p = await pool("fresh");
    const { fetches } = bound(p);
    expect(Object.values(fetches).every((t) => t === null)).toBe(true);
    const outputs = Object.fromEntries(Object.keys(fetches).map((name) => [name, new ort.Tensor("float32", new Float32Array(16), [2, 1, 4, 2])]));
    p.replacePools(outputs);
    const next = bound(p).feeds;
    for (let l = 0; l < shape.layers; l++) {
      expect(next[DEVICE_GRAPH.keyPool(l)]).toBe(outputs[DEVICE_GRAPH.keyPoolOut(l)]);
      expect(next[DEVICE_GRAPH.valuePool(l)]).toBe(outputs[DEVICE_GRAPH.valuePoolOut(l)]);
    }
    await p.dispose();
  });
});
