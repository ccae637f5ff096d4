import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { chooseDevice, describeDevice, DeviceUnavailableError, resolveDevice } from "../../../../src/runtime/device/choose.js";
import { type HostView, listAdapters, vulkanDriverManifests } from "../../../../src/runtime/device/vulkan-drivers.js";

/** A fake machine: Vulkan driver manifests, PCI devices and NVIDIA driver files under a temporary root. */
let root: string;
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), "kiln-device-"));
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

function driver(dir: string, file: string, library: string): string {
  mkdirSync(join(root, dir), { recursive: true });
  const path = join(root, dir, file);
  writeFileSync(path, JSON.stringify({ file_format_version: "1.0.0", ICD: { library_path: library, api_version: "1.3.0" } }));
  return path;
}

function pciDevice(slot: string, cls: string, vendor: string): void {
  const dir = join(root, "sys/bus/pci/devices", slot);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "class"), `${cls}\n`);
  writeFileSync(join(dir, "vendor"), `${vendor}\n`);
}

function nvidiaGpu(model: string): void {
  const dir = join(root, "proc/driver/nvidia/gpus/0000:00:05.0");
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "information"), `Model: \t\t ${model}\nIRQ:   \t\t 42\n`);
}

/** The host with no variables but HOME, which points into the fake root. */
const host = (env: Record<string, string> = {}): HostView => ({ env: { HOME: join(root, "home"), ...env }, root });

/** Mesa's package: a driver for every vendor, and lavapipe. */
function mesaDrivers(): void {
  for (const [file, lib] of [
    ["intel_icd.json", "libvulkan_intel.so"],
    ["lvp_icd.json", "libvulkan_lvp.so"],
    ["radeon_icd.json", "libvulkan_radeon.so"],
    ["virtio_icd.json", "libvulkan_virtio.so"],
  ])
    driver("usr/share/vulkan/icd.d", file, lib);
}

describe("the adapters a machine's Vulkan drivers give", () => {
  it("Mesa's drivers without a GPU give lavapipe only, a software adapter", () => {
    mesaDrivers();
    pciDevice("0000:00:00.0", "0x060000", "0x8086"); // an Intel host bridge is not a GPU
    expect(listAdapters(host())).toEqual([{ name: "Mesa lavapipe", software: true, manifest: join(root, "usr/share/vulkan/icd.d/lvp_icd.json") }]);
  });

  it("a GPU of a vendor with its driver comes first, named by the NVIDIA driver's model name", () => {
    mesaDrivers();
    driver("etc/vulkan/icd.d", "nvidia_icd.json", "libGLX_nvidia.so.0");
    pciDevice("0000:00:05.0", "0x030200", "0x10de");
    nvidiaGpu("NVIDIA H100 80GB HBM3");
    expect(listAdapters(host()).map((a) => [a.name, a.software])).toEqual([
      ["NVIDIA H100 80GB HBM3", false],
      ["Mesa lavapipe", true],
    ]);
  });

  it("an NVIDIA adapter reads its memory from nvidia-smi; other adapters have no memory reader", () => {
    mesaDrivers();
    driver("etc/vulkan/icd.d", "nvidia_icd.json", "libGLX_nvidia.so.0");
    nvidiaGpu("NVIDIA H100 80GB HBM3");
    const memory = { totalBytes: 80 * 2 ** 30, usedBytes: 2 ** 30 };
    const [gpu, lavapipe] = listAdapters({ ...host(), nvidiaMemory: () => memory });
    expect(gpu.memory?.()).toEqual(memory);
    expect(lavapipe.memory).toBeUndefined();
    // Under a fake root nvidia-smi is never run.
    expect(listAdapters(host())[0].memory).toBeUndefined();
  });

  it("an AMD display controller makes RADV's adapter", () => {
    mesaDrivers();
    pciDevice("0000:03:00.0", "0x030000", "0x1002");
    expect(listAdapters(host()).map((a) => a.name)).toEqual(["AMD GPU, Mesa RADV", "Mesa lavapipe"]);
  });

  it("VK_DRIVER_FILES replaces the search, VK_ICD_FILENAMES stands in for it, VK_ADD_DRIVER_FILES comes first", () => {
    mesaDrivers();
    const nvidia = driver("opt/nvidia/icd.d", "nvidia_icd.json", "libGLX_nvidia.so.0");
    const lvp = join(root, "usr/share/vulkan/icd.d/lvp_icd.json");
    expect(vulkanDriverManifests(host({ VK_DRIVER_FILES: nvidia }))).toEqual([nvidia]);
    expect(vulkanDriverManifests(host({ VK_ICD_FILENAMES: `${nvidia}:${lvp}` }))).toEqual([nvidia, lvp]);
    expect(vulkanDriverManifests(host({ VK_DRIVER_FILES: join(root, "opt/nvidia/icd.d"), VK_ADD_DRIVER_FILES: lvp }))).toEqual([lvp, nvidia]);
    // The NVIDIA driver alone, with no NVIDIA GPU to drive: no adapter.
    expect(listAdapters(host({ VK_DRIVER_FILES: nvidia }))).toEqual([]);
  });

  it("searches the XDG folders and skips manifests that name no library", () => {
    driver("home/.local/share/vulkan/icd.d", "lvp_icd.json", "/opt/mesa/libvulkan_lvp.so");
    mkdirSync(join(root, "etc/vulkan/icd.d"), { recursive: true });
    writeFileSync(join(root, "etc/vulkan/icd.d/broken.json"), "{ not json");
    expect(listAdapters(host()).map((a) => a.name)).toEqual(["Mesa lavapipe"]);
  });
});

describe("choosing the device", () => {
  const lavapipe = { name: "Mesa lavapipe", software: true, manifest: "lvp_icd.json" };
  const h100 = { name: "NVIDIA H100 80GB HBM3", software: false, manifest: "nvidia_icd.json" };

  it("auto takes a GPU, and the CPU beside a software adapter only, saying why", () => {
    expect(chooseDevice("auto", [h100, lavapipe])).toEqual({ device: "webgpu", adapter: h100 });
    const cpu = chooseDevice("auto", [lavapipe]);
    expect(cpu).toMatchObject({ device: "cpu", adapter: null });
    expect(cpu.note).toBe("no GPU adapter (only Mesa lavapipe, a software adapter, which --device webgpu uses); the CPU serves");
    expect(chooseDevice("auto", []).note).toBe("no GPU adapter (no Vulkan driver for a GPU); the CPU serves");
  });

  it("webgpu takes a GPU first, a software adapter when that is all, and fails with none", () => {
    expect(chooseDevice("webgpu", [h100, lavapipe]).adapter).toBe(h100);
    expect(chooseDevice("webgpu", [lavapipe])).toEqual({ device: "webgpu", adapter: lavapipe });
    expect(() => chooseDevice("webgpu", [])).toThrow(DeviceUnavailableError);
    expect(() => chooseDevice("webgpu", [])).toThrow(/^--device webgpu: no WebGPU adapter .*--device cpu$/);
  });

  it("cpu is the CPU whatever the adapters", () => {
    expect(chooseDevice("cpu", [h100])).toEqual({ device: "cpu", adapter: null });
  });

  it("names the device and adapter in one phrase", () => {
    expect(describeDevice({ device: "webgpu", adapter: h100 })).toBe("webgpu on NVIDIA H100 80GB HBM3");
    expect(describeDevice({ device: "webgpu", adapter: lavapipe })).toBe("webgpu on Mesa lavapipe (software, on the CPU)");
    expect(describeDevice({ device: "cpu", adapter: null })).toBe("cpu");
  });
});

describe("resolving the device on a machine", () => {
  /** The provider's proof, as the test says it goes; counts its calls. */
  function provider(problem: string | null) {
    const calls = { count: 0 };
    return { calls, confirm: async () => (calls.count++, problem) };
  }
  const NO_ADAPTER = "Failed to get a WebGPU adapter: No supported adapters";

  beforeEach(() => {
    mesaDrivers();
    driver("etc/vulkan/icd.d", "nvidia_icd.json", "libGLX_nvidia.so.0");
  });

  it("auto takes a GPU that computes, and falls back to the CPU, saying why, when it does not", async () => {
    nvidiaGpu("NVIDIA H100 80GB HBM3");
    const works = provider(null);
    expect(await resolveDevice("auto", host(), works.confirm)).toMatchObject({ device: "webgpu", adapter: { name: "NVIDIA H100 80GB HBM3" } });
    expect(works.calls.count).toBe(1);
    expect(await resolveDevice("auto", host(), provider(NO_ADAPTER).confirm)).toEqual({
      device: "cpu",
      adapter: null,
      note: `the WebGPU provider failed on NVIDIA H100 80GB HBM3 (${NO_ADAPTER}); the CPU serves`,
    });
  });

  it("auto beside a software adapter only never starts the provider", async () => {
    const untouched = provider(null);
    expect(await resolveDevice("auto", host(), untouched.confirm)).toMatchObject({ device: "cpu", note: expect.stringContaining("Mesa lavapipe") });
    expect(untouched.calls.count).toBe(0);
  });

  it("webgpu takes lavapipe when it computes, and fails in one line when it does not", async () => {
    expect(await resolveDevice("webgpu", host(), provider(null).confirm)).toMatchObject({
      device: "webgpu",
      adapter: { name: "Mesa lavapipe", software: true },
    });
    await expect(resolveDevice("webgpu", host(), provider(NO_ADAPTER).confirm)).rejects.toThrow(
      `--device webgpu: no WebGPU adapter (the WebGPU provider failed on Mesa lavapipe: ${NO_ADAPTER}); install a Vulkan driver (scripts/setup.sh installs Mesa's lavapipe) or use --device cpu`,
    );
  });

  it("webgpu with no driver kiln knows still runs where the provider finds an adapter, unnamed", async () => {
    const none = host({ VK_DRIVER_FILES: join(root, "nowhere.json") });
    expect(await resolveDevice("webgpu", none, provider(null).confirm)).toMatchObject({ device: "webgpu", adapter: { software: false } });
    await expect(resolveDevice("webgpu", none, provider(NO_ADAPTER).confirm)).rejects.toThrow(DeviceUnavailableError);
  });

  it("cpu probes nothing", async () => {
    const untouched = provider(null);
    expect(await resolveDevice("cpu", host(), untouched.confirm)).toEqual({ device: "cpu", adapter: null });
    expect(untouched.calls.count).toBe(0);
  });
});
