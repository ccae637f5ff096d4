import type { GgufFile } from "../gguf/types.js";
import type { BlockContext } from "./blocks/context.js";
import type { DecoderHyper } from "./blocks/decoder.js";

/**
 * One tensor by name, or alternatives: groups of tensors of which one whole group must be present
 * (e.g. a fused `attn_qkv` or separate `attn_q`, `attn_k`, `attn_v`).
 */
export type TensorNeed = string | { oneOf: string[][] };

/** The GGUF tensors an architecture's graph reads. */
export interface TensorNeeds {
  /** Present in every file of the architecture; compiling refuses a file that lacks one, before building anything. */
  required: TensorNeed[];
  /** Read when present (biases, a separate LM head, rotary factors). */
  optional: string[];
}

/**
 * A text architecture kiln can compile: how to read its hyperparameters from GGUF metadata, which
 * tensors it needs, and how to build its graph from shared blocks. One file per architecture
 * (`graph/<name>.ts`) and one line in `architectures.ts`.
 */
export interface Architecture<H extends DecoderHyper = DecoderHyper> {
  /** The `general.architecture` value it builds. */
  readonly name: string;
  /**
   * Where several entries share a `name` (Mixtral is `llama` with experts), whether this one builds
   * the file; entries are tried in registry order, and one without `accepts` takes any file of its name.
   */
  accepts?(file: GgufFile): boolean;
  hyper(file: GgufFile): H;
  tensors(h: H): TensorNeeds;
  /** Builds the whole text graph (I/O declared, logits emitted) into ctx.g, recording its choices in ctx.choices. */
  build(ctx: BlockContext, h: H): Promise<void>;
}

/** The tensors of a pre-norm decoder outside its layers: embedding, final norm, optional untied head. */
export function decoderTensors(): TensorNeeds {
  return { required: ["token_embd.weight", "output_norm.weight"], optional: ["output.weight"] };
}

/** Concatenates the needs of several parts. */
export function mergeNeeds(...parts: TensorNeeds[]): TensorNeeds {
  return { required: parts.flatMap((p) => p.required), optional: parts.flatMap((p) => p.optional) };
}

/** Per layer, the needs `perLayer(l)` gives, for layers 0..layers-1. */
export function layerNeeds(layers: number, perLayer: (layer: number) => TensorNeeds): TensorNeeds {
  return mergeNeeds(...Array.from({ length: layers }, (_, l) => perLayer(l)));
}

/** The needs that `has` does not satisfy, described for an error message. */
export function missingTensors(needs: TensorNeeds, has: (name: string) => boolean): string[] {
  const missing: string[] = [];
  for (const need of needs.required) {
    if (typeof need === "string") {
      if (!has(need)) missing.push(need);
    } else if (!need.oneOf.some((group) => group.every(has))) {
      missing.push(need.oneOf.map((group) => group.join(" + ")).join(" or "));
    }
  }
  return missing;
}
