import { describe, expect, it } from "vitest";
import { pastSpan } from "../../../../src/runtime/device/past-span.js";

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
