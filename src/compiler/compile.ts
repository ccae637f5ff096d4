import { writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { artifactsDir, kilnHome } from "../catalogue/paths.js";
import {
  ARTIFACT_FILES,
  type ArtifactManifest,
  checkDeviceGraphIo,
  checkTextGraphIo,
  DEVICE_GRAPH_REVISION,
  deviceGraphIo,
  type ModelShape,
  readManifest,
  slotCopyGraphIo,
} from "../runtime/artifact/index.js";
import { ArtifactFolder, artifactId } from "./artifact-writer.js";
import { endOfGenerationIds } from "./eog.js";
import { GgufWeights } from "./gguf-weights.js";
import { readGguf } from "./gguf/reader.js";
import { buildTextGraph, resolveArchitecture } from "./graph/architectures.js";
import type {
  BuildDevice,
  BuildOptions,
  DeviceActivations,
  DeviceAttention,
  DeviceWeights,
  EmbeddingLookup,
  GateUpLayout,
  LmHeadWeight,
  MinFold,
} from "./graph/blocks/context.js";

export type { BuildDevice, DeviceActivations, DeviceAttention, DeviceWeights, EmbeddingLookup, GateUpLayout, LmHeadWeight, MinFold };
import type { Choice } from "./graph/weights.js";
import { GraphBuilder } from "./onnx/graph-builder.js";
import { DataType } from "./onnx/onnx-proto.js";
import { buildSlotCopyGraph } from "./graph/slot-copy.js";
import { digestGgufSource, type SourceDigest } from "./source-digest.js";
import { chatTemplate, tokenizerSpec } from "./tokenizer-spec.js";
import { DEFAULT_COMPILE_OPTIONS } from "./defaults.js";

/**
 * Part of every artifact id. 0.3.0: the manifest records each file's size and sha256 (`files`).
 * 0.4.0: text graphs take `logits_from` and can return every position's logits (prompt scoring).
 * 0.5.0: one graph builder per architecture (qwen3, phi3 added); Llama 3.1's `rope_freqs` factors and
 * declared rope scaling applied (older artifacts of such files rotate wrongly at long range).
 * 0.5.1: Gemma's sliding-window layers read their KV cache as a ring (`ring_positions`, manifest
 * `shape.slidingWindow`); other architectures' graphs are unchanged.
 * 0.6.0: the token embedding is looked up from its quantized blocks (GatherBlockQuantized); the
 * `minFold` option. 0.6.1: attention as one matmul per query head over a broadcast cache (0.6.0
 * artifacts built before 0.6.1 carry the earlier attention under the same id). The `lmHead`
 * option (no version change: it is in the id only when not the default, whose graph is unchanged).
 * `lmHead: "4bit-rescored"`, the `gateUp` option, `minFold: "block-means"` and `deviceWeights` likewise.
 * 0.7.0: CPU text graphs also return the final norm's output at every new position (`hidden`, for embeddings).
 */
export const COMPILER_VERSION = "0.7.0";

/** Options that change the compiled graph (part of the artifact id). */
export interface CompileOptions {
  /** MatMulNBits accuracy_level: 4 = int8 activations (fast), 0 = float activations. Default 4. */
  accuracyLevel?: number;
  /** "fast" (default) or "llama.cpp" rounding emulation; see BuildOptions.numerics. */
  numerics?: "fast" | "llama.cpp";
  /** Block minimums as a correction matmul ("matmul", default), folded into 8-bit zero points ("8bit"), or default zero points plus block offsets over block means ("block-means"); see BuildOptions.minFold. */
  minFold?: MinFold;
  /** Token embedding as its quantized blocks ("quantized", default) or a float32 table ("float32"); see BuildOptions.embedding. */
  embedding?: EmbeddingLookup;
  /** LM head as stored ("source", default), re-quantized to 4-bit blocks ("4bit"), or that with its top logits recomputed ("4bit-rescored"); see BuildOptions.lmHead. */
  lmHead?: LmHeadWeight;
  /** Gate and up projections as one fused matmul ("fused", default) or one each ("separate"); see BuildOptions.gateUp. */
  gateUp?: GateUpLayout;
  /**
   * The GPU target's linear weights: "source" (default), the GGUF's own blocks; `{ bits: 4 | 8,
   * blockSize: 32 | 64 | 128 }` each re-quantized to MatMulNBits blocks of that many bits and weights
   * (one stored so is kept); `{ bits: 16 }` dense float MatMul weights (see BuildOptions.deviceWeights).
   * Part of the GPU artifact's id when not "source"; ignored on the CPU.
   */
  deviceWeights?: DeviceWeights;
}

export interface CompileRequest {
  slug: string;
  ggufPath: string;
  options?: CompileOptions;
  /**
   * The device the artifact is built for: "cpu" (default) or "webgpu", the GPU target: float32 (or
   * float16, `deviceActivations`) activations at accuracy_level 0 whatever `accuracyLevel` says
   * (WebGPU has no int8-activation path), the KV cache in a device-resident pool and each position's top candidates returned
   * instead of its logits (`runtime/artifact/device-graph.ts`), plus a slot-copy graph. Its own
   * artifact beside the CPU one: the device is part of the id when not "cpu".
   */
  device?: BuildDevice;
  /**
   * The GPU target's activations: "float32" (default) or "float16" (see BuildOptions.activations);
   * part of its id. Ignored on the CPU. float16 is exact to within its rounding on lavapipe but runs
   * there several times slower than float32 (software half floats); a hardware GPU is where it pays.
   */
  deviceActivations?: DeviceActivations;
  /**
   * The GPU target's attention: "gqa" (default) or "explicit" (see BuildOptions.deviceAttention);
   * part of its id when "gqa" (explicit artifacts keep the ids they had before the option). Ignored on the CPU.
   */
  deviceAttention?: DeviceAttention;
  /** Root of kiln's store (default `kilnHome()`). */
  home?: string;
  /** Rebuild even when an artifact with the same id exists. */
  force?: boolean;
  /**
   * The SHA-256 the source must have (what was pulled, what the catalogue pins): a file whose hash
   * differs is neither compiled nor matched to an artifact ({@link SourceChangedError}). For a split
   * model, that of `ggufPath`, the first shard.
   */
  sourceSha256?: string;
  /** For a split model: the SHA-256 each other shard must have, by file name (as `sourceSha256`). */
  shardSha256?: Record<string, string>;
  /**
   * Bytes of weights per external data file: past it they continue in `model.onnx.data.1`, `.2` ...
   * (a tensor is never split). Default {@link DEFAULT_WEIGHTS_FILE_BYTES}. Not part of the artifact id.
   */
  maxWeightsFileBytes?: number;
  onStage?: (stage: string) => void;
}

export interface CompileResult {
  dir: string;
  manifest: ArtifactManifest;
  reused: boolean;
  seconds: number;
}

export { SourceChangedError } from "./source-digest.js";

/** 16 GiB: a 70B model's artifact (about 60 GB) is four files that copy, resume and verify one at a time. */
export const DEFAULT_WEIGHTS_FILE_BYTES = 16 * 2 ** 30;

/** What an unset compile option means (kept in `defaults.ts`). */
export { DEFAULT_COMPILE_OPTIONS };

/**
 * Every option set, for the build; `minFold`, `embedding` and the other choices (the `device` too) appear only when not the default, so that
 * artifacts compiled before it existed keep their ids (the id hashes these options).
 */
function resolvedOptions(
  options: CompileOptions = {},
  device: BuildDevice = "cpu",
  activations: DeviceActivations = "float32",
  attention: DeviceAttention = "gqa",
): CompileOptions &
  Required<Pick<CompileOptions, "accuracyLevel" | "numerics">> & { device?: BuildDevice; activations?: DeviceActivations; attention?: DeviceAttention } {
  const minFold = options.minFold ?? DEFAULT_COMPILE_OPTIONS.minFold;
  const embedding = options.embedding ?? DEFAULT_COMPILE_OPTIONS.embedding;
  const lmHead = options.lmHead ?? DEFAULT_COMPILE_OPTIONS.lmHead;
  const gateUp = options.gateUp ?? DEFAULT_COMPILE_OPTIONS.gateUp;
  const deviceWeights = checkedDeviceWeights(options.deviceWeights ?? DEFAULT_COMPILE_OPTIONS.deviceWeights);
  return {
    accuracyLevel: device === "webgpu" ? 0 : (options.accuracyLevel ?? DEFAULT_COMPILE_OPTIONS.accuracyLevel),
    numerics: options.numerics ?? DEFAULT_COMPILE_OPTIONS.numerics,
    ...(minFold !== DEFAULT_COMPILE_OPTIONS.minFold ? { minFold } : {}),
    ...(embedding !== DEFAULT_COMPILE_OPTIONS.embedding ? { embedding } : {}),
    ...(lmHead !== DEFAULT_COMPILE_OPTIONS.lmHead ? { lmHead } : {}),
    ...(gateUp !== DEFAULT_COMPILE_OPTIONS.gateUp ? { gateUp } : {}),
    ...(device !== "cpu"
      ? {
          device,
          activations,
          ...(attention !== "explicit" ? { attention } : {}),
          ...(deviceWeights !== "source" ? { deviceWeights } : {}),
          revision: DEVICE_GRAPH_REVISION,
        }
      : {}),
  };
}

/** `deviceWeights` checked, as the id records it: 16 bits take no block size, so an untyped caller's is dropped (one id per graph). */
function checkedDeviceWeights(w: DeviceWeights): DeviceWeights {
  if (w === "source") return w;
  if (w.bits === 16) return { bits: 16 };
  if ((w.bits === 4 || w.bits === 8) && [32, 64, 128].includes(w.blockSize)) return { bits: w.bits, blockSize: w.blockSize };
  throw new Error(`deviceWeights: ${JSON.stringify(w)} is not "source", { bits: 16 } or { bits: 4 or 8, blockSize: 32, 64 or 128 }`);
}

/** Compiles a GGUF text model of a supported architecture (`graph/architectures.ts`) into an artifact folder (graph, weights, tokenizer, template, manifest). */
export async function compileGguf(req: CompileRequest): Promise<CompileResult> {
  const started = Date.now();
  const options = resolvedOptions(req.options, req.device, req.deviceActivations, req.deviceAttention);
  const stage = req.onStage ?? (() => {});
  stage("hashing source");
  const source = await digestGgufSource(req.ggufPath, { ...req.shardSha256, [basename(req.ggufPath)]: req.sourceSha256 });
  const sha256 = source.sha256;
  const id = artifactId(req.slug, sha256, COMPILER_VERSION, options);
  const dir = join(artifactsDir(req.slug, req.home ?? kilnHome()), id);
  if (!req.force) {
    try {
      return { dir, manifest: readManifest(dir), reused: true, seconds: (Date.now() - started) / 1000 };
    } catch {
      // not compiled yet
    }
  }
  stage("reading GGUF");
  const file = await readGguf(req.ggufPath);
  const weights = new GgufWeights(file);
  const resolved = resolveArchitecture(file, weights);
  const hyper = resolved.hyper;
  const folder = new ArtifactFolder(dir);
  try {
    stage("building graph");
    const builder = new GraphBuilder(folder.path(ARTIFACT_FILES.weights), req.maxWeightsFileBytes ?? DEFAULT_WEIGHTS_FILE_BYTES);
    const build: BuildOptions = {
      accuracyLevel: options.accuracyLevel,
      numerics: options.numerics,
      minFold: options.minFold ?? DEFAULT_COMPILE_OPTIONS.minFold,
      embedding: options.embedding ?? DEFAULT_COMPILE_OPTIONS.embedding,
      lmHead: options.lmHead ?? DEFAULT_COMPILE_OPTIONS.lmHead,
      gateUp: options.gateUp ?? DEFAULT_COMPILE_OPTIONS.gateUp,
      device: options.device ?? "cpu",
      activations: options.activations ?? "float32",
      deviceAttention: options.attention ?? "explicit",
      deviceWeights: options.deviceWeights ?? DEFAULT_COMPILE_OPTIONS.deviceWeights,
    };
    builder.halfFloats = build.device === "webgpu" && build.activations === "float16";
    const choices = await buildTextGraph(builder, weights, resolved, build);
    const io = { inputs: builder.inputs.map((i) => i.name), outputs: builder.outputs.map((o) => o.name) };
    const onDevice = build.device === "webgpu";
    if (onDevice) checkDeviceGraphIo(io, deviceGraphIo(hyper.layers), `the graph built for ${req.slug}`);
    else checkTextGraphIo(io, hyper.layers, `the graph built for ${req.slug}`, hyper.slidingWindow !== undefined);
    const graph = builder.finish(`${req.slug}`, COMPILER_VERSION, { kiln_artifact: id });
    writeFileSync(folder.path(ARTIFACT_FILES.graph), graph);
    if (onDevice) writeSlotCopyGraph(folder, req.slug, id, hyper, build.activations === "float16" ? DataType.FLOAT16 : DataType.FLOAT);
    stage("writing tokenizer");
    const spec = tokenizerSpec(file);
    folder.writeTokenizer(spec, chatTemplate(file));
    const manifest: Omit<ArtifactManifest, "files"> = {
      id,
      slug: req.slug,
      ...(onDevice ? { device: build.device } : {}),
      compilerVersion: COMPILER_VERSION,
      createdAt: new Date().toISOString(),
      source: { file: basename(req.ggufPath), sha256, bytes: source.bytes },
      shape: modelShape(hyper),
      io,
      choices: [...choices, ...sourceChoices(source), { what: "options", choice: JSON.stringify(options), exact: true, why: "compile options" }],
      stopTokenIds: endOfGenerationIds(spec),
    };
    const committed = await folder.commit(manifest);
    return { dir, manifest: committed, reused: false, seconds: (Date.now() - started) / 1000 };
  } catch (err) {
    try {
      folder.abandon();
    } catch {
      // The compile's own error (ENOSPC on a full disk, say) is what the user must see, not a failed cleanup's.
    }
    throw err;
  }
}

/** The GPU target's slot-copy graph, beside its step graph (it has no weights: its data file stays empty). */
function writeSlotCopyGraph(folder: ArtifactFolder, slug: string, id: string, shape: ModelShape, poolType: DataType): void {
  const g = new GraphBuilder(folder.path(ARTIFACT_FILES.slotCopyWeights));
  buildSlotCopyGraph(g, shape, poolType);
  const io = { inputs: g.inputs.map((i) => i.name), outputs: g.outputs.map((o) => o.name) };
  checkDeviceGraphIo(io, slotCopyGraphIo(shape.layers), `the slot-copy graph built for ${slug}`);
  writeFileSync(folder.path(ARTIFACT_FILES.slotCopyGraph), g.finish(`${slug}.slot-copy`, COMPILER_VERSION, { kiln_artifact: id }));
}

/** A split model's shards, named in the manifest (its `source.sha256` is a digest over theirs). */
function sourceChoices(source: SourceDigest): Choice[] {
  if (source.files.length === 1) return [];
  const shards = source.files.map((f) => `${f.file} (${f.bytes} bytes, sha256 ${f.sha256})`).join("; ");
  return [
    {
      what: "source",
      choice: `split GGUF of ${source.files.length} shards read as one: ${shards}`,
      exact: true,
      why: 'source.sha256 is the sha256 of the shards\' "name sha256" lines',
    },
  ];
}

/** The runtime's part of the hyperparameters (what the manifest records). */
function modelShape(h: ModelShape): ModelShape {
  const { architecture, layers, hidden, heads, kvHeads, headDim, vocab, contextLength, slidingWindow } = h;
  return { architecture, layers, hidden, heads, kvHeads, headDim, vocab, contextLength, ...(slidingWindow ? { slidingWindow } : {}) };
}
