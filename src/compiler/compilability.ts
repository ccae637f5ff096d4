/**
 * Whether this kiln can compile a catalogue model on this machine, and what it would take: the
 * architecture has a graph builder, every tensor type has a mapping, and the disk holds the weights
 * and the artifact. Read from the GGUF header when the model is pulled; otherwise from the catalogue
 * (architecture, pinned sizes, and the quantization named in the file name).
 */
import { readFileSync, statfsSync } from "node:fs";
import { totalmem } from "node:os";
import { dirname, join } from "node:path";
import type { ModelEntry, WeightSource } from "../catalogue/types.js";
import { isFirstOrOnlyGguf } from "./gguf/split.js";
import { GgufUnsupportedTensorTypeError } from "./gguf/errors.js";
import { readGguf } from "./gguf/reader.js";
import { GgmlType, type GgufFile, SUPPORTED_GGML_TYPES } from "./gguf/types.js";
import { architectureFor, SUPPORTED_ARCHITECTURES } from "./graph/architectures.js";

/** What compiling (and then serving) one model needs, against what this machine has. */
export interface Compilability {
  /** The graph builder, the weight types and the disk all allow it. */
  compilable: boolean;
  /** Why not, one short clause each (empty when compilable). */
  reasons: string[];
  architecture: { name: string; supported: boolean };
  /** Tensor types of the weights, and those kiln has no mapping for; `from` says how they were learnt. */
  weightTypes: { types: string[]; unsupported: string[]; from: "file header" | "file name" | "format" };
  /** Bytes of the source weights (pinned sizes, else estimated), and of the compiled artifact (estimated from the main weight type's repacking). */
  sourceBytes: number;
  artifactBytes: number;
  /** Disk the pull and the compile still need at KILN_HOME, and what is free there. */
  disk: { neededBytes: number; freeBytes: number };
  /**
   * Memory serving it takes (about the artifact's weights) against this machine's (or cgroup's).
   * Compiling streams one tensor at a time, so a model larger than memory still compiles; it just
   * cannot be served here.
   */
  memory: { neededBytes: number; totalBytes: number; fitsToServe: boolean };
}

/** What kiln compiles besides GGUF text models. */
const SPEECH_FORMATS = new Set(["ctranslate2"]);

/**
 * Tensor types llama.cpp's quantization presets use, by the tag in a file name. A Q4_K_M file keeps
 * some tensors in Q6_K (and, where a row is not a multiple of 256, Q5_0 or Q8_0); norms are F32.
 */
const PRESET_TYPES: Record<string, GgmlType[]> = {
  Q4_K_M: [GgmlType.Q4_K, GgmlType.Q6_K, GgmlType.F32],
  Q4_K_S: [GgmlType.Q4_K, GgmlType.Q5_K, GgmlType.F32],
  Q5_K_M: [GgmlType.Q5_K, GgmlType.Q6_K, GgmlType.F32],
  Q6_K: [GgmlType.Q6_K, GgmlType.F32],
  Q8_0: [GgmlType.Q8_0, GgmlType.F32],
  Q4_0: [GgmlType.Q4_0, GgmlType.F32],
  Q4_1: [GgmlType.Q4_1, GgmlType.Q8_0, GgmlType.F32],
  F16: [GgmlType.F16, GgmlType.F32],
  BF16: [GgmlType.BF16, GgmlType.F32],
  // Microsoft's "q4" Phi-3 file is a Q4_K_M mix.
  Q4: [GgmlType.Q4_K, GgmlType.Q6_K, GgmlType.F32],
};

/** Artifact bytes per source byte, by the preset's main type (MatMulNBits keeps float32 scales, and mins for K-quants). */
const ARTIFACT_RATIO: Partial<Record<GgmlType, number>> = {
  [GgmlType.Q4_K]: 1.35,
  [GgmlType.Q5_K]: 1.2,
  [GgmlType.Q6_K]: 1.5,
  [GgmlType.Q8_0]: 1.06,
  [GgmlType.Q4_0]: 1.35,
  [GgmlType.Q4_1]: 1.35,
  [GgmlType.F16]: 2,
  [GgmlType.BF16]: 2,
};

/** The quantization tag of a GGUF file name (`...-Q4_K_M.gguf`, `....Q4_1.gguf`, `...-q4.gguf`), upper-cased. */
export function quantizationTag(fileName: string): string | undefined {
  const m = /[-._](Q\d_K_[SML]|Q\d_K|Q\d_\d|BF16|F16|Q\d)(?:-\d{5}-of-\d{5})?\.gguf$/i.exec(fileName);
  return m?.[1].toUpperCase();
}

/** This machine's memory for serving: the cgroup's limit when it has a lower one. */
export function machineMemoryBytes(): number {
  const total = totalmem();
  try {
    const limit = readFileSync("/sys/fs/cgroup/memory.max", "utf8").trim();
    return /^\d+$/.test(limit) ? Math.min(total, Number(limit)) : total;
  } catch {
    return total;
  }
}

/** Free bytes on the file system holding `path` (or its nearest existing parent). */
export function freeDiskBytes(path: string): number {
  for (let p = path; ; p = dirname(p)) {
    try {
      const s = statfsSync(p);
      return s.bavail * s.bsize;
    } catch {
      if (dirname(p) === p) return 0;
    }
  }
}

function firstSource(model: ModelEntry): WeightSource {
  return model.sources[0];
}

function sourceFiles(source: WeightSource): Array<{ path: string; bytes?: number }> {
  return source.type === "hub"
    ? source.files
    : (source.members ?? [{ path: source.path ?? source.member ?? "", bytes: source.bytes }]).map((m) => ({ path: m.path ?? "", bytes: m.bytes }));
}

/** A stand-in GGUF holding only what the registry looks at to pick an architecture (name, experts). */
function headerStandIn(model: ModelEntry): GgufFile {
  const metadata = Object.assign(Object.create(null), {
    "general.architecture": model.architecture,
    ...(model.moe ? { [`${model.architecture}.expert_count`]: model.moe.experts, [`${model.architecture}.expert_used_count`]: model.moe.expertsPerToken } : {}),
  });
  return { path: `${model.slug} (catalogue)`, version: 3, metadata, tensors: [], alignment: 32, dataOffset: 0, fileSize: 0 };
}

function architectureSupported(file: GgufFile): boolean {
  try {
    architectureFor(file);
    return true;
  } catch {
    return false;
  }
}

function estimatedSourceBytes(model: ModelEntry, files: Array<{ bytes?: number }>, main: GgmlType | undefined): number {
  if (files.every((f) => f.bytes !== undefined)) return files.reduce((n, f) => n + (f.bytes ?? 0), 0);
  const bitsPerWeight: Partial<Record<GgmlType, number>> = { [GgmlType.Q4_K]: 4.85, [GgmlType.Q8_0]: 8.5, [GgmlType.F16]: 16 };
  return Math.round((model.parameters * (bitsPerWeight[main ?? GgmlType.Q4_K] ?? 4.85)) / 8);
}

export interface CompilabilityOptions {
  /** KILN_HOME, where pulls and artifacts go (free disk is measured there). */
  home: string;
  /** The pulled GGUF (its first shard), when the model is pulled: its header then speaks instead of the catalogue. */
  pulledGguf?: string;
  /** Bytes of the source already on disk (not needed again). */
  pulledBytes?: number;
  /** This machine (default: measured). */
  machine?: { memoryBytes: number; freeDiskBytes: number };
}

/** Whether this kiln can compile `model` here; see {@link Compilability}. */
export async function assessCompilability(model: ModelEntry, options: CompilabilityOptions): Promise<Compilability> {
  const machine = options.machine ?? { memoryBytes: machineMemoryBytes(), freeDiskBytes: freeDiskBytes(join(options.home, "artifacts")) };
  const source = firstSource(model);
  const files = sourceFiles(source);
  const reasons: string[] = [];
  let architecture: Compilability["architecture"];
  let weightTypes: Compilability["weightTypes"];
  let main: GgmlType | undefined;
  if (source.format === "gguf") {
    let header: GgufFile | undefined;
    try {
      header = options.pulledGguf ? await readGguf(options.pulledGguf) : undefined;
    } catch (err) {
      if (!(err instanceof GgufUnsupportedTensorTypeError)) throw err;
      const name = GgmlType[err.type] ?? String(err.type);
      reasons.push(`weight type ${name} (tensor ${err.tensor})`);
      return unsupportedFile(model, name, reasons, machine);
    }
    const file = header ?? headerStandIn(model);
    architecture = { name: String(file.metadata["general.architecture"]), supported: architectureSupported(file) };
    const types = header
      ? [...new Set(header.tensors.map((t) => t.type))]
      : (PRESET_TYPES[quantizationTag(files.find((f) => isFirstOrOnlyGguf(f.path))?.path ?? "") ?? ""] ?? []);
    main = types[0];
    weightTypes = {
      types: types.map((t) => GgmlType[t] ?? String(t)),
      unsupported: types.filter((t) => !SUPPORTED_GGML_TYPES.has(t)).map((t) => GgmlType[t] ?? String(t)),
      from: header ? "file header" : "file name",
    };
    if (!architecture.supported)
      reasons.push(model.moe ? `no graph builder for ${architecture.name} with experts` : `no graph builder for ${architecture.name}`);
    if (types.length === 0) reasons.push("unknown weight types");
    if (weightTypes.unsupported.length > 0) reasons.push(`weight types ${weightTypes.unsupported.join(", ")}`);
  } else {
    const supported = SPEECH_FORMATS.has(source.format);
    architecture = { name: model.architecture, supported };
    weightTypes = { types: [source.format], unsupported: supported ? [] : [source.format], from: "format" };
    if (!supported) reasons.push(`${source.format} weights are not compiled`);
  }
  const sourceBytes = estimatedSourceBytes(model, files, main);
  const artifactBytes = Math.round(sourceBytes * (source.format === "gguf" ? (ARTIFACT_RATIO[main ?? GgmlType.Q4_K] ?? 1.35) : 2));
  const neededDisk = Math.max(0, sourceBytes - (options.pulledBytes ?? 0)) + artifactBytes;
  if (neededDisk > machine.freeDiskBytes) reasons.push(`needs ${gib(neededDisk)} of disk, ${gib(machine.freeDiskBytes)} free`);
  return {
    compilable: reasons.length === 0,
    reasons,
    architecture,
    weightTypes,
    sourceBytes,
    artifactBytes,
    disk: { neededBytes: neededDisk, freeBytes: machine.freeDiskBytes },
    memory: { neededBytes: artifactBytes, totalBytes: machine.memoryBytes, fitsToServe: artifactBytes < machine.memoryBytes },
  };
}

/** A pulled file the reader refuses for a tensor type: not compilable, sizes from the catalogue. */
function unsupportedFile(model: ModelEntry, type: string, reasons: string[], machine: { memoryBytes: number; freeDiskBytes: number }): Compilability {
  const sourceBytes = estimatedSourceBytes(model, sourceFiles(firstSource(model)), undefined);
  return {
    compilable: false,
    reasons,
    architecture: { name: model.architecture, supported: architectureSupported(headerStandIn(model)) },
    weightTypes: { types: [type], unsupported: [type], from: "file header" },
    sourceBytes,
    artifactBytes: 0,
    disk: { neededBytes: 0, freeBytes: machine.freeDiskBytes },
    memory: { neededBytes: 0, totalBytes: machine.memoryBytes, fitsToServe: false },
  };
}

/** 12_345_678_901 → "11.5 GiB". */
export function gib(bytes: number): string {
  return `${(bytes / 2 ** 30).toFixed(bytes < 10 * 2 ** 30 ? 1 : 0)} GiB`;
}
