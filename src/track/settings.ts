/**
 * What a track candidate is: one artifact (its compile options) served with one set of runtime and
 * serving settings. A promotion stores these settings beside the artifact, so that the server runs
 * the artifact the way the track measured it.
 */
import { DEFAULT_COMPILE_OPTIONS } from "../compiler/defaults.js";
import type { CompileOptions, DeviceActivations, DeviceAttention, DeviceWeights, GateUpLayout, LmHeadWeight, MinFold } from "../compiler/compile.js";
import type { ArtifactManifest } from "../runtime/artifact/index.js";
import type { ComputeDevice } from "../runtime/device/index.js";
import { DEFAULT_MAX_RUNNING, DEFAULT_PREFILL_CHUNK, DEFAULT_STEP_TOKENS } from "../scheduler/defaults.js";

export const MIN_FOLDS = ["matmul", "8bit", "block-means"] as const satisfies ReadonlyArray<MinFold>;
export const LM_HEAD_WEIGHTS = ["source", "4bit", "4bit-rescored"] as const satisfies ReadonlyArray<LmHeadWeight>;
export const GATE_UP_LAYOUTS = ["fused", "separate"] as const satisfies ReadonlyArray<GateUpLayout>;

/** GPU compile: bits per weight of the WebGPU graph's MatMulNBits (16: dense float matmuls, in the activations' type). */
export const GPU_WEIGHT_BITS = [4, 8, 16] as const;
/** GPU compile: weights per quantization block. */
export const GPU_BLOCK_SIZES = [32, 64, 128] as const;
/** GPU compile: the precision the WebGPU graph computes in (its head is float32 either way). */
export const GPU_ACTIVATIONS = ["float32", "float16"] as const satisfies ReadonlyArray<DeviceActivations>;
/** GPU compile: the attention each layer is built with (GroupQueryAttention or the CPU graph's explicit one). */
export const GPU_ATTENTION = ["gqa", "explicit"] as const satisfies ReadonlyArray<DeviceAttention>;
/** GPU compile: graph shapes fixed at compile time ("static": one decode row count, a fixed cache) or symbolic ("dynamic"). */
export const GPU_SHAPES = ["dynamic", "static"] as const;
export type GpuShapes = (typeof GPU_SHAPES)[number];

export const GRAPH_OPTIMIZATION_LEVELS = ["disabled", "basic", "extended", "all"] as const;
export type GraphOptimizationLevel = (typeof GRAPH_OPTIMIZATION_LEVELS)[number];

export interface TrackSettings {
  /**
   * Where the candidate is built for and measured: "cpu" (onnxruntime's CPU provider) or "webgpu".
   * Never varied by a candidate: each device has its own incumbent, and a candidate is judged only
   * against the incumbent of its device.
   */
  device: ComputeDevice;
  /** Compile: MatMulNBits accuracy level (4 int8 activations, 0 float). */
  accuracyLevel: number;
  /** Compile: "fast" or llama.cpp's rounding ("llama.cpp", the quality reference). */
  numerics: "fast" | "llama.cpp";
  /** Compile: block minimums as a correction matmul ("matmul"), folded into 8-bit zero points ("8bit"), or default zero points plus block offsets over block means ("block-means"). */
  minFold: MinFold;
  /** Compile: the LM head as the GGUF stores it ("source") or re-quantized to 4-bit blocks ("4bit"). */
  lmHead: LmHeadWeight;
  /** Compile: a gated MLP's gate and up projections as one matmul and a Split ("fused") or one matmul each ("separate"). */
  gateUp: GateUpLayout;
  /**
   * GPU compile: bits per weight (4, 8; 16 for dense float weights), with `blockSize` the compile's
   * `deviceWeights`. Both at their defaults (4 and 32), the weights stay the GGUF's own blocks (4-bit
   * blocks of 32 in a Q4_0 or Q4_1 file, a Q8_0 head as it is); any other pair re-quantizes every
   * linear weight to it. Ignored on the CPU.
   */
  weightBits: number;
  /** GPU compile: weights per quantization block (see `weightBits`; none at 16 bits). Ignored on the CPU. */
  blockSize: number;
  /**
   * GPU compile: the activations' precision, "float32" or "float16" (half the bytes of activations
   * and KV pools; the head and its log-probabilities stay float32). Ignored on the CPU.
   */
  activations: DeviceActivations;
  /**
   * GPU compile: each layer's attention, "gqa" (com.microsoft GroupQueryAttention over the rows' past
   * span) or "explicit" (the CPU graph's attention, in matmuls and a softmax). Ignored on the CPU.
   */
  attention: DeviceAttention;
  /** GPU compile: static or dynamic graph shapes. Ignored on the CPU. */
  shapes: GpuShapes;
  /** GPU runtime: the WebGPU provider's graph capture (replays the recorded dispatches). Ignored on the CPU. */
  graphCapture: boolean;
  /** Runtime: onnxruntime intra-op threads of the model's session. */
  threads: number;
  /** Runtime: onnxruntime graph optimizations applied when the session loads. */
  graphOptimizationLevel: GraphOptimizationLevel;
  /** Serving: prompt tokens per prefill call. */
  prefillChunk: number;
  /** Serving: sequences decoding together (KV slots). */
  maxRunning: number;
  /** Serving: most tokens computed per engine step. */
  stepTokens: number;
}

/** The settings searched, in the order candidates vary them (compile first: the biggest levers). */
export const SETTING_NAMES = [
  "accuracyLevel",
  "numerics",
  "minFold",
  "lmHead",
  "gateUp",
  "weightBits",
  "blockSize",
  "activations",
  "attention",
  "shapes",
  "graphOptimizationLevel",
  "graphCapture",
  "threads",
  "prefillChunk",
  "maxRunning",
  "stepTokens",
] as const satisfies ReadonlyArray<keyof TrackSettings>;
export type SettingName = (typeof SETTING_NAMES)[number];

/** Settings that change the artifact (everything else is applied when it is loaded and served). */
export const COMPILE_SETTINGS: ReadonlySet<SettingName> = new Set([
  "accuracyLevel",
  "numerics",
  "minFold",
  "lmHead",
  "gateUp",
  "weightBits",
  "blockSize",
  "activations",
  "attention",
  "shapes",
]);

/** Settings that mean something on the GPU only: left at their defaults, and out of promotions, on the CPU. */
export const GPU_SETTINGS: ReadonlySet<SettingName> = new Set(["weightBits", "blockSize", "activations", "attention", "shapes", "graphCapture"]);

/**
 * GPU settings that the GPU compile target and session cannot take, each with why: a candidate may
 * only leave them at their defaults, and one that changes them is recorded as failed with the reason.
 * The WebGPU provider in onnxruntime 1.30 does implement graph capture, but onnxruntime-node gives
 * a script no way to turn it on: its WebGPU options refuse the name, and the session's config
 * entries (`extra`) are added after the provider has read its own (a bogus value there is accepted
 * silently, where the same value through a known option fails). Static shapes matter only to a
 * captured graph, whose replay needs every input and output at a fixed device address.
 */
export const UNSUPPORTED_GPU_SETTINGS: ReadonlyMap<SettingName, string> = new Map([
  ["graphCapture", "onnxruntime-node 1.30 cannot turn on the WebGPU provider's graph capture (its WebGPU options refuse enableGraphCapture)"],
  ["shapes", "static shapes serve only graph capture, which onnxruntime-node 1.30 cannot turn on"],
]);

/** What `kiln serve` does without a promotion: the default compile and its default flags. */
export const DEFAULT_SETTINGS: Readonly<TrackSettings> = {
  device: "cpu",
  accuracyLevel: DEFAULT_COMPILE_OPTIONS.accuracyLevel,
  numerics: DEFAULT_COMPILE_OPTIONS.numerics,
  minFold: DEFAULT_COMPILE_OPTIONS.minFold,
  lmHead: DEFAULT_COMPILE_OPTIONS.lmHead,
  gateUp: DEFAULT_COMPILE_OPTIONS.gateUp,
  weightBits: 4,
  blockSize: 32,
  activations: "float32",
  attention: "gqa",
  shapes: "dynamic",
  graphCapture: false,
  threads: 2,
  graphOptimizationLevel: "all",
  prefillChunk: DEFAULT_PREFILL_CHUNK,
  maxRunning: DEFAULT_MAX_RUNNING,
  stepTokens: DEFAULT_STEP_TOKENS,
};

/**
 * The settings a promotion records beside its artifact: the runtime and serving ones, in the names
 * `kiln serve` applies (`PromotedSettings`). The compile options are the artifact itself (its
 * manifest records them), so they are left out.
 */
export function servingSettings(settings: TrackSettings): Record<string, unknown> {
  const gpu = settings.device !== "cpu";
  const names = SETTING_NAMES.filter((name) => !COMPILE_SETTINGS.has(name) && (gpu || !GPU_SETTINGS.has(name)));
  return { ...(gpu ? { device: settings.device } : {}), ...Object.fromEntries(names.map((name) => [name, settings[name]])) };
}

export function compileOptionsOf(settings: TrackSettings): Required<CompileOptions> {
  // The embedding lookup changes no speed or quality (both forms are exact), so the track does not vary it.
  return {
    accuracyLevel: settings.accuracyLevel,
    numerics: settings.numerics,
    minFold: settings.minFold,
    embedding: DEFAULT_COMPILE_OPTIONS.embedding,
    lmHead: settings.lmHead,
    gateUp: settings.gateUp,
    deviceWeights: settings.device === "cpu" ? DEFAULT_COMPILE_OPTIONS.deviceWeights : deviceWeightsOf(settings),
  };
}

/** `weightBits` and `blockSize` as the GPU compile's `deviceWeights`: their defaults together are the GGUF's own blocks ("source"). */
export function deviceWeightsOf(settings: Pick<TrackSettings, "weightBits" | "blockSize">): DeviceWeights {
  const { weightBits, blockSize } = settings;
  if (weightBits === DEFAULT_SETTINGS.weightBits && blockSize === DEFAULT_SETTINGS.blockSize) return "source";
  if (weightBits === 16) return { bits: 16 };
  if ((weightBits === 4 || weightBits === 8) && (blockSize === 32 || blockSize === 64 || blockSize === 128)) return { bits: weightBits, blockSize };
  throw new Error(
    `weightBits ${weightBits} with blockSize ${blockSize} is not a GPU weight form (bits ${GPU_WEIGHT_BITS.join(", ")}; blocks ${GPU_BLOCK_SIZES.join(", ")})`,
  );
}

/** The `weightBits` and `blockSize` that compile to `deviceWeights` (16 bits take the default block size: they have none). */
function weightSettingsOf(deviceWeights: DeviceWeights): Pick<TrackSettings, "weightBits" | "blockSize"> {
  if (deviceWeights === "source") return { weightBits: DEFAULT_SETTINGS.weightBits, blockSize: DEFAULT_SETTINGS.blockSize };
  if (deviceWeights.bits === 16) return { weightBits: 16, blockSize: DEFAULT_SETTINGS.blockSize };
  return { weightBits: deviceWeights.bits, blockSize: deviceWeights.blockSize };
}

/** An artifact's compile options as its manifest records them, with a GPU artifact's activations and attention. */
export type RecordedCompileOptions = CompileOptions & { activations?: DeviceActivations; attention?: DeviceAttention };

/** The track settings an artifact's compile options stand for (its GPU weight form as `weightBits` and `blockSize`). */
export function compileSettingsOfOptions(options: RecordedCompileOptions): Partial<TrackSettings> {
  const { accuracyLevel, numerics, minFold, lmHead, gateUp } = options;
  return {
    accuracyLevel,
    numerics,
    minFold,
    lmHead,
    gateUp,
    ...weightSettingsOf(options.deviceWeights ?? DEFAULT_COMPILE_OPTIONS.deviceWeights),
    activations: options.activations ?? DEFAULT_SETTINGS.activations,
    attention: options.attention ?? DEFAULT_SETTINGS.attention,
  };
}

/** The GPU compile's `deviceActivations` for a candidate: its activations on the GPU, none on the CPU. */
export function deviceActivationsOf(settings: Pick<TrackSettings, "device" | "activations">): DeviceActivations | undefined {
  return settings.device === "cpu" ? undefined : settings.activations;
}

/** The GPU compile's `deviceAttention` for a candidate: its attention on the GPU, none on the CPU. */
export function deviceAttentionOf(settings: Pick<TrackSettings, "device" | "attention">): DeviceAttention | undefined {
  return settings.device === "cpu" ? undefined : settings.attention;
}

/** The compile options an artifact was built with, as its manifest records them (null when it does not say). */
export function compileOptionsOfManifest(manifest: ArtifactManifest): RecordedCompileOptions | null {
  const recorded = manifest.choices.find((c) => c.what === "options");
  if (!recorded) return null;
  try {
    const parsed = JSON.parse(recorded.choice) as RecordedCompileOptions;
    // An artifact whose options omit minFold, lmHead, gateUp or deviceWeights was built with the default.
    return {
      accuracyLevel: parsed.accuracyLevel,
      numerics: parsed.numerics,
      minFold: parsed.minFold ?? DEFAULT_COMPILE_OPTIONS.minFold,
      lmHead: parsed.lmHead ?? DEFAULT_COMPILE_OPTIONS.lmHead,
      gateUp: parsed.gateUp ?? DEFAULT_COMPILE_OPTIONS.gateUp,
      deviceWeights: parsed.deviceWeights ?? DEFAULT_COMPILE_OPTIONS.deviceWeights,
      ...((GPU_ACTIVATIONS as readonly unknown[]).includes(parsed.activations) ? { activations: parsed.activations } : {}),
      ...(manifest.device === "webgpu" ? recordedAttention(parsed.attention) : {}),
    };
  } catch {
    return null;
  }
}

/** A GPU artifact's attention as its options record it: the compile names "gqa" and leaves "explicit" out (the ids such artifacts had); another name, nothing. */
function recordedAttention(attention: unknown): { attention?: DeviceAttention } {
  if (attention === undefined) return { attention: "explicit" };
  return (GPU_ATTENTION as readonly unknown[]).includes(attention) ? { attention: attention as DeviceAttention } : {};
}

/**
 * Full settings from a partial record (a promotion's `settings`, an old row): known fields of the
 * right type are kept, the rest come from `base`. Unknown fields are dropped.
 */
export function completeSettings(partial: Record<string, unknown> | null | undefined, base: Readonly<TrackSettings> = DEFAULT_SETTINGS): TrackSettings {
  const out: TrackSettings = { ...base };
  if (!partial) return out;
  if (partial.device === "cpu" || partial.device === "webgpu") out.device = partial.device;
  if ((GPU_WEIGHT_BITS as readonly unknown[]).includes(partial.weightBits)) out.weightBits = partial.weightBits as number;
  if ((GPU_BLOCK_SIZES as readonly unknown[]).includes(partial.blockSize)) out.blockSize = partial.blockSize as number;
  if ((GPU_ACTIVATIONS as readonly unknown[]).includes(partial.activations)) out.activations = partial.activations as DeviceActivations;
  if ((GPU_ATTENTION as readonly unknown[]).includes(partial.attention)) out.attention = partial.attention as DeviceAttention;
  if ((GPU_SHAPES as readonly unknown[]).includes(partial.shapes)) out.shapes = partial.shapes as GpuShapes;
  if (typeof partial.graphCapture === "boolean") out.graphCapture = partial.graphCapture;
  const int = (v: unknown) => typeof v === "number" && Number.isInteger(v) && v > 0;
  if (typeof partial.accuracyLevel === "number" && Number.isInteger(partial.accuracyLevel) && partial.accuracyLevel >= 0 && partial.accuracyLevel <= 4)
    out.accuracyLevel = partial.accuracyLevel;
  if (partial.numerics === "fast" || partial.numerics === "llama.cpp") out.numerics = partial.numerics;
  if ((MIN_FOLDS as readonly unknown[]).includes(partial.minFold)) out.minFold = partial.minFold as MinFold;
  if ((LM_HEAD_WEIGHTS as readonly unknown[]).includes(partial.lmHead)) out.lmHead = partial.lmHead as LmHeadWeight;
  if ((GATE_UP_LAYOUTS as readonly unknown[]).includes(partial.gateUp)) out.gateUp = partial.gateUp as GateUpLayout;
  if (int(partial.threads)) out.threads = partial.threads as number;
  if ((GRAPH_OPTIMIZATION_LEVELS as readonly unknown[]).includes(partial.graphOptimizationLevel))
    out.graphOptimizationLevel = partial.graphOptimizationLevel as GraphOptimizationLevel;
  if (int(partial.prefillChunk)) out.prefillChunk = partial.prefillChunk as number;
  if (int(partial.maxRunning)) out.maxRunning = partial.maxRunning as number;
  if (int(partial.stepTokens)) out.stepTokens = partial.stepTokens as number;
  return out;
}

/** A stable text form, equal for equal settings (for "was this tried already"). */
export function settingsKey(settings: TrackSettings): string {
  return [`device=${settings.device}`, ...SETTING_NAMES.map((name) => `${name}=${settings[name]}`)].join(",");
}

/** The settings that differ, as "prefillChunk 256→128, threads 2→1"; "" when none. */
export function describeChange(from: TrackSettings, to: TrackSettings): string {
  return [
    ...(from.device !== to.device ? [`device ${from.device}→${to.device}`] : []),
    ...SETTING_NAMES.filter((name) => from[name] !== to[name]).map((name) => `${name} ${from[name]}→${to[name]}`),
  ].join(", ");
}

/** The threads a measurement really uses: the settings' own, within the run's thread budget. */
export function measuredThreads(settings: TrackSettings, threadBudget: number): number {
  return Math.max(1, Math.min(settings.threads, threadBudget));
}
