/** Pull -> compile -> record: a catalogue model's compiled artifact, built when missing. */
import { basename, join } from "node:path";
import { describeSource, getModel, memberPath, packageMembers } from "../catalogue/catalogue.js";
import { cannotWrite, type KilnDatabase, openDatabase } from "../catalogue/db.js";
import { kilnHome } from "../catalogue/paths.js";
import { pullModel, type PulledModel, type PullOptions } from "../catalogue/pull/index.js";
import type { WeightSource } from "../catalogue/types.js";
import { CT2_WHISPER_SOURCE_FILES, compileCt2Whisper } from "../compiler/compile-whisper.js";
import {
  COMPILER_VERSION,
  compileGguf,
  type CompileOptions,
  type CompileResult,
  type DeviceActivations,
  type DeviceAttention,
  SourceChangedError,
} from "../compiler/compile.js";
import { isFirstOrOnlyGguf, isShardName } from "../compiler/gguf/split.js";
import { type ArtifactProblem, describeProblems, verifyArtifact } from "../runtime/artifact/index.js";
import type { ComputeDevice } from "../runtime/device/index.js";
import { recordCompileFailure, recordCompileFinish, recordCompileStart } from "./compile-records.js";

export class NotCompilableError extends Error {
  constructor(slug: string, why: string) {
    super(`cannot compile ${slug}: ${why}`);
  }
}

/** A model loaded for work of another kind (a speech model for chat, a text model for transcription). */
export class WrongKindError extends Error {
  constructor(slug: string, kind: string, wanted: string) {
    super(`${slug} is a ${kind} model, not ${wanted}`);
    this.name = "WrongKindError";
  }
}

/** An artifact whose files do not match its manifest even after it was rebuilt. */
export class ArtifactIntegrityError extends Error {
  constructor(
    readonly dir: string,
    readonly problems: ArtifactProblem[],
  ) {
    super(`the artifact ${dir} does not match its manifest even after a rebuild: ${describeProblems(problems)}; refusing to load it`);
    this.name = "ArtifactIntegrityError";
  }
}

/** A pulled source file whose hash is not the one the catalogue pins. */
export class SourceHashError extends Error {
  constructor(slug: string, path: string, pinned: string, pulled: string) {
    super(`cannot compile ${slug}: ${path} was pulled with sha256 ${pulled}, but the catalogue pins ${pinned}; refusing to compile it`);
    this.name = "SourceHashError";
  }
}

export interface ProvisionOptions {
  /** Compile options (part of the artifact id). Default: the compiler's defaults. */
  compile?: CompileOptions;
  /**
   * The device a model's artifact is built for: "webgpu" compiles (once, then reuses) the GPU
   * target, its own artifact beside the CPU one (a speech model's: its encoder attending with MatMul
   * and Softmax). Default "cpu".
   */
  device?: ComputeDevice;
  /** The GPU target's activations (`compileGguf`'s and `compileCt2Whisper`'s `deviceActivations`): "float32" (default) or "float16". Ignored on the CPU. */
  deviceActivations?: DeviceActivations;
  /** The GPU target's attention (`compileGguf`'s `deviceAttention`): "gqa" (default) or "explicit". */
  deviceAttention?: DeviceAttention;
  /** Root of kiln's store. Default `kilnHome()`. */
  home?: string;
  /** Rebuild even when an artifact with the same id exists. Default false. */
  force?: boolean;
  pull?: PullOptions;
  /** Progress, as short phrases ("pulling weights", "compiling"...). */
  onStage?: (stage: string) => void;
}

/** The sha256 the catalogue (or `sources`) pins for `path` of the source the files came from, if any. */
function pinnedSha256(sources: readonly WeightSource[], pulled: PulledModel, path: string): string | undefined {
  const source = sources.find((s) => describeSource(s) === pulled.source);
  if (!source) return undefined;
  const pin = source.type === "hub" ? source.files.find((f) => f.path === path)?.sha256 : packageMembers(source).find((m) => memberPath(m) === path)?.sha256;
  return pin?.toLowerCase();
}

/** A pulled source checked against its pins, ready to compile. */
interface PulledSource {
  compile(force: boolean): Promise<CompileResult>;
}

type SourceCompiler = (slug: string, pulled: PulledModel, sources: readonly WeightSource[], opts: ProvisionOptions & { home: string }) => PulledSource;

/** Text models: the pulled GGUF file through `compileGguf`. */
const ggufCompiler: SourceCompiler = (slug, pulled, sources, opts) => {
  // A split model is opened at its first shard; every shard is checked and hashed with it.
  const gguf = pulled.files.find((f) => isFirstOrOnlyGguf(f.path));
  if (!gguf) throw new NotCompilableError(slug, `no GGUF file among the pulled files (${pulled.files.map((f) => f.path).join(", ")})`);
  const shards = pulled.files.filter((f) => f !== gguf && isShardName(f.path));
  for (const f of [gguf, ...shards]) checkPin(slug, sources, pulled, f);
  const shardSha256 = Object.fromEntries(shards.map((f) => [basename(f.path), f.sha256]));
  const ggufPath = join(pulled.dir, gguf.path);
  return {
    compile: (force) =>
      compileGguf({
        slug,
        ggufPath,
        sourceSha256: gguf.sha256,
        shardSha256,
        options: opts.compile,
        device: opts.device,
        deviceActivations: opts.deviceActivations,
        deviceAttention: opts.deviceAttention,
        home: opts.home,
        force,
        onStage: opts.onStage,
      }),
  };
};

/** Transcription models: a CTranslate2 Whisper folder through `compileCt2Whisper`; whisper.cpp's ggml files are not compilable. */
const ct2WhisperCompiler: SourceCompiler = (slug, pulled, sources, opts) => {
  if (pulled.format !== "ctranslate2") {
    throw new NotCompilableError(
      slug,
      `its pulled weights are in ${pulled.format} format (${pulled.source}); kiln's speech compiler reads CTranslate2 Whisper conversions only`,
    );
  }
  const sourceSha256: Record<string, string> = {};
  for (const path of CT2_WHISPER_SOURCE_FILES) {
    const file = pulled.files.find((f) => f.path === path);
    if (!file) throw new NotCompilableError(slug, `no ${path} among the pulled files (${pulled.files.map((f) => f.path).join(", ")})`);
    checkPin(slug, sources, pulled, file);
    sourceSha256[path] = file.sha256;
  }
  return {
    compile: (force) =>
      compileCt2Whisper({
        slug,
        modelDir: pulled.dir,
        sourceSha256,
        home: opts.home,
        force,
        onStage: opts.onStage,
        device: opts.device,
        deviceActivations: opts.device && opts.device !== "cpu" ? opts.deviceActivations : undefined,
      }),
  };
};

function checkPin(slug: string, sources: readonly WeightSource[], pulled: PulledModel, file: { path: string; sha256: string }): void {
  const pinned = pinnedSha256(sources, pulled, file.path);
  if (pinned !== undefined && pinned !== file.sha256.toLowerCase()) throw new SourceHashError(slug, file.path, pinned, file.sha256);
}

/**
 * Pulls a catalogue model if needed, compiles it (or reuses its artifact), and records the compile in
 * SQLite. Text models compile from GGUF, transcription models from a CTranslate2 Whisper folder. The source is compiled only when its sha256 is the one pulled and the one the catalogue
 * pins (a file changed since is pulled again once, else refused). A reused artifact is verified
 * against its manifest (sizes, and sha256 where its verification stamp does not vouch for a file):
 * a damaged one is rebuilt once, and refused with `ArtifactIntegrityError` if it still differs.
 */
export async function provisionArtifact(slug: string, opts: ProvisionOptions = {}): Promise<CompileResult> {
  const entry = getModel(slug);
  const home = opts.home ?? kilnHome();
  const stage = opts.onStage ?? (() => {});
  const sources = opts.pull?.sources ?? entry.sources;
  const compilerFor = entry.kind === "text" ? ggufCompiler : ct2WhisperCompiler;
  const pull = async (rehash: boolean) => {
    const pulled = await pullModel(slug, { ...opts.pull, home, rehash: rehash || opts.pull?.rehash });
    opts.pull?.signal?.throwIfAborted();
    return compilerFor(slug, pulled, sources, { ...opts, home });
  };
  stage("pulling weights");
  let source = await pull(false);
  const db = openRecords(home);
  // Compile options shape only the text compiler's graphs; a speech compile records only its device.
  const recordId = db && recordCompileStart(db, slug, COMPILER_VERSION, entry.kind === "text" ? recordedOptions(opts) : recordedSpeechOptions(opts));
  let failed = false;
  try {
    const compile = (force: boolean) => source.compile(force);
    let result: CompileResult;
    try {
      result = await compile(opts.force ?? false);
    } catch (err) {
      if (!(err instanceof SourceChangedError)) throw err;
      // Changed since the pull checked it: pull again, hashing every file (a file that fails is fetched again).
      stage(`${err.path} changed after it was pulled: pulling it again`);
      source = await pull(true);
      result = await compile(opts.force ?? false);
    }
    if (result.reused) {
      stage("verifying the artifact");
      const problems = await verifyArtifact(result.dir, result.manifest);
      if (problems.length > 0) {
        stage(`rebuilding the artifact (${describeProblems(problems)})`);
        result = await compile(true);
        const again = await verifyArtifact(result.dir, result.manifest);
        if (again.length > 0) throw new ArtifactIntegrityError(result.dir, again);
      }
    }
    if (db && recordId !== null) recordCompileFinish(db, recordId, result);
    return result;
  } catch (err) {
    failed = true;
    throw recordedFailure(err, () => db && recordId !== null && recordCompileFailure(db, recordId, err));
  } finally {
    if (db) closeDatabase(db, failed);
  }
}

/** A text compile's options as its record keeps them: the device among them when it is not the CPU. */
function recordedOptions(opts: ProvisionOptions): object {
  if (!opts.device || opts.device === "cpu") return { ...opts.compile };
  return {
    ...opts.compile,
    device: opts.device,
    deviceActivations: opts.deviceActivations ?? "float32",
    ...(opts.deviceAttention ? { deviceAttention: opts.deviceAttention } : {}),
  };
}

/** A speech compile's options as its record keeps them: its device and activations, when it is not the CPU. */
function recordedSpeechOptions(opts: ProvisionOptions): object {
  return !opts.device || opts.device === "cpu" ? {} : { device: opts.device, deviceActivations: opts.deviceActivations ?? "float32" };
}

/**
 * The database compiles are recorded in; null where KILN_HOME cannot be written (a fleet's shared,
 * read-only home), whose artifacts are served as they are, unrecorded.
 */
function openRecords(home: string): KilnDatabase | null {
  try {
    return openDatabase({ home });
  } catch (err) {
    if (cannotWrite(err)) return null;
    throw err;
  }
}

/**
 * The error a failed compile reports: its own, even when recording it fails too. A full disk fails
 * the compile with ENOSPC and then SQLite's write of the failure ("database or disk is full"); the
 * user must see the first cause, so the recording error is only attached (as `recordError`).
 */
export function recordedFailure(err: unknown, record: () => void): unknown {
  try {
    record();
  } catch (recordError) {
    if (err instanceof Error && Object.isExtensible(err))
      Object.defineProperty(err, "recordError", { value: recordError, enumerable: false, configurable: true });
  }
  return err;
}

/** Closes the database; a close that fails while a compile error is on its way must not replace it. */
function closeDatabase(db: { close(): unknown }, failed: boolean): void {
  try {
    db.close();
  } catch (closeError) {
    if (!failed) throw closeError;
  }
}
