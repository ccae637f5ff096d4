/**
 * The compile options' defaults, in a module of their own: the track's settings and \`kiln compile\`'s
 * help name them without loading the compiler.
 */
import type { CompileOptions } from "./compile.js";

/** What a compile does where its options say nothing. */
export const DEFAULT_COMPILE_OPTIONS: Required<CompileOptions> = {
  accuracyLevel: 4,
  numerics: "fast",
  minFold: "matmul",
  embedding: "quantized",
  lmHead: "source",
  gateUp: "fused",
  deviceWeights: "source",
};
