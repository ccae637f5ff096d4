/**
 * An adapter's memory, where its driver says it: NVIDIA's `nvidia-smi`. Neither onnxruntime-node nor
 * the NVIDIA kernel driver's /proc files tell it, so elsewhere kiln does not know it.
 */
import { execFileSync } from "node:child_process";

/** An adapter's memory in bytes, as its driver reports it at the time of reading. */
export interface AdapterMemory {
  totalBytes: number;
  /** Taken by every process on the adapter, this one included. */
  usedBytes: number;
}

/** nvidia-smi's arguments for the first lines' "total, used" in MiB, one line per GPU. */
export const NVIDIA_SMI_MEMORY_ARGS = ["--query-gpu=memory.total,memory.used", "--format=csv,noheader,nounits"];

/** The first GPU's memory from nvidia-smi's output for {@link NVIDIA_SMI_MEMORY_ARGS} (MiB); null when unreadable. */
export function parseNvidiaSmiMemory(output: string): AdapterMemory | null {
  const match = /^\s*(\d+(?:\.\d+)?)\s*,\s*(\d+(?:\.\d+)?)\s*$/m.exec(output.split("\n")[0] ?? "");
  if (!match) return null;
  const [total, used] = [Number(match[1]), Number(match[2])];
  return total > 0 && used <= total ? { totalBytes: total * 2 ** 20, usedBytes: used * 2 ** 20 } : null;
}

/** The first NVIDIA GPU's memory now; null without nvidia-smi or when it fails (it answers in well under a second). */
export function readNvidiaMemory(): AdapterMemory | null {
  try {
    return parseNvidiaSmiMemory(execFileSync("nvidia-smi", NVIDIA_SMI_MEMORY_ARGS, { encoding: "utf8", timeout: 10_000, stdio: ["ignore", "pipe", "ignore"] }));
  } catch {
    return null;
  }
}
