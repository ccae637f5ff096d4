import { describe, expect, it } from "vitest";
import { parseNvidiaSmiMemory } from "../../../../src/runtime/device/gpu-memory.js";
import {
  adapterKvMemoryBytes,
  DEFAULT_DEVICE_KV_POSITIONS,
  DEVICE_KV_FREE_SHARE,
  deviceKvPositions,
  MAX_ADAPTER_KV_POSITIONS,
} from "../../../../src/runtime/text-worker/webgpu-session.js";

const MIB = 2 ** 20;

describe("nvidia-smi's memory line", () => {
  it("gives the first GPU's total and used memory in bytes", () => {
    expect(parseNvidiaSmiMemory("81559, 1024\n81559, 3\n")).toEqual({ totalBytes: 81559 * MIB, usedBytes: 1024 * MIB });
  });

  it("is null for anything else", () => {
    for (const output of ["", "[N/A], [N/A]", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", "10, 20"])
      expect(parseNvidiaSmiMemory(output)).toBeNull();
  });
});

describe("the device KV pool's positions", () => {
  // 16 layers x 2 KV heads x 64 x 2 (keys, values) x 4 bytes = 16 KiB per position and slot.
  const shape = { layers: 16, kvHeads: 2, headDim: 64, contextLength: 8192, vocab: 100, heads: 4, hidden: 256 } as never;
  const perPosition = 16 * 1024;
  const room = (freeBytes: number, weightsBytes = 0) => ({ memory: { totalBytes: freeBytes + 100 * MIB, usedBytes: 100 * MIB }, weightsBytes });

  it("takes a share of the adapter's free memory less the weights", () => {
    expect(adapterKvMemoryBytes(room(1000 * MIB, 200 * MIB))).toBe(Math.floor(800 * MIB * DEVICE_KV_FREE_SHARE));
    expect(adapterKvMemoryBytes(room(100 * MIB, 200 * MIB))).toBe(0);
  });

  it("are those the adapter's budget gives every slot, in growth steps, at most the model's context and the adapter cap", () => {
    // 4 slots: 0.25 x 1024 MiB / (16 KiB x 4) = 4096 positions.
    expect(DEVICE_KV_FREE_SHARE).toBe(0.25);
    expect(deviceKvPositions(shape, 4, undefined, room(1224 * MIB, 200 * MIB))).toBe(4096);
    // 80 GiB free would give the whole 8192-position context; each step copies the pool, so it stops at the cap.
    expect(deviceKvPositions(shape, 4, undefined, room(80 * 2 ** 30))).toBe(MAX_ADAPTER_KV_POSITIONS);
    // 1 slot, budget for 200 positions: rounded down to 128.
    expect(deviceKvPositions(shape, 1, undefined, room(Math.ceil((200 * perPosition) / DEVICE_KV_FREE_SHARE)))).toBe(128);
  });

  it("fall back to today's rule when the adapter leaves less than a growth step per slot, or says nothing", () => {
    expect(deviceKvPositions(shape, 4, undefined, room(MIB))).toBe(DEFAULT_DEVICE_KV_POSITIONS);
    expect(deviceKvPositions(shape, 4)).toBe(DEFAULT_DEVICE_KV_POSITIONS);
  });

  it("follow a given KV budget before the adapter's memory, past the adapter cap too", () => {
    expect(deviceKvPositions(shape, 2, 256 * perPosition * 2, room(80 * 2 ** 30))).toBe(256);
    expect(deviceKvPositions(shape, 1, 8192 * perPosition, room(80 * 2 ** 30))).toBe(8192);
  });
});
