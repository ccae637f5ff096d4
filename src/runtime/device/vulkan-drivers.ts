/**
 * The Vulkan drivers (ICDs) the Vulkan loader would offer Dawn, read from their JSON manifests the way
 * the loader finds them on Linux, and the GPUs this machine shows. onnxruntime-node exposes no adapter
 * information, so this is how kiln names the adapter and tells a GPU from a software rasterizer.
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { basename, delimiter, join } from "node:path";
import { type AdapterMemory, readNvidiaMemory } from "./gpu-memory.js";

/** What the probe reads: the environment and the filesystem root ("/" except in unit tests). */
export interface HostView {
  env: Record<string, string | undefined>;
  /** Prefix of the system paths read (/usr/share, /etc, /sys, /proc). Default "/". */
  root?: string;
  /** Reads the NVIDIA GPU's memory. Default: nvidia-smi on the real system (no `root`), none under a fake root. */
  nvidiaMemory?: () => AdapterMemory | null;
}

/** One installed Vulkan driver, from its manifest. */
export interface VulkanDriver {
  /** The manifest's path. */
  manifest: string;
  /** Its `ICD.library_path`: the driver library the loader opens. */
  library: string;
}

/**
 * Manifest files in the loader's order: `VK_DRIVER_FILES` (or the older `VK_ICD_FILENAMES`) replaces
 * the search when set, `VK_ADD_DRIVER_FILES` comes before it; each entry is a file or a folder.
 */
export function vulkanDriverManifests(host: HostView): string[] {
  const { env } = host;
  const root = host.root ?? "/";
  const split = (list: string | undefined) => (list ?? "").split(delimiter).filter((p) => p.length > 0);
  const chosen = split(env.VK_DRIVER_FILES).length > 0 ? split(env.VK_DRIVER_FILES) : split(env.VK_ICD_FILENAMES);
  const home = env.HOME ?? "";
  const searched = [
    env.XDG_CONFIG_HOME ?? (home && join(home, ".config")),
    ...split(env.XDG_CONFIG_DIRS ?? join(root, "etc/xdg")),
    join(root, "etc"),
    env.XDG_DATA_HOME ?? (home && join(home, ".local/share")),
    ...split(env.XDG_DATA_DIRS ?? [join(root, "usr/local/share"), join(root, "usr/share")].join(delimiter)),
  ]
    .filter((dir) => dir.length > 0)
    .map((dir) => join(dir, "vulkan/icd.d"));
  const entries = [...split(env.VK_ADD_DRIVER_FILES), ...(chosen.length > 0 ? chosen : searched)];
  return [...new Set(entries.flatMap(manifestsAt))];
}

/** A manifest path as given, or the .json files of a folder in name order; nothing when absent. */
function manifestsAt(path: string): string[] {
  try {
    if (!statSync(path).isDirectory()) return [path];
    return readdirSync(path)
      .filter((name) => name.endsWith(".json"))
      .sort()
      .map((name) => join(path, name));
  } catch {
    return [];
  }
}

/** The driver a manifest names; null when it cannot be read or names no library. */
export function readVulkanDriver(manifest: string): VulkanDriver | null {
  try {
    const library = (JSON.parse(readFileSync(manifest, "utf8")) as { ICD?: { library_path?: unknown } }).ICD?.library_path;
    return typeof library === "string" && library.length > 0 ? { manifest, library } : null;
  } catch {
    return null;
  }
}

/** PCI vendor ids of GPU makers, and the Vulkan driver libraries that drive their GPUs. */
const VENDORS = {
  nvidia: { pci: "0x10de", label: "NVIDIA" },
  amd: { pci: "0x1002", label: "AMD" },
  intel: { pci: "0x8086", label: "Intel" },
  virtio: { pci: "0x1af4", label: "virtio-gpu" },
} as const;
type Vendor = keyof typeof VENDORS;

/** What kind of adapter a driver library gives: a software rasterizer, or a GPU of a vendor (null: unknown). */
export interface DriverKind {
  software: boolean;
  vendor: Vendor | null;
  /** The driver's own name, for the adapter's description. */
  driverName: string;
}

/** Tells a driver by its library's file name (the manifests say nothing else about the device). */
export function driverKind(library: string): DriverKind {
  const file = basename(library);
  if (file.startsWith("libvulkan_lvp")) return { software: true, vendor: null, driverName: "Mesa lavapipe" };
  if (file.startsWith("libvk_swiftshader")) return { software: true, vendor: null, driverName: "SwiftShader" };
  if (file.startsWith("libGLX_nvidia") || file.startsWith("libnvidia")) return { software: false, vendor: "nvidia", driverName: "NVIDIA driver" };
  if (file.startsWith("libvulkan_nouveau")) return { software: false, vendor: "nvidia", driverName: "Mesa NVK" };
  if (file.startsWith("libvulkan_radeon")) return { software: false, vendor: "amd", driverName: "Mesa RADV" };
  if (file.startsWith("libvulkan_intel")) return { software: false, vendor: "intel", driverName: "Mesa ANV" };
  if (file.startsWith("libvulkan_virtio")) return { software: false, vendor: "virtio", driverName: "Mesa Venus" };
  return { software: false, vendor: null, driverName: file };
}

/** The GPUs this machine shows: PCI display controllers' vendors, and NVIDIA's model names from its driver. */
export interface VisibleGpus {
  /** PCI vendor ids ("0x10de") of display-class devices (class 0x03xxxx). */
  pciVendors: Set<string>;
  /** Model names the NVIDIA kernel driver reports (/proc/driver/nvidia/gpus/x/information). */
  nvidiaModels: string[];
}

export function visibleGpus(host: HostView): VisibleGpus {
  const root = host.root ?? "/";
  const pciVendors = new Set<string>();
  const pci = join(root, "sys/bus/pci/devices");
  for (const device of listDir(pci)) {
    const cls = readText(join(pci, device, "class"));
    const vendor = readText(join(pci, device, "vendor"));
    if (cls?.startsWith("0x03") && vendor) pciVendors.add(vendor.toLowerCase());
  }
  const nvidia = join(root, "proc/driver/nvidia/gpus");
  const nvidiaModels = listDir(nvidia).flatMap((gpu) => {
    const model = /^Model:\s*(.+)$/m.exec(readText(join(nvidia, gpu, "information")) ?? "")?.[1]?.trim();
    return model ? [model] : [];
  });
  return { pciVendors, nvidiaModels };
}

/** An adapter Dawn could get through an installed driver. */
export interface Adapter {
  /** For people: "NVIDIA H100 80GB HBM3", "AMD GPU, Mesa RADV", "Mesa lavapipe". */
  name: string;
  /** A software rasterizer running on the CPU rather than a GPU. */
  software: boolean;
  /** The Vulkan driver manifest it comes through. */
  manifest: string;
  /** Reads the adapter's memory now (null when that fails); absent where kiln has no way to know it (only NVIDIA's driver says). */
  memory?: () => AdapterMemory | null;
}

/**
 * The adapters the installed drivers give on this machine, GPUs first (as Dawn ranks them): a
 * software driver always gives one; a GPU driver only when a GPU of its vendor is visible (Mesa's
 * package installs drivers for every vendor). A driver of unknown vendor counts when any GPU is visible.
 */
export function listAdapters(host: HostView): Adapter[] {
  const gpus = visibleGpus(host);
  const nvidiaVisible = gpus.pciVendors.has(VENDORS.nvidia.pci) || gpus.nvidiaModels.length > 0;
  const adapters: Adapter[] = [];
  for (const manifest of vulkanDriverManifests(host)) {
    const driver = readVulkanDriver(manifest);
    if (!driver) continue;
    const kind = driverKind(driver.library);
    if (kind.software) {
      adapters.push({ name: kind.driverName, software: true, manifest });
      continue;
    }
    const present =
      kind.vendor === null
        ? gpus.pciVendors.size > 0 || nvidiaVisible
        : kind.vendor === "nvidia"
          ? nvidiaVisible
          : gpus.pciVendors.has(VENDORS[kind.vendor].pci);
    if (!present) continue;
    const nvidiaDriver = kind.vendor === "nvidia" && kind.driverName === "NVIDIA driver";
    const model = nvidiaDriver ? gpus.nvidiaModels[0] : undefined;
    const name = model ?? `${kind.vendor ? VENDORS[kind.vendor].label : "a"} GPU, ${kind.driverName}`;
    const memory = nvidiaDriver ? (host.nvidiaMemory ?? (host.root === undefined ? readNvidiaMemory : undefined)) : undefined;
    adapters.push({ name, software: false, manifest, ...(memory ? { memory } : {}) });
  }
  return [...adapters.filter((a) => !a.software), ...adapters.filter((a) => a.software)];
}

function listDir(path: string): string[] {
  try {
    return readdirSync(path).sort();
  } catch {
    return [];
  }
}

function readText(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8").trim();
  } catch {
    return undefined;
  }
}
