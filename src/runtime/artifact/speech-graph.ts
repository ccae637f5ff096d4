/**
 * The contract between kiln's compiler and its runtime for a speech (Whisper) artifact: two graphs,
 * their input and output names, and the shape facts the runtime sizes its caches from.
 *
 * The encoder runs once per 30 s window and also yields every decoder layer's cross-attention keys
 * and values, so the decoder never recomputes them. The decoder follows the text graph's design: its
 * self-attention KV cache is a graph input kept in the runtime's memory (keys transposed), and it
 * returns only the new tokens' keys and values. Cross-attention keys are transposed the same way.
 */
import { type ArtifactManifest, type GraphIo, readManifest } from "./manifest.js";

/** Files of a speech artifact folder (beside `manifest.json` and `tokenizer.json`). */
export const SPEECH_FILES = {
  encoder: "encoder.onnx",
  encoderWeights: "encoder.onnx.data",
  decoder: "decoder.onnx",
  decoderWeights: "decoder.onnx.data",
} as const;

/** Audio samples per second the front end works at. */
export const SAMPLE_RATE = 16000;
/** Samples between two mel frames (10 ms). */
export const HOP_LENGTH = 160;
/** FFT window, in samples (25 ms). */
export const N_FFT = 400;
/** Mel frames in one 30 s window. */
export const WINDOW_FRAMES = 3000;
/** Samples in one 30 s window. */
export const WINDOW_SAMPLES = WINDOW_FRAMES * HOP_LENGTH;
/** Seconds one timestamp token step stands for. */
export const TIME_PRECISION = 0.02;

export const SPEECH_GRAPH = {
  encoder: {
    /** float32 [batch, mel_bins, 3000]: log-mel features of one 30 s window. */
    mel: "mel",
    /** float32 [batch, heads, head_dim, audio_ctx]: a decoder layer's cross-attention keys, transposed. */
    crossKey: (layer: number) => `cross_key_t.${layer}`,
    /** float32 [batch, heads, audio_ctx, head_dim]: a decoder layer's cross-attention values. */
    crossValue: (layer: number) => `cross_value.${layer}`,
  },
  decoder: {
    /** int64 [batch, seq]: new token ids. */
    inputIds: "input_ids",
    /** int64 [batch, seq]: their positions (rows of the learned position table). */
    positionIds: "position_ids",
    /** float32 [batch, 1, 1, past]: 0 for cached positions a row may see, -inf for the rest. */
    pastMask: "past_mask",
    /** float32 [1, 1, seq, seq]: causal mask among the new tokens. */
    newMask: "new_mask",
    /** float32 [batch, heads, head_dim, past]: one layer's cached self-attention keys, transposed. */
    pastKey: (layer: number) => `past_key_t.${layer}`,
    /** float32 [batch, heads, past, head_dim]: one layer's cached self-attention values. */
    pastValue: (layer: number) => `past_value.${layer}`,
    /**
     * The encoder's outputs of the same names, fed back per group of rows: [groups, ...], the batch's
     * rows split evenly into `groups` runs that each read one window (1 when every row reads the same
     * window, as a transcription's beams do; else one per row).
     */
    crossKey: (layer: number) => `cross_key_t.${layer}`,
    crossValue: (layer: number) => `cross_value.${layer}`,
    /**
     * float32 [batch, vocab]: each row's decoding rules as an additive mask (0 where a token may
     * come, -inf where it may not), added to the logits before the top log-probabilities are taken.
     */
    ruleMask: "rule_mask",
    /** int64 [1]: the first timestamp token's id; tokens below it are text (for the timestamp rule). */
    textTokens: "text_tokens",
    /** int64 [1]: how many of each row's likeliest tokens {@link top} returns. */
    topK: "top_k",
    /** float32 [batch, vocab]: the last position's logits (fetched only when a row needs them whole). */
    logits: "logits",
    /**
     * float32 [batch, 2, top_k]: each row's likeliest log-probabilities under its rules (the mask,
     * then timestamps forced where they are jointly likelier than any text token), likeliest first
     * (on equal log-probabilities the lower id first), at [row, 0], and their token ids as floats
     * (exact below 2^24) at [row, 1]; an entry of log-probability -inf is no token (its id may be -1).
     * One output for both, as for {@link presents}.
     */
    top: "top",
    /**
     * [2 * layers, batch, heads, seq, head_dim] in the activations' type: every layer's new
     * self-attention keys and values, entry 2l layer l's keys and 2l + 1 its values
     * ({@link presentEntry}). One output, since each output a call brings back from a GPU is a wait
     * of its own for the device (about 0.1 ms each on lavapipe), and a model has up to 32 layers.
     */
    presents: "presents",
    /**
     * float32 [batch, alignment_heads, seq, audio_ctx]: cross-attention weights (after softmax) of
     * the model's alignment heads, in `alignmentHeads` order; fetched only for word timestamps.
     */
    alignment: "alignment",
  },
} as const;

/** Shape facts of a Whisper model, recorded in the manifest (`speech`). */
export interface WhisperShape {
  /** Mel bins of the front end: 80, or 128 for large-v3. */
  melBins: number;
  /** Encoder positions per window (1500 = 3000 frames after the stride-2 convolution). */
  audioContext: number;
  /** Decoder positions (448). */
  textContext: number;
  width: number;
  heads: number;
  headDim: number;
  encoderLayers: number;
  decoderLayers: number;
  vocab: number;
  /** [decoder layer, head] pairs whose cross-attention aligns text to audio (word timestamps). */
  alignmentHeads: Array<[number, number]>;
  /** Weight dtype of the source file (float16, float32, int8, int8_float16, ...). */
  sourceDtype: string;
}

/** Whisper's special token ids, read from the model's own vocabulary. */
export interface WhisperTokens {
  endOfText: number;
  startOfTranscript: number;
  startOfPrev: number;
  /** <|startoflm|>, when the vocabulary has it. */
  startOfLm: number | null;
  noTimestamps: number;
  /** <|nocaptions|> (English-only) or <|nospeech|> (multilingual). */
  noSpeech: number;
  /** The first timestamp token, <|0.00|>; timestamp i is `timestampBegin + i`. */
  timestampBegin: number;
  transcribe: number | null;
  translate: number | null;
  /** Language codes ("en", "de", ...) to their token ids; empty for English-only models. */
  languages: Record<string, number>;
  /** Token ids always suppressed (config.json's `suppress_ids`, Whisper's "-1" set). */
  suppress: number[];
  /** Token ids suppressed at the first sampled position (config.json's `suppress_ids_begin`). */
  suppressAtBegin: number[];
}

/** What a speech artifact's manifest adds to the common fields. */
export interface SpeechManifestPart {
  kind: "transcription";
  speech: WhisperShape;
  tokens: WhisperTokens;
  /** Graph names of each graph, in order (see {@link speechGraphIo}). */
  speechIo: { encoder: GraphIo; decoder: GraphIo };
}

/** The entry of the decoder's `presents` holding layer `layer`'s new keys, or its values. */
export function presentEntry(layer: number, part: "key" | "value"): number {
  return 2 * layer + (part === "key" ? 0 : 1);
}

/** The input and output names of the two Whisper graphs, in declaration order. */
export function speechGraphIo(shape: Pick<WhisperShape, "decoderLayers">): { encoder: GraphIo; decoder: GraphIo } {
  const e = SPEECH_GRAPH.encoder;
  const d = SPEECH_GRAPH.decoder;
  const layers = Array.from({ length: shape.decoderLayers }, (_, l) => l);
  return {
    encoder: { inputs: [e.mel], outputs: layers.flatMap((l) => [e.crossKey(l), e.crossValue(l)]) },
    decoder: {
      inputs: [
        d.inputIds,
        d.positionIds,
        d.pastMask,
        d.newMask,
        ...layers.flatMap((l) => [d.pastKey(l), d.pastValue(l)]),
        ...layers.flatMap((l) => [d.crossKey(l), d.crossValue(l)]),
        d.ruleMask,
        d.textTokens,
        d.topK,
      ],
      outputs: [d.logits, d.presents, d.alignment, d.top],
    },
  };
}

/** Throws when recorded graph names are not the ones this runtime feeds and fetches. */
export function checkSpeechGraphIo(io: { encoder: GraphIo; decoder: GraphIo }, shape: Pick<WhisperShape, "decoderLayers">, where: string): void {
  const want = speechGraphIo(shape);
  const same = (a: readonly string[], b: readonly string[]) => a.length === b.length && a.every((x, i) => x === b[i]);
  for (const g of ["encoder", "decoder"] as const) {
    if (!same(io[g].inputs, want[g].inputs) || !same(io[g].outputs, want[g].outputs)) {
      throw new Error(
        `${where} has ${g} inputs/outputs this runtime does not know (compiled by another kiln version?): recompile it with \`kiln compile --force\``,
      );
    }
  }
}

/** A speech artifact's manifest: the common fields plus the speech part (the runtime's view). */
export type SpeechArtifactManifest = import("./manifest.js").ArtifactManifest & SpeechManifestPart;

/** Shorter name for {@link SpeechArtifactManifest}. */
export type SpeechManifest = SpeechArtifactManifest;

/** A manifest that is not a speech one where a speech artifact was expected. */
export class NotSpeechArtifactError extends Error {
  constructor(dir: string, kind: string) {
    super(`${dir} holds a ${kind} artifact, not a transcription (speech) one`);
    this.name = "NotSpeechArtifactError";
  }
}

/** Reads an artifact's manifest and checks it describes a speech artifact with both graphs' names. */
export function readSpeechManifest(dir: string): SpeechArtifactManifest {
  const manifest = readManifest(dir);
  if (manifest.kind !== "transcription") throw new NotSpeechArtifactError(dir, manifest.kind ?? "text");
  if (!manifest.speech || !manifest.tokens || !manifest.speechIo)
    throw new Error(`${dir}/manifest.json says "transcription" but lacks its speech, tokens or speechIo part: recompile it with \`kiln compile --force\``);
  checkSpeechGraphIo(manifest.speechIo, manifest.speech, `the artifact ${dir}`);
  return manifest as SpeechArtifactManifest;
}
