/**
 * The architecture registry and the metadata each catalogue family's GGUF carries, read into
 * hyperparameters (no model needed: metadata as the catalogue's files declare it, from llama.cpp's
 * converters and the files' published headers), and the rotary tables checked against the formulas
 * written out in double precision.
 */
import { describe, expect, it } from "vitest";
import { architectureFor, MissingTensorsError, resolveArchitecture, SUPPORTED_ARCHITECTURES } from "../../../src/compiler/graph/architectures.js";
import { rotaryTables, type RopeSpec } from "../../../src/compiler/graph/blocks/rotary.js";
import { GgmlType, type GgufFile, type GgufValue } from "../../../src/compiler/gguf/types.js";
import { UnsupportedArchitectureError, UnsupportedHyperparameterError } from "../../../src/compiler/hyper.js";

/** An in-memory GGUF header: metadata and tensor names (F32, offsets unused). */
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

function base(arch: string, extra: Record<string, GgufValue> = {}): Record<string, GgufValue> {
  return {
    "general.architecture": arch,
    [`${arch}.block_count`]: 2,
    [`${arch}.context_length`]: 32768,
    [`${arch}.embedding_length`]: 4096,
    [`${arch}.feed_forward_length`]: 14336,
    [`${arch}.attention.head_count`]: 32,
    [`${arch}.attention.head_count_kv`]: 8,
    [`${arch}.attention.layer_norm_rms_epsilon`]: 1e-5,
    ...extra,
  };
}

function layerTensors(layers: number, names: string[]): string[] {
  return Array.from({ length: layers }, (_, l) => names.map((n) => `blk.${l}.${n}.weight`)).flat();
}

const LLAMA_TENSORS = [
  "token_embd.weight",
  "output_norm.weight",
  ...layerTensors(2, ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"]),
];

describe("architecture registry", () => {
  it("lists the architectures kiln builds", () => {
    expect([...SUPPORTED_ARCHITECTURES].sort()).toEqual(["gemma2", "gemma3", "llama", "phi3", "qwen2", "qwen3"]);
  });

  it("refuses an unknown architecture early, naming it and what is supported", () => {
    expect(() => architectureFor(file(base("mamba")))).toThrow(UnsupportedArchitectureError);
    expect(() => architectureFor(file(base("mamba")))).toThrow(/"mamba".*supported: llama/);
  });

  it("leaves a llama file with experts (Mixtral) to an entry that accepts it", () => {
    const mixtral = file(base("llama", { "llama.expert_count": 8, "llama.expert_used_count": 2 }), LLAMA_TENSORS);
    let entry: ReturnType<typeof architectureFor> | undefined;
    try {
      entry = architectureFor(mixtral);
    } catch (err) {
      expect(String(err)).toMatch(/variant/);
    }
    if (entry) expect(entry.accepts?.(mixtral)).toBe(true);
  });

  it("refuses a file missing a tensor its graph needs, before building", () => {
    const tensors = LLAMA_TENSORS.filter((t) => t !== "blk.1.ffn_down.weight");
    const f = file(base("llama"), tensors);
    expect(() => resolveArchitecture(f, { has: (n) => tensors.includes(n) })).toThrow(MissingTensorsError);
    expect(() => resolveArchitecture(f, { has: (n) => tensors.includes(n) })).toThrow(/blk\.1\.ffn_down\.weight/);
  });

  it("accepts either a fused attn_qkv or separate q/k/v (phi3), and says which it lacks", () => {
    const phi = ["token_embd.weight", "output_norm.weight", ...layerTensors(2, ["attn_norm", "attn_qkv", "attn_output", "ffn_norm", "ffn_up", "ffn_down"])];
    const f = file(base("phi3", { "phi3.feed_forward_length": 8192 }), phi);
    expect(resolveArchitecture(f, { has: (n) => phi.includes(n) }).architecture.name).toBe("phi3");
    const noQkv = phi.filter((t) => t !== "blk.0.attn_qkv.weight");
    expect(() => resolveArchitecture(f, { has: (n) => noQkv.includes(n) })).toThrow(
      /blk\.0\.attn_qkv\.weight or blk\.0\.attn_q\.weight \+ blk\.0\.attn_k\.weight/,
    );
  });
});

describe("hyperparameters of the catalogue's families", () => {
  const hyperOf = (f: GgufFile) => architectureFor(f).hyper(f);

  it("Mistral 7B v0.3 (llama): rope base 1e6, 8 KV heads, head dim 128, no scaling, interleaved", () => {
    const h = hyperOf(file(base("llama", { "llama.rope.freq_base": 1000000, "llama.rope.dimension_count": 128, "llama.vocab_size": 32768 }), LLAMA_TENSORS));
    expect(h).toMatchObject({ heads: 32, kvHeads: 8, headDim: 128, vocab: 32768, contextLength: 32768, ffn: 14336 });
    expect(h.rope).toEqual({ dims: 128, theta: 1000000, interleaved: true, scaling: { type: "none", factor: 1, originalContext: 32768 }, attnFactor: 1 });
  });

  it("Llama 3.1 and the DeepSeek-R1 Llama distill: rope_freqs.weight factors, no declared scaling", () => {
    const h = hyperOf(file(base("llama", { "llama.rope.freq_base": 500000, "llama.context_length": 131072 }), [...LLAMA_TENSORS, "rope_freqs.weight"]));
    expect(h.rope.freqFactors).toBe("rope_freqs.weight");
    expect(h.rope.scaling.type).toBe("none");
    expect(h.rope.theta).toBe(500000);
  });

  it("Qwen2.5 and the DeepSeek-R1 Qwen distills (qwen2): half-split rotary; YaRN where a file declares it", () => {
    const plain = hyperOf(file(base("qwen2", { "qwen2.rope.freq_base": 1000000 })));
    expect(plain.rope).toMatchObject({ interleaved: false, theta: 1000000, scaling: { type: "none" } });
    const yarn = hyperOf(
      file(
        base("qwen2", {
          "qwen2.rope.scaling.type": "yarn",
          "qwen2.rope.scaling.factor": 4,
          "qwen2.rope.scaling.original_context_length": 32768,
          "qwen2.context_length": 131072,
        }),
      ),
    );
    expect(yarn.rope.scaling).toEqual({ type: "yarn", factor: 4, originalContext: 32768 });
  });

  it("Qwen3: head dim from attention.key_length, not hidden / heads", () => {
    const h = hyperOf(
      file(
        base("qwen3", {
          "qwen3.embedding_length": 1024,
          "qwen3.attention.head_count": 16,
          "qwen3.attention.key_length": 128,
          "qwen3.attention.value_length": 128,
          "qwen3.context_length": 40960,
        }),
      ),
    );
    expect(h).toMatchObject({ hidden: 1024, heads: 16, headDim: 128, contextLength: 40960 });
    expect(h.rope.dims).toBe(128);
  });

  it("Phi-3.5 (phi3): LongRoPE long factors beyond the original context, its attention factor, the declared window recorded", () => {
    const meta = base("phi3", {
      "phi3.context_length": 131072,
      "phi3.rope.scaling.original_context_length": 4096,
      "phi3.rope.scaling.attn_factor": 1.1902380714238083,
      "phi3.rope.dimension_count": 96,
      "phi3.attention.sliding_window": 262144,
      "phi3.embedding_length": 3072,
    });
    const h = hyperOf(file(meta, ["rope_factors_long.weight", "rope_factors_short.weight"])) as ReturnType<typeof hyperOf> & { declaredWindow: number };
    expect(h.rope).toMatchObject({
      dims: 96,
      freqFactors: "rope_factors_long.weight",
      attnFactor: 1.1902380714238083,
      interleaved: false,
      scaling: { type: "none", originalContext: 4096 },
    });
    expect(h.declaredWindow).toBe(262144);
    const short = hyperOf(file({ ...meta, "phi3.context_length": 4096 }, ["rope_factors_long.weight", "rope_factors_short.weight"]));
    expect(short.rope.freqFactors).toBe("rope_factors_short.weight");
  });

  it("Phi-3-mini-4k and Phi-4 (phi3): no factors", () => {
    const h = hyperOf(file(base("phi3", { "phi3.context_length": 4096, "phi3.attention.sliding_window": 2047 })));
    expect(h.rope.freqFactors).toBeUndefined();
    expect(h.rope.attnFactor).toBe(1);
  });

  it("refuses a rope scaling type it does not know, and per-layer counts that differ", () => {
    expect(() => hyperOf(file(base("llama", { "llama.rope.scaling.type": "dynamic", "llama.rope.scaling.factor": 2 })))).toThrow(
      UnsupportedHyperparameterError,
    );
    expect(() => hyperOf(file(base("llama", { "llama.feed_forward_length": [100, 200] })))).toThrow(/one shape/);
    expect(hyperOf(file(base("llama", { "llama.feed_forward_length": [300, 300] }))).ffn).toBe(300);
  });
});

describe("rotary tables", () => {
  const spec = (over: Partial<RopeSpec>): RopeSpec => ({
    dims: 16,
    theta: 10000,
    interleaved: false,
    scaling: { type: "none", factor: 1, originalContext: 64 },
    attnFactor: 1,
    ...over,
  });
  /** The angle of pair i at position p, in double precision. */
  const plainAngle = (p: number, i: number, s: RopeSpec) => p * Math.pow(s.theta, (-2 * i) / s.dims);

  function expectTables(s: RopeSpec, angle: (p: number, i: number) => number, magnitude: number, factors?: Float32Array) {
    const ctx = 200;
    const { cos, sin } = rotaryTables(s, ctx, factors);
    const half = s.dims / 2;
    let worst = 0;
    for (let p = 0; p < ctx; p++) {
      for (let i = 0; i < half; i++) {
        worst = Math.max(
          worst,
          Math.abs(cos[p * half + i] - magnitude * Math.cos(angle(p, i))),
          Math.abs(sin[p * half + i] - magnitude * Math.sin(angle(p, i))),
        );
      }
    }
    // float32 angles at positions up to 200 carry ~1e-5 absolute error
    expect(worst).toBeLessThan(1e-4);
  }

  it("plain: p * theta^(-2i/dims)", () => expectTables(spec({}), (p, i) => plainAngle(p, i, spec({})), 1));

  it("frequency factors divide each pair's angle; the attention factor scales cos and sin", () => {
    const factors = Float32Array.from({ length: 8 }, (_, i) => 1 + i);
    expectTables(spec({ freqFactors: "rope_freqs.weight", attnFactor: 1.25 }), (p, i) => plainAngle(p, i, spec({})) / factors[i], 1.25, factors);
  });

  it("linear scaling divides every angle by the factor", () => {
    const s = spec({ scaling: { type: "linear", factor: 4, originalContext: 64 } });
    expectTables(s, (p, i) => plainAngle(p, i, s) / 4, 1);
  });

  it("YaRN: high frequencies extrapolate, low ones interpolate, a ramp between; magnitude 1 + 0.1 ln(factor)", () => {
    const s = spec({ theta: 10000, scaling: { type: "yarn", factor: 4, originalContext: 64 } });
    // YaRN's correction range, written out: dims * ln(orig / (beta * 2 pi)) / (2 ln theta), beta 32 and 1.
    const corr = (beta: number) => (16 * Math.log(64 / (beta * 2 * Math.PI))) / (2 * Math.log(10000));
    const low = Math.max(0, Math.floor(corr(32)));
    const high = Math.min(15, Math.ceil(corr(1)));
    const angle = (p: number, i: number) => {
      const extrapolated = plainAngle(p, i, s);
      const ramp = 1 - Math.min(1, Math.max(0, (i - low) / Math.max(0.001, high - low)));
      return (extrapolated / 4) * (1 - ramp) + extrapolated * ramp;
    };
    expectTables(s, angle, 1 + 0.1 * Math.log(4));
  });

  it("refuses factors of the wrong length", () => {
    expect(() => rotaryTables(spec({ freqFactors: "x" }), 4, new Float32Array(3))).toThrow(/3 values, expected 8/);
  });
});
