/**
 * The track's GPU weight settings reach the GPU compile as `deviceWeights`, its activations as
 * `deviceActivations`, and both come back from an artifact's manifest; only `shapes` and
 * `graphCapture` are refused by the measurer, because onnxruntime-node cannot turn graph capture on
 * (checked here, so that an upgrade that can fails this file).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { InferenceSession } from "onnxruntime-node";
import { afterAll, describe, expect, it } from "vitest";
import { compileGguf } from "../../../src/compiler/compile.js";
import type { ArtifactManifest } from "../../../src/runtime/artifact/index.js";
import { probeGraphBytes } from "../../../src/runtime/device/probe-graph.js";
import { GPU_DEFAULT_SETTINGS } from "../../../src/track/devices.js";
import { createModelMeasurer } from "../../../src/track/measure.js";
import type { Workload } from "../../../src/track/job.js";
import {
  compileOptionsOf,
  completeSettings,
  compileOptionsOfManifest,
  compileSettingsOfOptions,
  DEFAULT_SETTINGS,
  deviceActivationsOf,
  deviceAttentionOf,
  deviceWeightsOf,
  type TrackSettings,
  UNSUPPORTED_GPU_SETTINGS,
} from "../../../src/track/settings.js";
import { writeTinyGguf } from "../provision/tiny-gguf.js";

const gpu = (change: Partial<TrackSettings>): TrackSettings => ({ ...GPU_DEFAULT_SETTINGS, ...change });

/** A manifest that records `options` as compileGguf does. */
function manifestWith(options: object): ArtifactManifest {
  return { choices: [{ what: "options", choice: JSON.stringify(options), exact: true, why: "compile options" }] } as unknown as ArtifactManifest;
}

describe("weightBits and blockSize as the GPU compile's deviceWeights", () => {
  it("their defaults are the GGUF's own blocks; any other pair is its form; 16 bits take no block", () => {
    expect(compileOptionsOf(GPU_DEFAULT_SETTINGS).deviceWeights).toBe("source");
    expect(compileOptionsOf(gpu({ weightBits: 8, blockSize: 64 })).deviceWeights).toEqual({ bits: 8, blockSize: 64 });
    expect(compileOptionsOf(gpu({ weightBits: 4, blockSize: 128 })).deviceWeights).toEqual({ bits: 4, blockSize: 128 });
    expect(compileOptionsOf(gpu({ weightBits: 8, blockSize: 32 })).deviceWeights).toEqual({ bits: 8, blockSize: 32 });
    expect(compileOptionsOf(gpu({ weightBits: 16, blockSize: 64 })).deviceWeights).toEqual({ bits: 16 });
    expect(compileOptionsOf(DEFAULT_SETTINGS).deviceWeights).toBe("source");
    expect(() => deviceWeightsOf({ weightBits: 2, blockSize: 32 })).toThrow(/not a GPU weight form/);
  });

  it("come back from the manifest's options; an artifact that names none was built from the source blocks", () => {
    for (const [weightBits, blockSize] of [
      [8, 64],
      [4, 128],
      [16, 32],
      [4, 32],
    ]) {
      const options = compileOptionsOf(gpu({ weightBits, blockSize }));
      // The options JSON of a default form omits it, as compileGguf's resolved options do.
      const recorded = compileOptionsOfManifest(manifestWith(options.deviceWeights === "source" ? { ...options, deviceWeights: undefined } : options))!;
      expect(compileSettingsOfOptions(recorded)).toMatchObject({ weightBits, blockSize });
    }
    expect(compileSettingsOfOptions(compileOptionsOfManifest(manifestWith({ accuracyLevel: 4, numerics: "fast" }))!)).toMatchObject({
      weightBits: 4,
      blockSize: 32,
    });
  });
});

describe("activations as the GPU compile's deviceActivations", () => {
  it("go to the GPU compile only", () => {
    expect(deviceActivationsOf(GPU_DEFAULT_SETTINGS)).toBe("float32");
    expect(deviceActivationsOf(gpu({ activations: "float16" }))).toBe("float16");
    expect(deviceActivationsOf({ ...DEFAULT_SETTINGS, activations: "float16" })).toBeUndefined();
  });

  it("come back from a GPU artifact's manifest as compileGguf records them; float32 where it names none, nothing where it names another", async () => {
    const home = mkdtempSync(join(tmpdir(), "kiln-track-activations-"));
    try {
      const ggufPath = join(home, "tiny.gguf");
      await writeTinyGguf(ggufPath);
      const half = await compileGguf({
        slug: "tiny",
        ggufPath,
        home,
        device: "webgpu",
        deviceActivations: deviceActivationsOf(gpu({ activations: "float16" })),
      });
      expect(compileSettingsOfOptions(compileOptionsOfManifest(half.manifest)!)).toMatchObject({ activations: "float16", weightBits: 4, blockSize: 32 });
      const full = await compileGguf({ slug: "tiny", ggufPath, home, device: "webgpu", deviceActivations: deviceActivationsOf(GPU_DEFAULT_SETTINGS) });
      expect(full.dir).not.toBe(half.dir);
      expect(compileSettingsOfOptions(compileOptionsOfManifest(full.manifest)!)).toMatchObject({ activations: "float32" });
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
    expect(compileSettingsOfOptions(compileOptionsOfManifest(manifestWith({ accuracyLevel: 4, numerics: "fast" }))!)).toMatchObject({ activations: "float32" });
    expect(compileOptionsOfManifest(manifestWith({ accuracyLevel: 0, numerics: "fast", activations: "float64" }))!.activations).toBeUndefined();
  });
});

describe("attention as the GPU compile's deviceAttention", () => {
  it("goes to the GPU compile only", () => {
    expect(deviceAttentionOf(GPU_DEFAULT_SETTINGS)).toBe("gqa");
    expect(deviceAttentionOf(gpu({ attention: "explicit" }))).toBe("explicit");
    expect(deviceAttentionOf({ ...DEFAULT_SETTINGS, attention: "explicit" })).toBeUndefined();
    expect(completeSettings({ attention: "explicit" }).attention).toBe("explicit");
    expect(completeSettings({ attention: "flash" }).attention).toBe("gqa");
  });

  it("comes back from a GPU artifact's manifest: what the compile names, explicit where it names none; nothing on the CPU", async () => {
    const home = mkdtempSync(join(tmpdir(), "kiln-track-attention-"));
    try {
      const ggufPath = join(home, "tiny.gguf");
      await writeTinyGguf(ggufPath);
      const explicit = await compileGguf({
        slug: "tiny",
        ggufPath,
        home,
        device: "webgpu",
        deviceAttention: deviceAttentionOf(gpu({ attention: "explicit" })),
      });
      expect(compileSettingsOfOptions(compileOptionsOfManifest(explicit.manifest)!)).toMatchObject({ attention: "explicit" });
      const gqa = await compileGguf({ slug: "tiny", ggufPath, home, device: "webgpu", deviceAttention: deviceAttentionOf(GPU_DEFAULT_SETTINGS) });
      expect(gqa.dir).not.toBe(explicit.dir);
      expect(compileSettingsOfOptions(compileOptionsOfManifest(gqa.manifest)!)).toMatchObject({ attention: "gqa" });
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
    expect(compileOptionsOfManifest(manifestWith({ accuracyLevel: 4, numerics: "fast" }))!.attention).toBeUndefined();
  });
});

describe("the measurer's GPU settings", () => {
  const home = mkdtempSync(join(tmpdir(), "kiln-track-settings-"));
  afterAll(() => rmSync(home, { recursive: true, force: true }));
  const measurer = createModelMeasurer({ slug: "no-such-model", home, workload: {} as Workload, probeTokens: 8 });
  const measure = (settings: TrackSettings) => measurer.measure({ settings, threads: 1, signal: new AbortController().signal });

  it("refuses shapes and graphCapture other than their defaults, and only those", async () => {
    expect([...UNSUPPORTED_GPU_SETTINGS.keys()].sort()).toEqual(["graphCapture", "shapes"]);
    await expect(measure(gpu({ shapes: "static" }))).rejects.toThrow("the webgpu target takes only shapes dynamic: static shapes serve only graph capture");
    await expect(measure(gpu({ graphCapture: true, weightBits: 8 }))).rejects.toThrow(
      "the webgpu target takes only graphCapture false: onnxruntime-node 1.30 cannot turn on the WebGPU provider's graph capture",
    );
  });

  it("refuses graphCapture because onnxruntime-node's WebGPU options still refuse enableGraphCapture (an upgrade that takes it fails this)", async () => {
    // The binding checks the names before it looks for an adapter, so this needs no GPU.
    const asked = { name: "webgpu", enableGraphCapture: "1" } as unknown as InferenceSession.ExecutionProviderConfig;
    await expect(InferenceSession.create(probeGraphBytes(), { executionProviders: [asked] })).rejects.toThrow(
      "WebGPU EP has an unrecognized option: 'enableGraphCapture'",
    );
  });

  it("takes weightBits and blockSize on to the compile (here: to provisioning, which knows no such model)", async () => {
    await expect(measure(gpu({ weightBits: 8, blockSize: 64 }))).rejects.toThrow(/no-such-model/);
    await expect(measure(gpu({ weightBits: 8, blockSize: 64 }))).rejects.not.toThrow(/takes only/);
  });

  it("takes activations and attention on to the compile as well", async () => {
    await expect(measure(gpu({ activations: "float16" }))).rejects.toThrow(/no-such-model/);
    await expect(measure(gpu({ attention: "explicit" }))).rejects.toThrow(/no-such-model/);
  });
});
