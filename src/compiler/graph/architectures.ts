import type { GgufFile } from "../gguf/types.js";
import { architectureName, UnsupportedArchitectureError } from "../hyper.js";
import type { GraphBuilder } from "../onnx/graph-builder.js";
import { type Architecture, missingTensors } from "./architecture.js";
import { blockContext, type BuildOptions } from "./blocks/context.js";
import type { DecoderHyper } from "./blocks/decoder.js";
import { gemma2 } from "./gemma2.js";
import { gemma3 } from "./gemma3.js";
import { llama } from "./llama.js";
import { mixtral } from "./mixtral.js";
import { phi3 } from "./phi3.js";
import { qwen2 } from "./qwen2.js";
import { qwen3 } from "./qwen3.js";
import type { Choice, WeightSource } from "./weights.js";

/**
 * Every text architecture kiln compiles, tried in this order for a file's `general.architecture`
 * (entries of the same name are told apart by their `accepts`). A new architecture is a file in
 * this folder and one line here.
 */
// Each entry has its own hyperparameter type.
const ARCHITECTURES: ReadonlyArray<Architecture<any>> = [llama, mixtral, qwen2, qwen3, phi3, gemma2, gemma3];

/** The `general.architecture` values kiln can compile (some only in certain variants). */
export const SUPPORTED_ARCHITECTURES: readonly string[] = [...new Set(ARCHITECTURES.map((a) => a.name))];

/** The registry entry that builds this file; throws {@link UnsupportedArchitectureError} when none does. */
export function architectureFor(file: GgufFile): Architecture {
  const name = architectureName(file);
  const found = ARCHITECTURES.find((a) => a.name === name && (a.accepts?.(file) ?? true));
  if (found) return found;
  const variant = ARCHITECTURES.some((a) => a.name === name) ? "this variant of it (with experts, say) has no graph builder" : undefined;
  throw new UnsupportedArchitectureError(name, SUPPORTED_ARCHITECTURES, variant);
}

/** The file lacks tensors its architecture's graph needs. */
export class MissingTensorsError extends Error {
  constructor(
    readonly architecture: string,
    readonly missing: string[],
  ) {
    super(
      `this ${architecture} file lacks tensors its graph needs: ${missing.slice(0, 8).join("; ")}${missing.length > 8 ? ` (and ${missing.length - 8} more)` : ""}`,
    );
    this.name = "MissingTensorsError";
  }
}

/** A text architecture resolved for one file: its entry and hyperparameters, checked against the file's tensors. */
export interface ResolvedArchitecture {
  architecture: Architecture;
  hyper: DecoderHyper;
}

/** Reads the file's architecture and hyperparameters, and refuses it early when it lacks a needed tensor. */
export function resolveArchitecture(file: GgufFile, weights: Pick<WeightSource, "has">): ResolvedArchitecture {
  const architecture = architectureFor(file);
  const hyper = architecture.hyper(file);
  const missing = missingTensors(architecture.tensors(hyper), (n) => weights.has(n));
  if (missing.length > 0) throw new MissingTensorsError(architecture.name, missing);
  return { architecture, hyper };
}

/** Builds the resolved architecture's text graph into `g`; returns every choice made, for the manifest. */
export async function buildTextGraph(g: GraphBuilder, weights: WeightSource, resolved: ResolvedArchitecture, options: BuildOptions): Promise<Choice[]> {
  const ctx = blockContext(g, weights, options);
  await resolved.architecture.build(ctx, resolved.hyper);
  return [
    { what: "architecture", choice: resolved.architecture.name, exact: true, why: "general.architecture" },
    {
      what: "attention",
      choice: "decomposed MatMul/Softmax over a runtime-owned KV cache (keys transposed)",
      exact: true,
      why: "GroupQueryAttention's present outputs would be copied whole to JS on every step by onnxruntime-node",
    },
    options.numerics === "llama.cpp"
      ? {
          what: "numerics",
          choice:
            "llama.cpp emulation: Q8_0/Q8_1 activation blocks with fp16 scales (Q8_K super-blocks for K-quants, f16/bf16 for F16/BF16 weights), fp16 KV/query/probabilities, MatMulNBits accuracy_level 0",
          exact: true,
          why: "token-exact agreement with llama.cpp's CPU path",
        }
      : {
          what: "numerics",
          choice: `fast: MatMulNBits accuracy_level ${options.accuracyLevel}`,
          exact: options.accuracyLevel === 0,
          why:
            options.accuracyLevel === 4
              ? "int8 activations: the CPU fast path (llama.cpp likewise quantizes activations, with other rounding)"
              : "float activations",
        },
    ...(options.minFold === "8bit" && options.numerics !== "llama.cpp"
      ? [
          {
            what: "block minimums",
            choice: "folded into 8-bit integer zero points",
            exact: false,
            why: "one MatMulNBits per linear instead of four nodes; each weight within 1/32 of its block's step",
          },
        ]
      : []),
    ...(options.minFold === "block-means" && options.numerics !== "llama.cpp"
      ? [
          {
            what: "block minimums",
            choice: "default zero point + block offsets over the input's appended block means",
            exact: false,
            why: "one MatMulNBits per linear at the source's code width, no zero points (the symmetric kernels), no float32 minimum table; offsets at 8 bits of resolution per row",
          },
        ]
      : []),
    ...ctx.choices,
  ];
}
