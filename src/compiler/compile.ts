import { statSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { artifactsDir, kilnHome } from "../catalogue/paths.js";
import { ARTIFACT_FILES, type ArtifactManifest, checkTextGraphIo, type ModelShape, readManifest } from "../runtime/artifact/index.js";
import { ArtifactFolder, artifactId, sha256File } from "./artifact-writer.js";
import { endOfGenerationIds } from "./eog.js";
import { GgufWeights } from "./gguf-weights.js";
import { readGguf } from "./gguf/reader.js";
import { buildLlama, type LlamaBuildOptions, type LlamaHyper } from "./graph/llama.js";
import { llamaHyper } from "./hyper.js";
import { GraphBuilder } from "./onnx/graph-builder.js";
import { chatTemplate, tokenizerSpec } from "./tokenizer-spec.js";

/**
 * Part of every artifact id. 0.3.0: the manifest records each file's size and sha256 (`files`).
 * 0.4.0: text graphs take `logits_from` and can return every position's logits (prompt scoring).
 */
export const COMPILER_VERSION = "0.4.0";

/** Options that change the compiled graph (part of the artifact id). */
export interface CompileOptions {
  /** MatMulNBits accuracy_level: 4 = int8 activations (fast), 0 = float activations. Default 4. */
  accuracyLevel?: number;
  /** "fast" (default) or "llama.cpp" rounding emulation; see LlamaBuildOptions.numerics. */
  numerics?: "fast" | "llama.cpp";
}

export interface CompileRequest {
  slug: string;
  ggufPath: string;
  options?: CompileOptions;
  /** Root of kiln's store (default `kilnHome()`). */
  home?: string;
  /** Rebuild even when an artifact with the same id exists. */
  force?: boolean;
  /**
   * The SHA-256 the source must have (what was pulled, what the catalogue pins): a file whose hash
   * differs is neither compiled nor matched to an artifact ({@link SourceChangedError}).
   */
  sourceSha256?: string;
  onStage?: (stage: string) => void;
}

export interface CompileResult {
  dir: string;
  manifest: ArtifactManifest;
  reused: boolean;
  seconds: number;
}

/** The source GGUF's content is not the one recorded for it: it changed after it was pulled. */
export class SourceChangedError extends Error {
  constructor(
    readonly path: string,
    readonly expected: string,
    readonly actual: string,
  ) {
    super(`${path} has sha256 ${actual}, but ${expected} was recorded for it (pulled or pinned): the file changed after it was pulled; refusing to compile it`);
    this.name = "SourceChangedError";
  }
}

/** What an unset compile option means. */
export const DEFAULT_COMPILE_OPTIONS: Required<CompileOptions> = { accuracyLevel: 4, numerics: "fast" };

function resolvedOptions(options: CompileOptions = {}): Required<CompileOptions> {
  return { accuracyLevel: options.accuracyLevel ?? DEFAULT_COMPILE_OPTIONS.accuracyLevel, numerics: options.numerics ?? DEFAULT_COMPILE_OPTIONS.numerics };
}

/** Compiles a Llama-family GGUF file into an artifact folder (graph, weights, tokenizer, template, manifest). */
export async function compileGguf(req: CompileRequest): Promise<CompileResult> {
  const started = Date.now();
  const options = resolvedOptions(req.options);
  const stage = req.onStage ?? (() => {});
  stage("hashing source");
  const sha256 = await sha256File(req.ggufPath);
  if (req.sourceSha256 !== undefined && sha256 !== req.sourceSha256.toLowerCase()) throw new SourceChangedError(req.ggufPath, req.sourceSha256.toLowerCase(), sha256);
  const id = artifactId(req.slug, sha256, COMPILER_VERSION, options);
  const dir = join(artifactsDir(req.slug, req.home ?? kilnHome()), id);
  if (!req.force) {
    try {
      return { dir, manifest: readManifest(dir), reused: true, seconds: (Date.now() - started) / 1000 };
    } catch {
      // not compiled yet
    }
  }
  stage("reading GGUF");
  const file = await readGguf(req.ggufPath);
  const hyper = llamaHyper(file);
  const folder = new ArtifactFolder(dir);
  try {
    stage("building graph");
    const builder = new GraphBuilder(folder.path(ARTIFACT_FILES.weights));
    const build: LlamaBuildOptions = { accuracyLevel: options.accuracyLevel, numerics: options.numerics };
    const choices = await buildLlama(builder, new GgufWeights(file), hyper, build);
    const io = { inputs: builder.inputs.map((i) => i.name), outputs: builder.outputs.map((o) => o.name) };
    checkTextGraphIo(io, hyper.layers, `the graph built for ${req.slug}`);
    const graph = builder.finish(`${req.slug}`, COMPILER_VERSION, { kiln_artifact: id });
    writeFileSync(folder.path(ARTIFACT_FILES.graph), graph);
    stage("writing tokenizer");
    const spec = tokenizerSpec(file);
    folder.writeTokenizer(spec, chatTemplate(file));
    const manifest: Omit<ArtifactManifest, "files"> = {
      id,
      slug: req.slug,
      compilerVersion: COMPILER_VERSION,
      createdAt: new Date().toISOString(),
      source: { file: basename(req.ggufPath), sha256, bytes: statSync(req.ggufPath).size },
      shape: modelShape(hyper),
      io,
      choices: [...choices, { what: "options", choice: JSON.stringify(options), exact: true, why: "compile options" }],
      stopTokenIds: endOfGenerationIds(spec),
    };
    const committed = await folder.commit(manifest);
    return { dir, manifest: committed, reused: false, seconds: (Date.now() - started) / 1000 };
  } catch (err) {
    try {
      folder.abandon();
    } catch {
      // The compile's own error (ENOSPC on a full disk, say) is what the user must see, not a failed cleanup's.
    }
    throw err;
  }
}


/** The runtime's part of the hyperparameters (what the manifest records). */
function modelShape(h: LlamaHyper): ModelShape {
  const { architecture, layers, hidden, heads, kvHeads, headDim, vocab, contextLength } = h;
  return { architecture, layers, hidden, heads, kvHeads, headDim, vocab, contextLength };
}
