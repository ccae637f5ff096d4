/**
 * The device KV pool without a device: how a step's run is bound to the pools (the pools' tensors here are zeros made on the CPU; the model tests run them on WebGPU).
 */
import * as ort from "onnxruntime-node";
import { describe, expect, it } from "vitest";
import { DEVICE_GRAPH } from "../../../../src/runtime/artifact/index.js";
import { DeviceKvPool, type DevicePoolWrites } from "../../../../src/runtime/text-worker/device-kv-pool.js";

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
