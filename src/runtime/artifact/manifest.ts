/**
 * The artifact manifest: what the compiler writes beside the graph and what the runtime loads by.
 * Both sides import these types; neither spells the shapes again.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ARTIFACT_FILES } from "./files.js";
import type { ComputeDevice } from "../device/index.js";
import type { WhisperShape, WhisperTokens } from "./speech-graph.js";

/**
 * The tokenizer as kiln's compiler extracts it from a GGUF file (`tokenizer.ggml.*` metadata).
 * Token types follow llama.cpp: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
 */
export interface TokenizerSpec {
  /** `tokenizer.ggml.model`: "gpt2" (byte-level BPE) or "llama" (SentencePiece). */
  model: string;
  /** `tokenizer.ggml.pre`: the pre-tokenizer name llama.cpp uses to pick its split regexes. */
  pre: string;
  tokens: string[];
  tokenTypes: number[];
  /** BPE merges as "left right" strings, highest priority first. */
  merges: string[];
  bosId: number | null;
  eosId: number | null;
  /** End-of-turn token, when the model has one distinct from EOS. */
  eotId: number | null;
  padId: number | null;
  unkId: number | null;
  addBos: boolean;
  addEos: boolean;
  addSpacePrefix: boolean;
  /**
   * `tokenizer.ggml.scores`: each token's SentencePiece score (higher merges first); used by the
   * "llama" model only. Absent in artifacts from before SentencePiece support: every score is 0.
   */
  scores?: number[];
  /**
   * `general.name`: llama.cpp gives tokens per-model attributes by it (the special tokens of a model
   * named like Phi-3 swallow the whitespace after them). Absent: no such attributes.
   */
  modelName?: string;
  /**
   * `tokenizer.ggml.fim_{pre,suf,mid}_token_id` (or their older names `prefix`, `suffix`, `middle`):
   * the fill-in-the-middle markers the GGUF names, each null where it names none. Absent: none
   * named; the tokenizer then looks for them by their usual texts.
   */
  fimIds?: [number | null, number | null, number | null];
}

/** Model shape facts the runtime needs to size its KV cache and feeds. */
export interface ModelShape {
  architecture: string;
  layers: number;
  hidden: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  vocab: number;
  contextLength: number;
  /**
   * The sliding-window layers (Gemma 2/3's local layers): each attends to the last `window`
   * positions, itself included, and its KV cache is a ring of `slidingCacheCapacity(window)`
   * positions (see `text-graph.ts`). Absent when no layer slides: every layer keeps every position.
   */
  slidingWindow?: SlidingWindowShape;
}

/** One kind of layer whose attention slides: its window, in positions, and which layers are of it. */
export interface SlidingWindowShape {
  window: number;
  layers: number[];
}

/** A graph's input and output names, in order. */
export interface GraphIo {
  inputs: string[];
  outputs: string[];
}

/** One file of an artifact folder as the compiler wrote it. */
export interface ArtifactFileRecord {
  /** Name inside the artifact folder. */
  path: string;
  bytes: number;
  /** Hex SHA-256 of the content. */
  sha256: string;
}

export interface ArtifactManifest {
  /**
   * What the artifact serves: absent or "text" for one text graph; "transcription" for a speech
   * artifact, which also carries `speech`, `tokens` and `speechIo` (see `speech-graph.ts`).
   */
  kind?: "text" | "transcription";
  /**
   * The device the graph was built for, and is measured on by the track: absent or "cpu" for the CPU
   * provider's graph; "webgpu" for the GPU compile target (fp16 activations, the KV cache resident on
   * the device), which is its own artifact beside the CPU one.
   */
  device?: ComputeDevice;
  /** Content-derived id: slug + short hash of (source sha256, compiler version, options). */
  id: string;
  slug: string;
  compilerVersion: string;
  createdAt: string;
  source: { file: string; sha256: string; bytes: number };
  shape: ModelShape;
  /** Graph input and output names, in graph order (see `text-graph.ts`); the runtime checks them at load. */
  io: GraphIo;
  /** Every choice the compiler made, with the reason; `exact: false` marks a lossy mapping. */
  choices: Array<{ what: string; choice: string; exact: boolean; why: string }>;
  /** EOS-like token ids that end generation. */
  stopTokenIds: number[];
  /**
   * Size and SHA-256 of every file of the folder but `manifest.json` itself, checked at load (see
   * `verify.ts`). Absent in manifests from compilers before 0.3.0: such an artifact is rebuilt.
   */
  files: ArtifactFileRecord[];
  /** Speech artifacts only: the Whisper shape. */
  speech?: WhisperShape;
  /** Speech artifacts only: Whisper's special token ids. */
  tokens?: WhisperTokens;
  /** Speech artifacts only: both graphs' names (`io` repeats the decoder's). */
  speechIo?: { encoder: GraphIo; decoder: GraphIo };
}

export function readManifest(dir: string): ArtifactManifest {
  return JSON.parse(readFileSync(join(dir, ARTIFACT_FILES.manifest), "utf8")) as ArtifactManifest;
}

export function readTokenizerSpec(dir: string): TokenizerSpec {
  return JSON.parse(readFileSync(join(dir, ARTIFACT_FILES.tokenizer), "utf8")) as TokenizerSpec;
}
