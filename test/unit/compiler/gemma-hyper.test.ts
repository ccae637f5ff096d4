/**
 * Gemma 2 and Gemma 3 hyperparameters as llama.cpp's loader reads them (metadata as the converter
 * writes it for the catalogue's files): which layers slide, their window and rotary base, the
 * soft-caps and their defaults, the query scale of the 27B models, and the tensors the graph needs.
 */
import { describe, expect, it } from "vitest";
import { architectureFor, resolveArchitecture } from "../../../src/compiler/graph/architectures.js";
import type { GemmaHyper } from "../../../src/compiler/graph/gemma2.js";
import { GgmlType, type GgufFile, type GgufValue } from "../../../src/compiler/gguf/types.js";

function file(metadata: Record<string, GgufValue>, tensors: string[] = []): GgufFile {
  return {
    path: "memory.gguf",
    version: 3,
    metadata: Object.assign(Object.create(null), metadata),
    tensors: tensors.map((name) => ({
      name,
      dims: name === "token_embd.weight" ? [64, 1000] : [64],
      type: GgmlType.F32,
      offset: 0,
      byteLength: 0,
      elementCount: 0,
    })),
    alignment: 32,
    dataOffset: 0,
    fileSize: 0,
  };
}

/** Gemma 2 9B's and Gemma 3 4B's published shapes (layers overridable). */
function gemma(arch: "gemma2" | "gemma3", extra: Record<string, GgufValue> = {}): GgufFile {
  const shape =
    arch === "gemma2"
      ? { layers: 42, hidden: 3584, heads: 16, kv: 8, headDim: 256, ffn: 14336, ctx: 8192 }
      : { layers: 34, hidden: 2560, heads: 8, kv: 4, headDim: 256, ffn: 10240, ctx: 131072 };
  return file({
    "general.architecture": arch,
    [`${arch}.block_count`]: shape.layers,
    [`${arch}.context_length`]: shape.ctx,
    [`${arch}.embedding_length`]: shape.hidden,
    [`${arch}.feed_forward_length`]: shape.ffn,
    [`${arch}.attention.head_count`]: shape.heads,
    [`${arch}.attention.head_count_kv`]: shape.kv,
    [`${arch}.attention.key_length`]: shape.headDim,
    [`${arch}.attention.value_length`]: shape.headDim,
    [`${arch}.attention.layer_norm_rms_epsilon`]: 1e-6,
    [`${arch}.rope.freq_base`]: arch === "gemma2" ? 10000 : 1000000,
    ...extra,
  });
}

const hyper = (f: GgufFile) => architectureFor(f).hyper(f) as GemmaHyper;

describe("Gemma 2 hyperparameters", () => {
  it("alternates local and global layers, local first, with the declared window and soft-caps", () => {
    const h = hyper(gemma("gemma2", { "gemma2.attention.sliding_window": 4096, "gemma2.attn_logit_softcapping": 50, "gemma2.final_logit_softcapping": 30 }));
    expect(h.local.slice(0, 4)).toEqual([true, false, true, false]);
    expect(h.local.filter((l) => l).length).toBe(21);
    expect(h.window).toBe(4096);
    expect(h.attentionSoftcap).toBe(50);
    expect(h.finalSoftcap).toBe(30);
    expect(h.headDim).toBe(256);
    expect(h.headDim).not.toBe(h.hidden / h.heads);
    expect(h.localRope.theta).toBe(h.rope.theta);
    expect(h.queryScale).toBeCloseTo(1 / 16, 7);
  });

  it("takes llama.cpp's defaults when the file declares nothing (window 4096, caps 50 and 30)", () => {
    const h = hyper(gemma("gemma2"));
    expect([h.window, h.attentionSoftcap, h.finalSoftcap]).toEqual([4096, 50, 30]);
  });

  it("scales queries of the 27B model (46 layers) by 1/sqrt(hidden/heads), as llama.cpp does", () => {
    const h = hyper(
      file({
        ...gemma("gemma2").metadata,
        "gemma2.block_count": 46,
        "gemma2.embedding_length": 4608,
        "gemma2.attention.head_count": 32,
        "gemma2.attention.key_length": 128,
        "gemma2.attention.value_length": 128,
      }),
    );
    expect(h.queryScale).toBeCloseTo(1 / Math.sqrt(144), 7);
  });
});

describe("Gemma 3 hyperparameters", () => {
  it("makes 5 of every 6 layers local, rotating with base 10000 and unscaled, while global layers keep the file's base and scaling", () => {
    const h = hyper(gemma("gemma3", { "gemma3.attention.sliding_window": 1024, "gemma3.rope.scaling.type": "linear", "gemma3.rope.scaling.factor": 8 }));
    expect(h.local.slice(0, 12)).toEqual([true, true, true, true, true, false, true, true, true, true, true, false]);
    expect(h.window).toBe(1024);
    expect(h.rope.theta).toBe(1000000);
    expect(h.rope.scaling.type).toBe("linear");
    expect(h.localRope.theta).toBe(10000);
    expect(h.localRope.scaling.type).toBe("none");
    expect(h.attentionSoftcap).toBeUndefined();
    expect(h.finalSoftcap).toBeUndefined();
  });

  it("reads rope.freq_base_swa, the pattern and a declared final soft-cap", () => {
    const h = hyper(
      gemma("gemma3", {
        "gemma3.attention.sliding_window": 512,
        "gemma3.attention.sliding_window_pattern": 3,
        "gemma3.rope.freq_base_swa": 20000,
        "gemma3.final_logit_softcapping": 30,
      }),
    );
    expect(h.local.slice(0, 6)).toEqual([true, true, false, true, true, false]);
    expect(h.localRope.theta).toBe(20000);
    expect(h.finalSoftcap).toBe(30);
  });

  it("has no local layer when the file declares no window", () => {
    expect(hyper(gemma("gemma3")).local.some((l) => l)).toBe(false);
  });

  it("needs the post-norms and the Q/K norms", () => {
    const f = gemma("gemma3", { "gemma3.block_count": 1 });
    const names = [
      "token_embd.weight",
      "output_norm.weight",
      ...[
        "attn_norm",
        "attn_q",
        "attn_k",
        "attn_v",
        "attn_output",
        "post_attention_norm",
        "ffn_norm",
        "ffn_gate",
        "ffn_up",
        "ffn_down",
        "post_ffw_norm",
        "attn_q_norm",
        "attn_k_norm",
      ].map((n) => `blk.0.${n}.weight`),
    ];
    expect(resolveArchitecture(f, { has: (n) => names.includes(n) }).architecture.name).toBe("gemma3");
    for (const missing of ["blk.0.post_ffw_norm.weight", "blk.0.attn_k_norm.weight"]) {
      expect(() => resolveArchitecture(f, { has: (n) => n !== missing && names.includes(n) })).toThrow(missing);
    }
  });
});
