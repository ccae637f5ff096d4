/**
 * Synthetic Whisper models of real shapes (random float16 weights, large-v3's multilingual
 * vocabulary and special tokens), written as the CTranslate2 folder `kiln pull` gets for a real
 * Whisper (model.bin, config.json, tokenizer.json), for benchmarks on machines that cannot receive
 * the real weights (the lent GPU machines take 64 MiB). Written where they are measured, in seconds,
 * one tensor at a time, with no Python and no CTranslate2.
 *
 *   node --import tsx bench/synthetic-whisper.ts --shapes large-v3-turbo,large-v3 --out .cache/whisper
 *
 * Each weight is one random pattern repeated, scaled by 1/sqrt(its input width) so activations stay
 * in range through 32 layers: speed depends on shapes and types, not on values. The tokenizer spells
 * text byte by byte (no merges); its regular tokens past the 256 bytes are fillers.
 */
import { closeSync, existsSync, mkdirSync, openSync, renameSync, rmSync, writeFileSync, writeSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { f32ToF16 } from "../src/compiler/gguf/fp16.js";

/** An encoder-decoder Whisper shape. */
export interface WhisperShapeSpec {
  name: string;
  melBins: number;
  width: number;
  heads: number;
  ffn: number;
  encoderLayers: number;
  decoderLayers: number;
}

export const WHISPER_SHAPES: Record<string, WhisperShapeSpec> = {
  "large-v3": { name: "large-v3", melBins: 128, width: 1280, heads: 20, ffn: 5120, encoderLayers: 32, decoderLayers: 32 },
  /** large-v3's encoder with 4 decoder layers: the shape most served on GPUs. */
  "large-v3-turbo": { name: "large-v3-turbo", melBins: 128, width: 1280, heads: 20, ffn: 5120, encoderLayers: 32, decoderLayers: 4 },
  /** For --quick: whisper tiny's widths, runs in seconds (on lavapipe too). */
  tiny: { name: "tiny", melBins: 80, width: 384, heads: 6, ffn: 1536, encoderLayers: 4, decoderLayers: 4 },
};

const AUDIO_CONTEXT = 1500;
const TEXT_CONTEXT = 448;
/** Regular (byte-level BPE) tokens of the multilingual vocabulary, the empty string last. */
const REGULAR = 50_257;
/** whisper/tokenizer.py's LANGUAGES order; large-v3 adds Cantonese last. */
const LANGUAGES = (
  "en zh de es ru ko fr ja pt tr pl ca nl ar sv it id hi fi vi he uk el ms cs ro da hu ta no th ur hr bg lt la mi ml cy sk te " +
  "fa lv bn sr az sl kn et mk br eu is hy ne mn bs kk sq sw gl mr pa si km sn yo so af oc ka be tg sd gu am yi lo uz fo ht ps " +
  "tk nn mt sa lb my bo tl mg as tt haw ln ha ba jw su yue"
).split(" ");
const SPECIALS = [
  "<|endoftext|>",
  "<|startoftranscript|>",
  ...LANGUAGES.map((l) => `<|${l}|>`),
  "<|translate|>",
  "<|transcribe|>",
  "<|startoflm|>",
  "<|startofprev|>",
  "<|nospeech|>",
  "<|notimestamps|>",
  ...Array.from({ length: 1501 }, (_, i) => `<|${(i * 0.02).toFixed(2)}|>`),
];
/** 51,866, as large-v3. */
export const SYNTHETIC_WHISPER_VOCAB = REGULAR + SPECIALS.length;
/** Token id of a special token's text. */
export const specialId = (text: string): number => {
  const i = SPECIALS.indexOf(text);
  if (i < 0) throw new Error(`${text} is not a special token`);
  return REGULAR + i;
};

/** CTranslate2's dtype ids (float32 = 0, int16 = 2, float16 = 4). */
const CT2_FLOAT16 = 4;
const CT2_INT16 = 2;
const CT2_VERSION = 6;

interface Variable {
  name: string;
  dims: number[];
  /** Standard deviation of the values (norm gains are 1 + this). */
  scale: number;
  /** A norm's gain: 1 plus noise. */
  gain?: boolean;
}

function variablesOf(s: WhisperShapeSpec): Variable[] {
  const w = s.width;
  const out: Variable[] = [];
  const norm = (p: string) => out.push({ name: `${p}/gamma`, dims: [w], scale: 0.1, gain: true }, { name: `${p}/beta`, dims: [w], scale: 0.05 });
  const linear = (p: string, nOut: number, nIn: number) =>
    out.push({ name: `${p}/weight`, dims: [nOut, nIn], scale: 1 / Math.sqrt(nIn) }, { name: `${p}/bias`, dims: [nOut], scale: 0.05 });
  out.push(
    { name: "encoder/conv1/weight", dims: [w, s.melBins, 3], scale: 1 / Math.sqrt(s.melBins * 3) },
    { name: "encoder/conv1/bias", dims: [w], scale: 0.05 },
    { name: "encoder/conv2/weight", dims: [w, w, 3], scale: 1 / Math.sqrt(w * 3) },
    { name: "encoder/conv2/bias", dims: [w], scale: 0.05 },
    { name: "encoder/position_encodings/encodings", dims: [AUDIO_CONTEXT, w], scale: 0.5 },
  );
  for (let l = 0; l < s.encoderLayers; l++) {
    const p = `encoder/layer_${l}`;
    norm(`${p}/self_attention/layer_norm`);
    linear(`${p}/self_attention/linear_0`, 3 * w, w);
    linear(`${p}/self_attention/linear_1`, w, w);
    norm(`${p}/ffn/layer_norm`);
    linear(`${p}/ffn/linear_0`, s.ffn, w);
    linear(`${p}/ffn/linear_1`, w, s.ffn);
  }
  norm("encoder/layer_norm");
  out.push(
    { name: "decoder/embeddings/weight", dims: [SYNTHETIC_WHISPER_VOCAB, w], scale: 1 },
    { name: "decoder/position_encodings/encodings", dims: [TEXT_CONTEXT, w], scale: 0.5 },
  );
  for (let l = 0; l < s.decoderLayers; l++) {
    const p = `decoder/layer_${l}`;
    norm(`${p}/self_attention/layer_norm`);
    linear(`${p}/self_attention/linear_0`, 3 * w, w);
    linear(`${p}/self_attention/linear_1`, w, w);
    norm(`${p}/attention/layer_norm`);
    linear(`${p}/attention/linear_0`, w, w);
    linear(`${p}/attention/linear_1`, 2 * w, w);
    linear(`${p}/attention/linear_2`, w, w);
    norm(`${p}/ffn/layer_norm`);
    linear(`${p}/ffn/linear_0`, s.ffn, w);
    linear(`${p}/ffn/linear_1`, w, s.ffn);
  }
  norm("decoder/layer_norm");
  return out;
}

/** A CTranslate2 string: u16 length counting a trailing NUL, the bytes, the NUL. */
function ct2String(s: string): Buffer {
  const b = Buffer.from(s, "utf8");
  const out = Buffer.alloc(2 + b.length + 1);
  out.writeUInt16LE(b.length + 1, 0);
  b.copy(out, 2);
  return out;
}

const u32 = (v: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(v);
  return b;
};

/** Seeded standard normals (xorshift32 through Box-Muller): the same pattern on every machine. */
function normals(count: number, seed: number): Float32Array {
  let x = seed >>> 0 || 1;
  const uniform = () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return (x + 0.5) / 4294967296;
  };
  const out = new Float32Array(count);
  for (let i = 0; i < count; i += 2) {
    const r = Math.sqrt(-2 * Math.log(uniform()));
    const t = 2 * Math.PI * uniform();
    out[i] = r * Math.cos(t);
    if (i + 1 < count) out[i + 1] = r * Math.sin(t);
  }
  return out;
}

/** Values repeated to fill every weight: 2^20 of them, an odd count of rows for every width written. */
const PATTERN = normals((1 << 20) + 1, 3);

/** The float16 bytes of `PATTERN * scale` (+1 for a gain), cached per (scale, gain). */
const patterns = new Map<string, Buffer>();
function patternBytes(v: Variable): Buffer {
  const key = `${v.scale}:${v.gain ?? false}`;
  let buf = patterns.get(key);
  if (!buf) {
    buf = Buffer.alloc(PATTERN.length * 2);
    for (let i = 0; i < PATTERN.length; i++) buf.writeUInt16LE(f32ToF16((v.gain ? 1 : 0) + PATTERN[i] * v.scale), i * 2);
    patterns.set(key, buf);
  }
  return buf;
}

/** model.bin of the shape: CTranslate2 binary version 6, WhisperSpec, float16 weights, the heads as int16 scalars. */
function writeModelBin(s: WhisperShapeSpec, path: string): void {
  const variables = variablesOf(s);
  const fd = openSync(path, "w");
  try {
    writeSync(fd, Buffer.concat([u32(CT2_VERSION), ct2String("WhisperSpec"), u32(3), u32(variables.length + 2)]));
    for (const v of variables) {
      const count = v.dims.reduce((a, b) => a * b, 1);
      writeSync(fd, Buffer.concat([ct2String(v.name), Buffer.from([v.dims.length]), ...v.dims.map(u32), Buffer.from([CT2_FLOAT16]), u32(count * 2)]));
      const pattern = patternBytes(v);
      for (let done = 0; done < count * 2; ) {
        const chunk = Math.min(count * 2 - done, pattern.length);
        writeSync(fd, pattern, 0, chunk);
        done += chunk;
      }
    }
    for (const name of ["decoder/num_heads", "encoder/num_heads"]) {
      const heads = Buffer.alloc(2);
      heads.writeInt16LE(s.heads);
      writeSync(fd, Buffer.concat([ct2String(name), Buffer.from([0, CT2_INT16]), u32(2), heads]));
    }
    // The output projection is the embedding, as in every Whisper.
    writeSync(fd, Buffer.concat([u32(1), ct2String("decoder/projection/weight"), ct2String("decoder/embeddings/weight")]));
  } finally {
    closeSync(fd);
  }
}

/** GPT-2's byte-to-character map: every byte a printable character, so a byte-level BPE can spell anything. */
function byteTokens(): string[] {
  const printable = (b: number) => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  let next = 256;
  return Array.from({ length: 256 }, (_, b) => String.fromCodePoint(printable(b) ? b : next++));
}

/** tokenizer.json: the 256 bytes, fillers up to the multilingual vocabulary's regular count (the empty string last), the specials. */
function tokenizerJson(): string {
  const vocab: Record<string, number> = {};
  byteTokens().forEach((t, i) => (vocab[t] = i));
  for (let i = 256; i < REGULAR - 1; i++) vocab[`f${i}`] = i;
  // CTranslate2 tells a multilingual vocabulary by this one extra regular token.
  vocab[""] = REGULAR - 1;
  const added = SPECIALS.map((content, i) => ({
    id: REGULAR + i,
    content,
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special: true,
  }));
  return JSON.stringify({ version: "1.0", added_tokens: added, model: { type: "BPE", vocab, merges: [] } });
}

function configJson(s: WhisperShapeSpec): string {
  return JSON.stringify({
    alignment_heads: Array.from({ length: Math.min(s.heads, 4) }, (_, h) => [s.decoderLayers - 1, h]),
    lang_ids: LANGUAGES.map((l) => specialId(`<|${l}|>`)),
    suppress_ids: [1, 2, 7, 8, 9, 10, 14, 25, 26, 27, 28, 29, 31, 58, 59, 60, 61, 62, 63, 90, 91, 92, 93],
    suppress_ids_begin: [220, specialId("<|endoftext|>")],
  });
}

/** Writes the shape's CTranslate2 folder at `dir` (through `<dir>.part`, renamed when complete). */
export function writeSyntheticWhisper(shape: WhisperShapeSpec, dir: string): void {
  const part = `${dir}.part`;
  rmSync(part, { recursive: true, force: true });
  mkdirSync(part, { recursive: true });
  writeModelBin(shape, join(part, "model.bin"));
  writeFileSync(join(part, "tokenizer.json"), tokenizerJson());
  writeFileSync(join(part, "config.json"), configJson(shape));
  renameSync(part, dir);
}

/** The shape's folder in `dir` (`whisper-<name>-synthetic`), written when missing; returns its path. */
export function ensureSyntheticWhisper(shape: WhisperShapeSpec, dir: string): string {
  const path = join(dir, `whisper-${shape.name}-synthetic`);
  if (!existsSync(path)) writeSyntheticWhisper(shape, path);
  return path;
}

/** The shapes named in a comma-separated list; an unknown name is an error naming the known ones. */
export function whisperShapesNamed(list: string): WhisperShapeSpec[] {
  return list.split(",").map((name) => {
    const shape = WHISPER_SHAPES[name.trim()];
    if (!shape) throw new Error(`unknown Whisper shape ${name}; known: ${Object.keys(WHISPER_SHAPES).join(", ")}`);
    return shape;
  });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values } = parseArgs({
    options: { shapes: { type: "string", default: "large-v3-turbo,large-v3" }, out: { type: "string", default: ".cache/whisper" } },
  });
  for (const shape of whisperShapesNamed(values.shapes!)) {
    const t0 = performance.now();
    const path = ensureSyntheticWhisper(shape, values.out!);
    process.stderr.write(`${path} (${((performance.now() - t0) / 1000).toFixed(1)} s)\n`);
  }
}
