/**
 * The real probe on this machine: Mesa's lavapipe (installed by scripts/setup.sh) is a software
 * adapter, so auto keeps the CPU and webgpu runs on it through onnxruntime's WebGPU provider.
 */
import { describe, expect, it } from "vitest";
import { resolveDevice } from "../../../../src/runtime/device/choose.js";
import { confirmWebGpu } from "../../../../src/runtime/device/probe.js";
import { listAdapters } from "../../../../src/runtime/device/vulkan-drivers.js";

describe("the device probe on this machine", () => {
  it("lists lavapipe, and the WebGPU provider computes on it", async () => {
    const adapters = listAdapters({ env: process.env });
    expect(adapters).toContainEqual(expect.objectContaining({ name: "Mesa lavapipe", software: true }));
    expect(await confirmWebGpu()).toBeNull();
  });

  it("auto keeps the CPU beside a software adapter; webgpu takes lavapipe", async () => {
    const hasGpu = listAdapters({ env: process.env }).some((a) => !a.software);
    const auto = await resolveDevice("auto");
    if (!hasGpu) expect(auto).toMatchObject({ device: "cpu", adapter: null, note: expect.stringContaining("Mesa lavapipe") });
    const onlyLavapipe = { env: { ...process.env, VK_DRIVER_FILES: listAdapters({ env: process.env }).find((a) => a.software)!.manifest } };
    expect(await resolveDevice("webgpu", onlyLavapipe)).toMatchObject({ device: "webgpu", adapter: { name: "Mesa lavapipe", software: true } });
  });
});
