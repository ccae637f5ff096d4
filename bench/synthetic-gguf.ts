/**
 * Synthetic GGUF files of real models' shapes (random weights, a byte-level vocabulary of the same
 * size), for benchmarks on machines that cannot receive the real weights (the lent GPU machines take
 * 64 MiB): written where they are measured, in seconds, streamed so an 8B file never sits in memory.
 *
 *   node --import tsx bench/synthetic-gguf.ts --shapes smollm2-135m,llama-3.2-1b --out .cache/gguf
 *
 * Weights are Q4_0 (the embedding, and a separate LM head where the shape has one, Q8_0), from one
 * random pattern repeated: speed depends on shapes and types, not on values. Norms are 1.
 */
import { randomFillSync } from "node:crypto";
import { closeSync, existsSync, mkdirSync, openSync, renameSync, writeSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { f32ToF16 } from "../src/compiler/gguf/fp16.js";
import { GgmlType, GgufValueType } from "../src/compiler/gguf/types.js";

/** A llama-architecture shape. */
export interface ModelShapeSpec {
  name: string;
  layers: number;
  hidden: number;
  heads: number;
  kvHeads: number;
  ffn: number;
  vocab: number;
  /** Context the file declares (the KV budget, not the model's full window, which a benchmark never fills). */
  contextLength: number;
  ropeTheta: number;
  /** The LM head is the embedding (no `output.weight`). */
  tied: boolean;
}

export const SHAPES: Record<string, ModelShapeSpec> = {
  "smollm2-135m": {
    name: "smollm2-135m",
    layers: 30,
    hidden: 576,
    heads: 9,
    kvHeads: 3,
    ffn: 1536,
    vocab: 49_152,
    contextLength: 2048,
    ropeTheta: 100_000,
    tied: true,
  },
  "llama-3.2-1b": {
    name: "llama-3.2-1b",
    layers: 16,
    hidden: 2048,
    heads: 32,
    kvHeads: 8,
    ffn: 8192,
    vocab: 128_256,
    contextLength: 2048,
    ropeTheta: 500_000,
    tied: true,
  },
  "llama-3.1-8b": {
    name: "llama-3.1-8b",
    layers: 32,
    hidden: 4096,
    heads: 32,
    kvHeads: 8,
    ffn: 14_336,
    vocab: 128_256,
    contextLength: 2048,
    ropeTheta: 500_000,
    tied: false,
  },
  /** For --quick: compiles and runs in seconds, on lavapipe too. */
  tiny: { name: "tiny", layers: 2, hidden: 256, heads: 4, kvHeads: 2, ffn: 512, vocab: 1024, contextLength: 1024, ropeTheta: 10_000, tied: true },
};

/** Bytes and weights per block of the two types written. */
const BLOCK = { [GgmlType.Q4_0]: { bytes: 18, weights: 32 }, [GgmlType.Q8_0]: { bytes: 34, weights: 32 } } as const;
type WeightType = GgmlType.Q4_0 | GgmlType.Q8_0;

interface Tensor {
  name: string;
  /** ggml order, ne[0] (the input width) first. */
  dims: number[];
  type: WeightType | GgmlType.F32;
}

function tensorsOf(s: ModelShapeSpec): Tensor[] {
  const headDim = s.hidden / s.heads;
  const out: Tensor[] = [{ name: "token_embd.weight", dims: [s.hidden, s.vocab], type: GgmlType.Q8_0 }];
  for (let l = 0; l < s.layers; l++) {
    const p = `blk.${l}`;
    out.push(
      { name: `${p}.attn_norm.weight`, dims: [s.hidden], type: GgmlType.F32 },
      { name: `${p}.attn_q.weight`, dims: [s.hidden, s.heads * headDim], type: GgmlType.Q4_0 },
      { name: `${p}.attn_k.weight`, dims: [s.hidden, s.kvHeads * headDim], type: GgmlType.Q4_0 },
      { name: `${p}.attn_v.weight`, dims: [s.hidden, s.kvHeads * headDim], type: GgmlType.Q4_0 },
      { name: `${p}.attn_output.weight`, dims: [s.heads * headDim, s.hidden], type: GgmlType.Q4_0 },
      { name: `${p}.ffn_norm.weight`, dims: [s.hidden], type: GgmlType.F32 },
      { name: `${p}.ffn_gate.weight`, dims: [s.hidden, s.ffn], type: GgmlType.Q4_0 },
      { name: `${p}.ffn_up.weight`, dims: [s.hidden, s.ffn], type: GgmlType.Q4_0 },
      { name: `${p}.ffn_down.weight`, dims: [s.ffn, s.hidden], type: GgmlType.Q4_0 },
    );
  }
  out.push({ name: "output_norm.weight", dims: [s.hidden], type: GgmlType.F32 });
  if (!s.tied) out.push({ name: "output.weight", dims: [s.hidden, s.vocab], type: GgmlType.Q8_0 });
  return out;
}

function byteLength(t: Tensor): number {
  const n = t.dims.reduce((a, b) => a * b, 1);
  return t.type === GgmlType.F32 ? n * 4 : (n / BLOCK[t.type].weights) * BLOCK[t.type].bytes;
}

/** GPT-2's byte-to-character map: every byte a printable character, so a byte-level BPE can spell anything. */
function byteTokens(): string[] {
  const printable = (b: number) => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  let next = 256;
  return Array.from({ length: 256 }, (_, b) => String.fromCodePoint(printable(b) ? b : next++));
}

type Meta = [string, GgufValueType, unknown];

function metadataOf(s: ModelShapeSpec): Meta[] {
  const bytes = byteTokens();
  const tokens = [...bytes, "ĠĠ", ...Array.from({ length: s.vocab - bytes.length - 2 }, (_, i) => `<|f${i}|>`), "<|eot|>"];
  const eot = tokens.length - 1;
  const S = GgufValueType.STRING;
  const U = GgufValueType.UINT32;
  const F = GgufValueType.FLOAT32;
  return [
    ["general.architecture", S, "llama"],
    ["general.name", S, `kiln synthetic ${s.name}`],
    ["llama.block_count", U, s.layers],
    ["llama.context_length", U, s.contextLength],
    ["llama.embedding_length", U, s.hidden],
    ["llama.feed_forward_length", U, s.ffn],
    ["llama.attention.head_count", U, s.heads],
    ["llama.attention.head_count_kv", U, s.kvHeads],
    ["llama.rope.freq_base", F, s.ropeTheta],
    ["llama.rope.dimension_count", U, s.hidden / s.heads],
    ["llama.attention.layer_norm_rms_epsilon", F, 1e-5],
    ["llama.vocab_size", U, s.vocab],
    ["general.quantization_version", U, 2],
    ["tokenizer.ggml.model", S, "gpt2"],
    ["tokenizer.ggml.pre", S, "default"],
    ["tokenizer.ggml.tokens", GgufValueType.ARRAY, { type: S, items: tokens }],
    ["tokenizer.ggml.token_type", GgufValueType.ARRAY, { type: GgufValueType.INT32, items: tokens.map((_, i) => (i === eot ? 3 : 1)) }],
    ["tokenizer.ggml.merges", GgufValueType.ARRAY, { type: S, items: ["Ġ Ġ"] }],
    ["tokenizer.ggml.eos_token_id", U, eot],
    ["tokenizer.chat_template", S, "{% for m in messages %}{{ m.content }}{% endfor %}"],
  ];
}

/** Little-endian GGUF header pieces, appended to one growing list of buffers. */
class HeaderWriter {
  readonly parts: Buffer[] = [];
  private num(bytes: number, write: (b: Buffer) => void): void {
    const b = Buffer.alloc(bytes);
    write(b);
    this.parts.push(b);
  }
  u32(v: number): void {
    this.num(4, (b) => b.writeUInt32LE(v));
  }
  i32(v: number): void {
    this.num(4, (b) => b.writeInt32LE(v));
  }
  u64(v: number): void {
    this.num(8, (b) => b.writeBigUInt64LE(BigInt(v)));
  }
  f32(v: number): void {
    this.num(4, (b) => b.writeFloatLE(v));
  }
  str(s: string): void {
    const b = Buffer.from(s, "utf8");
    this.u64(b.length);
    this.parts.push(b);
  }
  value(type: GgufValueType, v: unknown): void {
    if (type === GgufValueType.STRING) this.str(v as string);
    else if (type === GgufValueType.UINT32) this.u32(v as number);
    else if (type === GgufValueType.INT32) this.i32(v as number);
    else if (type === GgufValueType.FLOAT32) this.f32(v as number);
    else if (type === GgufValueType.ARRAY) {
      const { type: item, items } = v as { type: GgufValueType; items: unknown[] };
      this.u32(item);
      this.u64(items.length);
      for (const x of items) this.value(item, x);
    } else throw new Error(`value type ${type} is not written here`);
  }
  get length(): number {
    return this.parts.reduce((n, p) => n + p.length, 0);
  }
}

const ALIGNMENT = 32;
const align = (n: number) => Math.ceil(n / ALIGNMENT) * ALIGNMENT;

/** One random pattern of whole blocks of `type`, each block's fp16 scale set to `scale`. */
function blockPattern(type: WeightType, blocks: number, scale: number): Buffer {
  const { bytes } = BLOCK[type];
  const buf = randomFillSync(Buffer.alloc(blocks * bytes));
  const half = f32ToF16(scale);
  for (let b = 0; b < blocks; b++) buf.writeUInt16LE(half, b * bytes);
  return buf;
}

/** Writes the shape's GGUF to `path` (through `<path>.part`, renamed when complete). */
export function writeSyntheticGguf(shape: ModelShapeSpec, path: string): void {
  const tensors = tensorsOf(shape);
  const h = new HeaderWriter();
  const meta = metadataOf(shape);
  h.u32(0x46554747); // "GGUF"
  h.u32(3);
  h.u64(tensors.length);
  h.u64(meta.length);
  for (const [key, type, value] of meta) {
    h.str(key);
    h.u32(type);
    h.value(type, value);
  }
  let offset = 0;
  for (const t of tensors) {
    h.str(t.name);
    h.u32(t.dims.length);
    for (const d of t.dims) h.u64(d);
    h.u32(t.type);
    h.u64(offset);
    offset = align(offset + byteLength(t));
  }
  const headerBytes = h.length;
  const part = `${path}.part`;
  const fd = openSync(part, "w");
  try {
    for (const p of h.parts) writeSync(fd, p);
    writeSync(fd, Buffer.alloc(align(headerBytes) - headerBytes));
    // Q4_0 codes are uniform 0..15 around 8 (std ~4.6 x scale): weights of std ~0.5/sqrt(width).
    const q4 = blockPattern(GgmlType.Q4_0, 1 << 20, 0.5 / (4.6 * Math.sqrt(shape.hidden)));
    const q8 = blockPattern(GgmlType.Q8_0, 1 << 19, 0.5 / (74 * Math.sqrt(shape.hidden)));
    const ones = Buffer.alloc(4 * Math.max(shape.hidden, shape.ffn));
    for (let i = 0; i < ones.length; i += 4) ones.writeFloatLE(1, i);
    for (const t of tensors) {
      const n = byteLength(t);
      const pattern = t.type === GgmlType.F32 ? ones : t.type === GgmlType.Q4_0 ? q4 : q8;
      for (let done = 0; done < n; ) {
        const chunk = Math.min(n - done, pattern.length);
        writeSync(fd, pattern, 0, chunk);
        done += chunk;
      }
      writeSync(fd, Buffer.alloc(align(n) - n));
    }
  } finally {
    closeSync(fd);
  }
  renameSync(part, path);
}

/** The shape's file in `dir` (`<name>-synthetic-q4_0.gguf`), written when missing; returns its path. */
export function ensureSyntheticGguf(shape: ModelShapeSpec, dir: string): string {
  mkdirSync(dir, { recursive: true });
  const path = join(dir, `${shape.name}-synthetic-q4_0.gguf`);
  if (!existsSync(path)) writeSyntheticGguf(shape, path);
  return path;
}

/** The shapes named in a comma-separated list; an unknown name is an error naming the known ones. */
export function shapesNamed(list: string): ModelShapeSpec[] {
  return list.split(",").map((name) => {
    const shape = SHAPES[name.trim()];
    if (!shape) throw new Error(`unknown shape ${name}; known: ${Object.keys(SHAPES).join(", ")}`);
    return shape;
  });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values } = parseArgs({
    options: { shapes: { type: "string", default: "smollm2-135m,llama-3.2-1b,llama-3.1-8b" }, out: { type: "string", default: ".cache/gguf" } },
  });
  for (const shape of shapesNamed(values.shapes!)) {
    const t0 = performance.now();
    const path = ensureSyntheticGguf(shape, values.out!);
    process.stderr.write(`${path} (${((performance.now() - t0) / 1000).toFixed(1)} s)\n`);
  }
}
