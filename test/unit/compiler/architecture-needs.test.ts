/**
 * Each Llama-family architecture's `tensors()` tells the truth: building its graph (from a fake
 * weight source of zeros, tiny dimensions) reads only tensors it declares, and reads every required
 * one the file has. The compiler refuses a file early by that list, and streaming compiles read by
 * it, so a tensor read but not declared would surface only as a late failure on a real file.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import type { TensorNeeds } from "../../../src/compiler/graph/architecture.js";
import { buildTextGraph, resolveArchitecture } from "../../../src/compiler/graph/architectures.js";
import type { WeightSource } from "../../../src/compiler/graph/weights.js";
import { GgmlType, type GgufFile, type GgufValue } from "../../../src/compiler/gguf/types.js";
import { GraphBuilder } from "../../../src/compiler/onnx/graph-builder.js";
import type { LinearWeight } from "../../../src/compiler/quant/linear-weight.js";

const H = { layers: 2, hidden: 64, heads: 2, kvHeads: 1, ffn: 96, vocab: 50 };

/** Tensor dims (ggml order) of a tiny model of `arch`. */
function tensorsOf(arch: string, headDim: number): Record<string, number[]> {
  const { hidden, heads, kvHeads, ffn, vocab } = H;
  const q = heads * headDim;
  const kv = kvHeads * headDim;
  const t: Record<string, number[]> = { "token_embd.weight": [hidden, vocab], "output_norm.weight": [hidden], "output.weight": [hidden, vocab] };
  for (let l = 0; l < H.layers; l++) {
    const p = `blk.${l}`;
    Object.assign(t, {
      [`${p}.attn_norm.weight`]: [hidden],
      [`${p}.ffn_norm.weight`]: [hidden],
      [`${p}.attn_output.weight`]: [q, hidden],
      [`${p}.ffn_down.weight`]: [ffn, hidden],
    });
    if (arch === "phi3") {
      Object.assign(t, { [`${p}.attn_qkv.weight`]: [hidden, q + 2 * kv], [`${p}.ffn_up.weight`]: [hidden, 2 * ffn] });
    } else {
      Object.assign(t, { [`${p}.attn_q.weight`]: [hidden, q], [`${p}.attn_k.weight`]: [hidden, kv], [`${p}.attn_v.weight`]: [hidden, kv] });
      Object.assign(t, { [`${p}.ffn_gate.weight`]: [hidden, ffn], [`${p}.ffn_up.weight`]: [hidden, ffn] });
    }
    if (arch === "qwen2") Object.assign(t, { [`${p}.attn_q.bias`]: [q], [`${p}.attn_k.bias`]: [kv], [`${p}.attn_v.bias`]: [kv] });
    if (arch === "qwen3") Object.assign(t, { [`${p}.attn_q_norm.weight`]: [headDim], [`${p}.attn_k_norm.weight`]: [headDim] });
  }
  if (arch === "llama") t["rope_freqs.weight"] = [headDim / 2];
  if (arch === "phi3") Object.assign(t, { "rope_factors_long.weight": [headDim / 2], "rope_factors_short.weight": [headDim / 2] });
  return t;
}

function ggufFile(arch: string, headDim: number, tensors: Record<string, number[]>): GgufFile {
  const metadata: Record<string, GgufValue> = Object.assign(Object.create(null), {
    "general.architecture": arch,
    [`${arch}.block_count`]: H.layers,
    [`${arch}.context_length`]: 64,
    [`${arch}.embedding_length`]: H.hidden,
    [`${arch}.feed_forward_length`]: H.ffn,
    [`${arch}.attention.head_count`]: H.heads,
    [`${arch}.attention.head_count_kv`]: H.kvHeads,
    [`${arch}.attention.key_length`]: headDim,
    [`${arch}.attention.value_length`]: headDim,
    [`${arch}.attention.layer_norm_rms_epsilon`]: 1e-6,
    [`${arch}.rope.scaling.original_context_length`]: 32,
  });
  return {
    path: "memory.gguf",
    version: 3,
    metadata,
    tensors: Object.entries(tensors).map(([name, dims]) => ({
      name,
      dims,
      type: GgmlType.F32,
      offset: 0,
      byteLength: 0,
      elementCount: dims.reduce((a, b) => a * b, 1),
    })),
    alignment: 32,
    dataOffset: 0,
    fileSize: 0,
  };
}

/** Zeros of the right shapes, recording every tensor read (factors are ones: they divide). */
class RecordingWeights implements WeightSource {
  readonly read = new Set<string>();
  constructor(private readonly tensors: Record<string, number[]>) {}
  has(name: string): boolean {
    return name in this.tensors;
  }
  dims(name: string): number[] {
    return this.tensors[name];
  }
  async floats(name: string): Promise<Float32Array> {
    this.read.add(name);
    const n = this.tensors[name].reduce((a, b) => a * b, 1);
    return name.startsWith("rope_") ? new Float32Array(n).fill(1) : new Float32Array(n);
  }
  async linear(name: string): Promise<LinearWeight> {
    this.read.add(name);
    const [k, n] = this.tensors[name];
    return { kind: "float", n, k, weightT: new Float32Array(k * n), mapping: "F32", exact: true };
  }
}

function declared(needs: TensorNeeds): Set<string> {
  return new Set([...needs.required.flatMap((need) => (typeof need === "string" ? [need] : need.oneOf.flat())), ...needs.optional]);
}

const work = mkdtempSync(join(tmpdir(), "kiln-needs-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe("architectures read the tensors they declare", () => {
  for (const [arch, headDim] of [
    ["llama", 32],
    ["qwen2", 32],
    ["qwen3", 48],
    ["phi3", 32],
  ] as const) {
    it(`${arch}: every tensor read is declared, every required one present is read`, async () => {
      const tensors = tensorsOf(arch, headDim);
      const weights = new RecordingWeights(tensors);
      const resolved = resolveArchitecture(ggufFile(arch, headDim, tensors), weights);
      expect(resolved.architecture.name).toBe(arch);
      const g = new GraphBuilder(join(work, `${arch}.data`));
      const choices = await buildTextGraph(g, weights, resolved, { accuracyLevel: 4, numerics: "llama.cpp" });
      g.finish(arch, "test", {});
      const needs = resolved.architecture.tensors(resolved.hyper);
      const allowed = declared(needs);
      expect([...weights.read].filter((name) => !allowed.has(name))).toEqual([]);
      const requiredPresent = [...declared({ required: needs.required, optional: [] })].filter((name) => name in tensors);
      expect(requiredPresent.filter((name) => !weights.read.has(name))).toEqual([]);
      expect(choices.map((c) => c.what)).toContain("rotary");
    });
  }
});
