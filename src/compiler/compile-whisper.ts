/** Compiles a CTranslate2 Whisper folder (faster-whisper's layout) into a speech artifact: two graphs. */
import { createHash } from "node:crypto";
import { statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { artifactsDir, kilnHome } from "../catalogue/paths.js";
import {
  type ArtifactManifest,
  checkSpeechGraphIo,
  type GraphIo,
  type ModelShape,
  readManifest,
  SPEECH_FILES,
  type SpeechManifestPart,
  type WhisperShape,
} from "../runtime/artifact/index.js";
import { ArtifactFolder, artifactId, sha256File } from "./artifact-writer.js";
import { type BuildDevice, COMPILER_VERSION, type CompileResult, type DeviceActivations, SourceChangedError } from "./compile.js";
import { type Ct2Config, Ct2FormatError, Ct2Model, readCt2Config } from "./ct2/reader.js";
import { readHfTokenizer, whisperTokenizerSpec, whisperTokens } from "./ct2/whisper-tokens.js";
import { buildWhisper, countLayers, type DecoderLogSoftmax, type DecoderTopK, type EncoderAttention, type WhisperHyper } from "./graph/whisper.js";
import { GraphBuilder } from "./onnx/graph-builder.js";

/** The files of a CTranslate2 Whisper folder the compiler reads (hashed into the artifact id). */
export const CT2_WHISPER_SOURCE_FILES = ["model.bin", "config.json", "tokenizer.json"] as const;

export interface Ct2CompileRequest {
  slug: string;
  /** The pulled folder: model.bin, config.json, tokenizer.json (vocabulary.* is not needed). */
  modelDir: string;
  home?: string;
  force?: boolean;
  /** SHA-256 each source file must have (what was pulled or pinned), by file name. */
  sourceSha256?: Partial<Record<string, string>>;
  onStage?: (stage: string) => void;
  /**
   * The device the artifact is built for: "cpu" (default) or "webgpu", whose encoder attends with
   * MatMul and Softmax (see EncoderAttention): its own artifact beside the CPU one, the device part
   * of its id. The decoder is the same graph on both.
   */
  device?: BuildDevice;
  /**
   * The GPU target's activations: "float32" (default) or "float16" (weights, layers, windows and the
   * decoder cache in half precision; see WhisperActivations), part of the id. Only for a GPU build.
   */
  deviceActivations?: DeviceActivations;
}

/** Options that shape the graphs (part of the artifact id); only float32 weights today. */
const WHISPER_OPTIONS = { weights: "float32", crossAttention: "grouped", rules: "in-graph", presents: "packed", top: "packed", linears: "gemm" } as const;

/**
 * The options a build for `device` adds to the id: none on the CPU, and no activations when they are
 * float32, so the artifacts built before either option existed keep their ids.
 */
function deviceOptions(
  device: BuildDevice,
  activations: DeviceActivations,
): { device?: BuildDevice; encoderAttention?: EncoderAttention; logSoftmax?: DecoderLogSoftmax; topK?: DecoderTopK; activations?: "float16" } {
  if (device === "cpu") return {};
  return { device, encoderAttention: "explicit", logSoftmax: "reduced", topK: "blocks", ...(activations === "float16" ? { activations } : {}) };
}

export async function compileCt2Whisper(req: Ct2CompileRequest): Promise<CompileResult> {
  // onnxruntime's CPU provider has no float16 kernels for most of the graph.
  if ((req.device ?? "cpu") === "cpu" && (req.deviceActivations ?? "float32") !== "float32")
    throw new RangeError(`${req.deviceActivations} activations are for a GPU build (device webgpu), not the CPU`);
  const started = Date.now();
  const stage = req.onStage ?? (() => {});
  stage("hashing source");
  const hashes = await sourceHashes(req);
  const combined = createHash("sha256")
    .update(CT2_WHISPER_SOURCE_FILES.map((f) => `${f}:${hashes[f]}`).join("\n"))
    .digest("hex");
  const device = req.device ?? "cpu";
  const activations = req.deviceActivations ?? "float32";
  const id = artifactId(req.slug, combined, COMPILER_VERSION, { ...WHISPER_OPTIONS, ...deviceOptions(device, activations) });
  const dir = join(artifactsDir(req.slug, req.home ?? kilnHome()), id);
  if (!req.force) {
    try {
      return { dir, manifest: readManifest(dir), reused: true, seconds: (Date.now() - started) / 1000 };
    } catch {
      // not compiled yet
    }
  }
  stage("reading CTranslate2 model");
  const binPath = join(req.modelDir, "model.bin");
  const model = Ct2Model.open(binPath);
  const folder = new ArtifactFolder(dir);
  try {
    const config = readCt2Config(req.modelDir);
    const hyper = whisperHyper(model, config);
    stage("building graphs");
    const encoder = new GraphBuilder(folder.path(SPEECH_FILES.encoderWeights));
    const decoder = new GraphBuilder(folder.path(SPEECH_FILES.decoderWeights));
    const { encoderAttention, logSoftmax, topK } = deviceOptions(device, activations);
    const choices = buildWhisper({ encoder, decoder }, model, hyper, { encoderAttention, logSoftmax, topK, activations });
    const speechIo = { encoder: ioOf(encoder), decoder: ioOf(decoder) };
    checkSpeechGraphIo(speechIo, hyper, `the graphs built for ${req.slug}`);
    writeFileSync(folder.path(SPEECH_FILES.encoder), encoder.finish(`${req.slug}-encoder`, COMPILER_VERSION, { kiln_artifact: id }));
    writeFileSync(folder.path(SPEECH_FILES.decoder), decoder.finish(`${req.slug}-decoder`, COMPILER_VERSION, { kiln_artifact: id }));
    stage("writing tokenizer");
    const tokenizerPath = join(req.modelDir, "tokenizer.json");
    const spec = whisperTokenizerSpec(readHfTokenizer(tokenizerPath), hyper.vocab);
    folder.writeTokenizer(spec, null);
    const tokens = whisperTokens(spec, config, tokenizerPath);
    const speech: SpeechManifestPart = { kind: "transcription", speech: whisperShape(hyper), tokens, speechIo };
    const manifest: Omit<ArtifactManifest, "files"> = {
      id,
      slug: req.slug,
      ...(device !== "cpu" ? { device } : {}),
      compilerVersion: COMPILER_VERSION,
      createdAt: new Date().toISOString(),
      source: { file: "model.bin", sha256: hashes["model.bin"], bytes: statSync(binPath).size },
      shape: decoderShape(hyper),
      io: speechIo.decoder,
      choices: [
        ...choices,
        activations === "float16"
          ? {
              what: "weights",
              choice: `float16 (from ${hyper.sourceDtype})`,
              exact: hyper.sourceDtype === "float16",
              why: "the activations' type, so the GPU reads half the bytes; the published conversions are float16",
            }
          : {
              what: "weights",
              choice: `float32 (from ${hyper.sourceDtype})`,
              exact: true,
              why: "onnxruntime's CPU float32 MatMul/Conv kernels are its fastest exact path; widening loses nothing",
            },
        {
          what: "source",
          choice: `CTranslate2 ${model.specName} rev ${model.specRevision}, binary v${model.version}; files ${CT2_WHISPER_SOURCE_FILES.map((f) => `${f} ${hashes[f].slice(0, 12)}`).join(", ")}`,
          exact: true,
          why: "the artifact id hashes all three",
        },
      ],
      stopTokenIds: [tokens.endOfText],
      ...speech,
    };
    const committed = await folder.commit(manifest);
    return { dir, manifest: committed, reused: false, seconds: (Date.now() - started) / 1000 };
  } catch (err) {
    try {
      folder.abandon();
    } catch {
      // The compile's own error is what the user must see, not a failed cleanup's.
    }
    throw err;
  } finally {
    model.close();
  }
}

async function sourceHashes(req: Ct2CompileRequest): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const file of CT2_WHISPER_SOURCE_FILES) {
    const path = join(req.modelDir, file);
    const actual = await sha256File(path);
    const expected = req.sourceSha256?.[file]?.toLowerCase();
    if (expected !== undefined && expected !== actual) throw new SourceChangedError(path, expected, actual);
    out[file] = actual;
  }
  return out;
}

function ioOf(g: GraphBuilder): GraphIo {
  return { inputs: g.inputs.map((i) => i.name), outputs: g.outputs.map((o) => o.name) };
}

/**
 * The shape from the tensors themselves (config.json has only token facts). When config.json names no
 * alignment heads, Whisper's own default applies: every head of the second half of the decoder layers.
 */
export function whisperHyper(model: Ct2Model, config: Ct2Config): WhisperHyper {
  if (model.specName !== "WhisperSpec") throw new Ct2FormatError(model.path, `spec ${model.specName}, not WhisperSpec`);
  const [width, melBins] = model.dims("encoder/conv1/weight");
  const heads = model.scalar("decoder/num_heads");
  const decoderLayers = countLayers(model, "decoder", "self_attention/linear_0/weight");
  const alignmentHeads =
    config.alignment_heads && config.alignment_heads.length > 0
      ? config.alignment_heads.map(([l, h]) => [l, h] as [number, number])
      : Array.from({ length: decoderLayers - Math.floor(decoderLayers / 2) }, (_, i) =>
          Array.from({ length: heads }, (_, h) => [Math.floor(decoderLayers / 2) + i, h] as [number, number]),
        ).flat();
  const hyper: WhisperHyper = {
    melBins,
    audioContext: model.dims("encoder/position_encodings/encodings")[0],
    textContext: model.dims("decoder/position_encodings/encodings")[0],
    width,
    heads,
    headDim: width / heads,
    encoderLayers: countLayers(model, "encoder", "self_attention/linear_0/weight"),
    decoderLayers,
    vocab: model.dims("decoder/embeddings/weight")[0],
    alignmentHeads,
    sourceDtype: model.weightDtype("encoder/layer_0/ffn/linear_0/weight", "encoder/layer_0/ffn/linear_0/bias"),
    ffn: model.dims("encoder/layer_0/ffn/linear_0/weight")[0],
    encoderHeads: model.scalar("encoder/num_heads"),
  };
  checkHyper(hyper, model);
  return hyper;
}

function checkHyper(h: WhisperHyper, model: Ct2Model): void {
  const bad = (why: string) => new Ct2FormatError(model.path, why);
  if (!Number.isInteger(h.headDim) || h.width % h.encoderHeads !== 0) throw bad(`width ${h.width} does not split into ${h.heads} heads`);
  if (h.encoderLayers === 0 || h.decoderLayers === 0) throw bad("no encoder or decoder layers");
  if (model.has("decoder/activation") && model.scalar("decoder/activation") !== 3)
    throw bad(`decoder activation ${model.scalar("decoder/activation")} is not GELU (3)`);
  for (const [l, head] of h.alignmentHeads)
    if (l >= h.decoderLayers || head >= h.heads) throw bad(`alignment head [${l}, ${head}] is outside ${h.decoderLayers} layers x ${h.heads} heads`);
}

function whisperShape(h: WhisperHyper): WhisperShape {
  const { melBins, audioContext, textContext, width, heads, headDim, encoderLayers, decoderLayers, vocab, alignmentHeads, sourceDtype } = h;
  return { melBins, audioContext, textContext, width, heads, headDim, encoderLayers, decoderLayers, vocab, alignmentHeads, sourceDtype };
}

/** The decoder as the common manifest's model shape (what sizes a KV cache). */
function decoderShape(h: WhisperHyper): ModelShape {
  return {
    architecture: "whisper",
    layers: h.decoderLayers,
    hidden: h.width,
    heads: h.heads,
    kvHeads: h.heads,
    headDim: h.headDim,
    vocab: h.vocab,
    contextLength: h.textContext,
  };
}
