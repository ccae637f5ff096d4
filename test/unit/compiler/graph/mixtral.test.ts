// Which registry entry builds a `llama` file (experts or not), and the routing read from its metadata.
import { describe, expect, it } from "vitest";
import type { GgufFile, GgufValue } from "../../../../src/compiler/gguf/types.js";
import { architectureFor } from "../../../../src/compiler/graph/architectures.js";
import { readMoeSpec } from "../../../../src/compiler/graph/blocks/moe.js";
import { llama } from "../../../../src/compiler/graph/llama.js";
import { mixtral } from "../../../../src/compiler/graph/mixtral.js";
import { UnsupportedHyperparameterError } from "../../../../src/compiler/hyper.js";

/** A file with only metadata: what the architecture choice and readMoeSpec look at. */
function fileWith(metadata: Record<string, GgufValue>): GgufFile {
  return { path: "x.gguf", version: 3, metadata: { "general.architecture": "llama", ...metadata }, tensors: [], alignment: 32, dataOffset: 0, fileSize: 0 };
}

describe("Mixtral is llama with experts", () => {
  it("builds a llama file with llama.expert_count > 0 as Mixtral, and one without experts as dense llama", () => {
    expect(architectureFor(fileWith({ "llama.expert_count": 8, "llama.expert_used_count": 2 }))).toBe(mixtral);
    expect(architectureFor(fileWith({}))).toBe(llama);
    expect(architectureFor(fileWith({ "llama.expert_count": 0 }))).toBe(llama);
  });

  it("reads the routing: experts, experts per token, and the weights scale (1 when absent or 0)", () => {
    expect(readMoeSpec(fileWith({ "llama.expert_count": 8, "llama.expert_used_count": 2 }), "llama", 14336)).toEqual({
      experts: 8,
      expertsUsed: 2,
      ffn: 14336,
      weightsScale: 1,
    });
    expect(readMoeSpec(fileWith({ "llama.expert_count": 8, "llama.expert_used_count": 2, "llama.expert_weights_scale": 0 }), "llama", 64).weightsScale).toBe(1);
    expect(readMoeSpec(fileWith({ "llama.expert_count": 8, "llama.expert_used_count": 2, "llama.expert_weights_scale": 2.5 }), "llama", 64).weightsScale).toBe(
      2.5,
    );
  });

  it("refuses more experts per token than experts", () => {
    expect(() => readMoeSpec(fileWith({ "llama.expert_count": 4, "llama.expert_used_count": 5 }), "llama", 64)).toThrow(UnsupportedHyperparameterError);
    expect(() => readMoeSpec(fileWith({ "llama.expert_count": 4, "llama.expert_used_count": 0 }), "llama", 64)).toThrow(/expert_used_count/);
  });
});
