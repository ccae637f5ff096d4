/**
 * The track knows the device: with a GPU search space, GPU candidates are measured only where the
 * probe finds a hardware WebGPU adapter, against the GPU's own incumbent, never against the CPU's, and
 * promoted on the GPU only; without one they are recorded as skipped with the probe's reason. Over a
 * fake measurer and a fake probe.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { openDatabase, type KilnDatabase } from "../../../src/catalogue/db.js";
import { currentPromotion } from "../../../src/catalogue/promotions.js";
import {
  assertSameDevice,
  CrossDeviceComparisonError,
  DEFAULT_SETTINGS,
  GPU_DEFAULT_SETTINGS,
  type GpuProbe,
  listCandidates,
  runTrack,
  servingSettings,
  settingsKey,
  type TrackSettings,
  wasSkipped,
} from "../../../src/track/index.js";
import { fakeMeasurer, SLUG, testJob } from "./fakes.js";

let db: KilnDatabase;
beforeEach(() => {
  db = openDatabase({ path: ":memory:" });
});
afterEach(() => db.close());

const noGpu: GpuProbe = async () => ({ present: false, reason: "only llvmpipe (LLVM 19), a software adapter" });
const h100: GpuProbe = async () => ({ present: true, adapter: "NVIDIA H100 80GB HBM3" });
const gpuJob = () =>
  testJob({ maxCandidates: 3, searchSpace: { prefillChunk: [128, 256] }, gpuSearchSpace: { weightBits: [4, 8], graphCapture: [false, true] } });

/** The GPU is ten times the CPU, and 8-bit weights gain 20% more there; nothing gains on the CPU. */
const figures = (s: TrackSettings) =>
  s.device === "webgpu"
    ? { metrics: { decode_tokens_per_second: s.weightBits === 8 ? 1200 : 1000, prefill_tokens_per_second: 8000, batch16_tokens_per_second: 4000 } }
    : {};

describe("the GPU lane", () => {
  it("without a hardware adapter, measures the CPU lane only and records each GPU candidate as skipped, with why", async () => {
    const measurer = fakeMeasurer(figures);
    const summary = await runTrack(gpuJob(), { db, measurer, gpuProbe: noGpu });

    expect(measurer.requests.every((r) => r.settings.device === "cpu")).toBe(true);
    expect(summary.gpu).toEqual({ measured: false, detail: "only llvmpipe (LLVM 19), a software adapter" });
    const gpuRows = listCandidates(db, SLUG).filter((r) => r.settings.device === "webgpu");
    expect(gpuRows.map((r) => r.change)).toEqual(["", "weightBits 4→8", "graphCapture false→true", "weightBits 4→8, graphCapture false→true"]);
    for (const row of gpuRows) {
      expect(row.verdict).toBe("rejected");
      expect(wasSkipped(row.reason)).toBe(true);
      expect(row.reason).toBe("skipped: not measured, no hardware WebGPU adapter here (only llvmpipe (LLVM 19), a software adapter)");
      expect(row.machine).toMatchObject({ device: "webgpu" });
      expect(row.runId).toBe(summary.runId);
    }
    expect(summary.records).toHaveLength(listCandidates(db, SLUG).length);
  });

  it("with one, measures GPU candidates on the GPU against the GPU incumbent, and promotes the GPU's winner on the GPU only", async () => {
    const measurer = fakeMeasurer(figures);
    const summary = await runTrack(gpuJob(), { db, measurer, gpuProbe: h100 });

    expect(summary.gpu).toMatchObject({ measured: true, detail: "NVIDIA H100 80GB HBM3" });
    const rows = listCandidates(db, SLUG);
    const cpu = rows.filter((r) => r.settings.device === "cpu");
    const gpu = rows.filter((r) => r.settings.device === "webgpu");
    // Ten times the CPU's figures never make a GPU candidate the CPU's winner: the CPU lane promoted nothing.
    expect(cpu.some((r) => r.verdict === "promoted")).toBe(false);
    expect(currentPromotion(db, SLUG)).toBeNull();
    expect(summary.promoted).toHaveLength(1);
    expect(currentPromotion(db, SLUG, "webgpu")).toMatchObject({
      // The compile settings are the artifact itself; the device chooses which promotions a server follows.
      settings: { device: "webgpu", graphCapture: false },
      reason: expect.stringMatching(/^track on webgpu: weightBits 4→8: faster: decode \+20\.0%/),
    });
    // The GPU lane: its incumbent is the WebGPU default compile, measured on the GPU with the adapter recorded.
    expect(gpu[0]).toMatchObject({ change: "", verdict: "incumbent", machine: { device: "webgpu", adapter: "NVIDIA H100 80GB HBM3" } });
    expect(gpu[0].settings).toEqual(GPU_DEFAULT_SETTINGS);
    // 8-bit weights gain 20% over the GPU incumbent (not 12x over the CPU's): promoted on the GPU.
    const eightBit = gpu.find((r) => r.change === "weightBits 4→8")!;
    expect(eightBit.verdict).toBe("promoted");
    expect(eightBit.reason).toMatch(/^faster: decode \+20\.0%/);
    expect(gpu.filter((r) => r.change !== "").every((r) => !wasSkipped(r.reason))).toBe(true);
    // Each lane's measurements ran on its own device.
    const devices = measurer.requests.map((r) => r.settings.device);
    expect(devices.indexOf("webgpu")).toBeGreaterThan(devices.lastIndexOf("cpu"));
  });

  it("starts each lane from its own device's promotion", async () => {
    const measurer = fakeMeasurer(figures);
    await runTrack(gpuJob(), { db, measurer, gpuProbe: h100 });
    const before = listCandidates(db, SLUG).length;
    await runTrack(gpuJob(), { db, measurer, gpuProbe: h100 });
    const second = listCandidates(db, SLUG).slice(before);
    const firstOf = (device: string) => second.find((r) => r.settings.device === device && r.verdict === "incumbent")!;
    expect(firstOf("cpu").settings).toMatchObject({ device: "cpu", weightBits: 4 });
    expect(firstOf("webgpu").settings).toMatchObject({ device: "webgpu" });
    expect(currentPromotion(db, SLUG)).toBeNull();
  });

  it("fails a measurement whose artifact was built for another device than its candidate's", async () => {
    const measurer = fakeMeasurer((s) => (s.device === "webgpu" && s.weightBits === 8 ? { device: "cpu" } : figures(s)));
    await runTrack(gpuJob(), { db, measurer, gpuProbe: h100 });
    const row = listCandidates(db, SLUG).find((r) => r.settings.device === "webgpu" && r.change === "weightBits 4→8")!;
    expect(row.verdict).toBe("failed");
    expect(row.reason).toBe(`the artifact ${SLUG}-acc4 was built for cpu, not webgpu`);
  });

  it("varies the GPU activations like any other GPU compile setting", async () => {
    const measurer = fakeMeasurer((s) =>
      s.device === "webgpu"
        ? { metrics: { decode_tokens_per_second: s.activations === "float16" ? 1300 : 1000, prefill_tokens_per_second: 8000, batch16_tokens_per_second: 4000 } }
        : {},
    );
    await runTrack(testJob({ maxCandidates: 2, gpuSearchSpace: { activations: ["float32", "float16"] } }), { db, measurer, gpuProbe: h100 });
    const half = listCandidates(db, SLUG).find((r) => r.change === "activations float32→float16")!;
    expect(half.settings).toMatchObject({ device: "webgpu", activations: "float16" });
    expect(half.verdict).toBe("promoted");
    expect(currentPromotion(db, SLUG, "webgpu")?.reason).toMatch(/^track on webgpu: activations float32→float16: faster: decode \+30\.0%/);
  });

  it("a job without a GPU search space never asks the probe", async () => {
    let asked = false;
    await runTrack(testJob({ maxCandidates: 1 }), {
      db,
      measurer: fakeMeasurer(),
      gpuProbe: async () => ((asked = true), { present: false, reason: "" }),
    });
    expect(asked).toBe(false);
    expect(listCandidates(db, SLUG).every((r) => r.settings.device === "cpu")).toBe(true);
  });
});

describe("settings across devices", () => {
  it("never compares a candidate with an incumbent of another device", () => {
    expect(() => assertSameDevice(DEFAULT_SETTINGS, GPU_DEFAULT_SETTINGS)).toThrow(CrossDeviceComparisonError);
    expect(() => assertSameDevice(GPU_DEFAULT_SETTINGS, { ...GPU_DEFAULT_SETTINGS, weightBits: 8 } as typeof GPU_DEFAULT_SETTINGS)).not.toThrow();
  });

  it("keeps the device in the key, and GPU settings out of a CPU promotion", () => {
    expect(settingsKey(DEFAULT_SETTINGS)).not.toBe(settingsKey(GPU_DEFAULT_SETTINGS));
    expect(Object.keys(servingSettings(DEFAULT_SETTINGS)).sort()).toEqual(["graphOptimizationLevel", "maxRunning", "prefillChunk", "stepTokens", "threads"]);
    expect(servingSettings({ ...GPU_DEFAULT_SETTINGS, graphCapture: true })).toMatchObject({ device: "webgpu", graphCapture: true });
  });
});
