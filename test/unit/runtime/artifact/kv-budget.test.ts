/** The default KV budget (`defaultKvMemoryBytes`): sized from the machine's memory and the model, in whole growth steps. */
import { describe, expect, it } from "vitest";
import {
  defaultKvMemoryBytes,
  KV_GROWTH_POSITIONS,
  kvBytesPerPosition,
  kvBytesPerSlot,
  servedContextLength,
  slidingCacheCapacity,
} from "../../../../src/runtime/artifact/index.js";

const GiB = 2 ** 30;
const MiB = 2 ** 20;
/** SmolLM2-135M: 46,080 bytes per position per slot. */
const smol = { layers: 30, kvHeads: 3, headDim: 64, contextLength: 8192 };
/** One growth step of 16 slots: 16 x 128 x 46,080 bytes. */
const STEP16 = 16 * KV_GROWTH_POSITIONS * 46080;

describe("defaultKvMemoryBytes", () => {
  it("never reserves more than the native context of every slot needs", () => {
    const budget = defaultKvMemoryBytes(smol, 16, { availableBytes: 200 * GiB, totalBytes: 1024 * GiB });
    expect(budget).toBe(16 * 8192 * 46080); // 5.625 GiB
    expect(servedContextLength(smol, 16, budget)).toBe(8192);
    // One slot on a small machine: 377 MB holds the whole context.
    expect(defaultKvMemoryBytes(smol, 1, { availableBytes: 4 * GiB, totalBytes: 8 * GiB })).toBe(8192 * 46080);
  });

  it("takes a quarter of the available memory, in whole growth steps of every slot", () => {
    const budget = defaultKvMemoryBytes(smol, 16, { availableBytes: 8 * GiB, totalBytes: 1024 * GiB });
    // 2 GiB / 94,371,840 bytes per step = 22.75 -> 22 steps.
    expect(budget).toBe(22 * STEP16);
    expect(budget).toBeLessThanOrEqual(2 * GiB);
    expect(servedContextLength(smol, 16, budget)).toBe(22 * 128);
  });

  it("takes at most an eighth of the total memory, however much is free at start", () => {
    // A 24 GiB machine with 22 GiB available: a quarter would be 5.5 GiB, an eighth of the total is 3 GiB.
    const budget = defaultKvMemoryBytes(smol, 16, { availableBytes: 22 * GiB, totalBytes: 24 * GiB });
    expect(budget).toBe(34 * STEP16);
    expect(servedContextLength(smol, 16, budget)).toBe(4352);
    // This machine's MemTotal (24,684,096 kB), with 21.5 GiB available after loading the model.
    const here = defaultKvMemoryBytes(smol, 16, { availableBytes: 21.5 * GiB, totalBytes: 24684096 * 1024 });
    expect([here / MiB, servedContextLength(smol, 16, here)]).toEqual([2970, 4224]);
  });

  it("counts no more available memory than the total (a cgroup limit below the machine's free memory)", () => {
    const budget = defaultKvMemoryBytes(smol, 16, { availableBytes: 64 * GiB, totalBytes: 4 * GiB });
    expect(budget).toBe(Math.floor((0.5 * GiB) / STEP16) * STEP16);
  });

  it("keeps one growth step per slot however little memory is left", () => {
    for (const availableBytes of [100 * MiB, 0, -5 * GiB]) {
      const budget = defaultKvMemoryBytes(smol, 16, { availableBytes, totalBytes: 24 * GiB });
      expect(budget).toBe(STEP16);
      expect(servedContextLength(smol, 16, budget)).toBe(KV_GROWTH_POSITIONS);
    }
  });

  it("reaches a native context that is not a whole number of growth steps", () => {
    const odd = { layers: 2, kvHeads: 2, headDim: 16, contextLength: 1000 };
    const budget = defaultKvMemoryBytes(odd, 3, { availableBytes: 64 * GiB, totalBytes: 64 * GiB });
    expect(budget).toBe(3 * 1024 * kvBytesPerPosition(odd));
    expect(servedContextLength(odd, 3, budget)).toBe(1000);
  });

  it("always gives a budget whose served context fits it, for any slots and memory", () => {
    for (const slots of [1, 2, 7, 16, 64, 256]) {
      for (const gib of [0.25, 1, 3, 12, 48, 512]) {
        const budget = defaultKvMemoryBytes(smol, slots, { availableBytes: gib * GiB, totalBytes: 2 * gib * GiB });
        const context = servedContextLength(smol, slots, budget);
        expect(budget % (slots * KV_GROWTH_POSITIONS * 46080)).toBe(0);
        expect(context * slots * 46080).toBeLessThanOrEqual(budget);
        expect(context).toBeGreaterThanOrEqual(KV_GROWTH_POSITIONS);
        expect(context).toBeLessThanOrEqual(smol.contextLength);
        expect(budget).toBeLessThanOrEqual(Math.max(slots * KV_GROWTH_POSITIONS * 46080, Math.min((gib * GiB) / 4, (2 * gib * GiB) / 8)));
      }
    }
  });

  it("counts a sliding-window layer's ring, not the context, so the same budget serves a longer context", () => {
    // Gemma 3's shape: five local layers in six with a window of 1024 (rings of 1087 positions), one KV head of 256.
    const gemma = { layers: 6, kvHeads: 1, headDim: 256, contextLength: 131072, slidingWindow: { window: 1024, layers: [0, 1, 2, 3, 4] } };
    const perLayer = 2 * 256 * 4;
    expect(slidingCacheCapacity(1024)).toBe(1087);
    expect(kvBytesPerSlot(gemma, 512)).toBe(6 * 512 * perLayer);
    expect(kvBytesPerSlot(gemma, 8192)).toBe((8192 + 5 * 1087) * perLayer);
    // What 8192 positions of every layer would take holds 43,717 positions with rings: 43,648 in whole growth steps.
    const budget = 6 * 8192 * perLayer;
    expect(servedContextLength(gemma, 1, budget)).toBe(43648);
    expect(servedContextLength({ ...gemma, slidingWindow: undefined }, 1, budget)).toBe(8192);
    // The default budget is what its served context takes, rings counted.
    const sized = defaultKvMemoryBytes(gemma, 4, { availableBytes: 2 * GiB, totalBytes: 64 * GiB });
    const context = servedContextLength(gemma, 4, sized);
    expect(sized).toBe(4 * kvBytesPerSlot(gemma, context));
    expect(context).toBe(Math.floor((GiB / 2 / 4 / perLayer - 5 * 1087) / 128) * 128);
  });
});
