/**
 * Split GGUF sets as llama.cpp's gguf-split writes them: `<prefix>-00001-of-00003.gguf` ...; every
 * shard is a GGUF file of its own with `split.no` (0-based), `split.count` and
 * `split.tensors.count`; the first carries all the model's metadata, and each shard the data of its
 * own tensors.
 */
import { GgufSplitError } from "./errors.js";
import type { GgufFile, GgufValue } from "./types.js";

export const SPLIT_KEYS = { no: "split.no", count: "split.count", tensorsCount: "split.tensors.count" } as const;

const SHARD_NAME = /^(.*)-(\d{5})-of-(\d{5})\.gguf$/;

function integerKey(file: GgufFile, key: string): number | undefined {
  const value: GgufValue | undefined = file.metadata[key];
  if (value === undefined) return undefined;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0)
    throw new GgufSplitError(file.path, `${key} should be a non-negative integer, found ${String(value)}`);
  return value;
}

/** How many files the model is split into (1 for an ordinary file). */
export function splitCount(file: GgufFile): number {
  return Math.max(1, integerKey(file, SPLIT_KEYS.count) ?? 1);
}

/** The 0-based index of this shard in its set (0 for an ordinary file). */
export function splitIndex(file: GgufFile): number {
  return integerKey(file, SPLIT_KEYS.no) ?? 0;
}

/** The tensor count the whole set declares, when it does. */
export function splitTensorCount(file: GgufFile): number | undefined {
  return integerKey(file, SPLIT_KEYS.tensorsCount);
}

/** `<prefix>-%05d-of-%05d.gguf` for 0-based `index`, as llama.cpp's `llama_split_path` writes it. */
export function shardPath(prefix: string, index: number, count: number): string {
  const pad = (n: number) => String(n).padStart(5, "0");
  return `${prefix}-${pad(index + 1)}-of-${pad(count)}.gguf`;
}

/** Whether a file name is that of a shard (any of them). */
export function isShardName(path: string): boolean {
  return SHARD_NAME.test(path);
}

/** Whether a file name is that of the first shard of a set, or of no set at all: the one to open. */
export function isFirstOrOnlyGguf(path: string): boolean {
  const m = SHARD_NAME.exec(path);
  return path.endsWith(".gguf") && (m === null || Number(m[2]) === 1);
}

/** Every path of the set that `firstPath` (the first shard, holding `count` in its metadata) begins. */
export function shardPaths(firstPath: string, count: number): string[] {
  const m = SHARD_NAME.exec(firstPath);
  if (!m || Number(m[2]) !== 1 || Number(m[3]) !== count) {
    throw new GgufSplitError(firstPath, `the file says it is the first of ${count} shards, but its name does not end in ${shardPath("", 0, count)}`);
  }
  return Array.from({ length: count }, (_, i) => shardPath(m[1], i, count));
}
