/**
 * A GGUF file on this machine, served or compiled as llama.cpp and Ollama users expect
 * (`kiln serve --model ./my-model.Q4_K_M.gguf`): its slug comes from the file name, its artifact is
 * cached by the file's content hash like a catalogue model's, and a file kiln cannot serve is refused
 * with one line naming the file and why.
 */
import { statSync } from "node:fs";
import { basename, isAbsolute, resolve } from "node:path";
import { hasModel } from "../catalogue/catalogue.js";
import { kilnHome } from "../catalogue/paths.js";
import {
  compileGguf,
  type CompileOptions,
  type CompileRequest,
  type CompileResult,
  type DeviceActivations,
  type DeviceAttention,
} from "../compiler/compile.js";
import { GgufError, readGguf } from "../compiler/gguf/index.js";
import { architectureFor } from "../compiler/graph/architectures.js";
import { architectureName } from "../compiler/hyper.js";
import type { ComputeDevice } from "../runtime/device/index.js";
import type { ServedModel } from "../scheduler/index.js";
import { type LoadModelOptions, serveArtifact } from "./load-model.js";

/** A local file that kiln cannot serve: missing, not a GGUF file, or of an architecture without a graph builder. */
export class LocalModelError extends Error {
  constructor(
    readonly path: string,
    why: string,
  ) {
    super(`${path}: ${why}`);
    this.name = "LocalModelError";
  }
}

/** A GGUF file checked to be one kiln can compile: where it is, the slug it serves under, its architecture. */
export interface LocalGguf {
  /** Absolute path of the file (the first shard of a split model). */
  path: string;
  slug: string;
  architecture: string;
}

/**
 * Whether a `--model` argument names a file rather than a catalogue slug: it ends in `.gguf`, or is
 * written as a path (`./`, `../`, `/`, `~/`). Slugs never hold a dot or a slash, so nothing is ambiguous.
 */
export function isLocalModelPath(arg: string): boolean {
  return /\.gguf$/i.test(arg) || /^(\.{1,2}|~)?\//.test(arg);
}

/**
 * The slug a local file serves under: its file name without `.gguf` (and without a split model's
 * `-00001-of-00003`), lower-cased, every run of characters other than letters, digits and `_`
 * turned into one `-` (`My-Model.Q4_K_M.gguf` -> `my-model-q4_k_m`). A name that is also a
 * catalogue slug gets `-local` appended, so that the catalogue model keeps its name.
 */
export function localGgufSlug(path: string): string {
  const stem = basename(path)
    .replace(/\.gguf$/i, "")
    .replace(/-\d{5}-of-\d{5}$/, "");
  const slug =
    stem
      .toLowerCase()
      .replace(/[^a-z0-9_]+/g, "-")
      .replace(/^-+|-+$/g, "") || "local-model";
  return hasModel(slug) ? `${slug}-local` : slug;
}

/** `arg` resolved against `cwd` (a leading `~/` against the home directory). */
export function resolveLocalPath(arg: string, cwd = process.cwd()): string {
  if (arg.startsWith("~/") && process.env.HOME) return resolve(process.env.HOME, arg.slice(2));
  return isAbsolute(arg) ? arg : resolve(cwd, arg);
}

/**
 * Checks the file at `arg` (relative to the current directory) before anything is compiled: it
 * exists, is a GGUF file, and has an architecture kiln's graph builder takes. Throws {@link LocalModelError}.
 */
export async function checkLocalGguf(arg: string): Promise<LocalGguf> {
  const path = resolveLocalPath(arg);
  let isFile: boolean;
  try {
    isFile = statSync(path).isFile();
  } catch {
    throw new LocalModelError(arg, "no such file");
  }
  if (!isFile) throw new LocalModelError(arg, "not a file");
  let file;
  try {
    file = await readGguf(path);
  } catch (err) {
    // The reader's messages start with the path; the user's own spelling of it says it once.
    const why = err instanceof GgufError ? err.message.slice(err.file.length + 2) : (err as Error).message;
    throw new LocalModelError(arg, why);
  }
  let architecture: string;
  try {
    architecture = architectureName(file);
  } catch {
    throw new LocalModelError(arg, "the file names no general.architecture, so kiln cannot tell which model it is");
  }
  try {
    architectureFor(file);
  } catch (err) {
    throw new LocalModelError(arg, `cannot serve it: ${(err as Error).message}`);
  }
  return { path, slug: localGgufSlug(path), architecture };
}

export interface LocalProvisionOptions {
  /** Compile options (part of the artifact id). Default: the compiler's defaults. */
  compile?: CompileOptions;
  /** The GPU target's attention (`compileGguf`'s `deviceAttention`): "gqa" (default) or "explicit". Ignored on the CPU. */
  deviceAttention?: DeviceAttention;
  /** The GPU target's activations (`compileGguf`'s `deviceActivations`): "float32" (default) or "float16". Ignored on the CPU. */
  deviceActivations?: DeviceActivations;
  /** Root of kiln's store. Default `kilnHome()`. */
  home?: string;
  /** Rebuild even when an artifact with the same id exists. Default false. */
  force?: boolean;
  /** Progress, as short phrases ("hashing source", "compiling"...). */
  onStage?: (stage: string) => void;
  /** The device the artifact is built for (its own artifact, beside the CPU's). Default "cpu". */
  device?: ComputeDevice;
}

/**
 * Compiles a checked local file into `$KILN_HOME/artifacts/<slug>/<artifact id>/`, or reuses the
 * artifact of the same content, compiler and options. Not recorded in the `compiles` table, whose
 * rows belong to catalogue models.
 */
export function provisionLocalGguf(local: LocalGguf, opts: LocalProvisionOptions = {}): Promise<CompileResult> {
  // Named only off the CPU: the CPU artifact's request, and so its id, carries no device.
  const request: CompileRequest & { device?: ComputeDevice } = {
    slug: local.slug,
    ggufPath: local.path,
    options: opts.compile,
    home: opts.home ?? kilnHome(),
    force: opts.force,
    onStage: opts.onStage,
    ...(opts.device && opts.device !== "cpu"
      ? {
          device: opts.device,
          ...(opts.deviceAttention ? { deviceAttention: opts.deviceAttention } : {}),
          ...(opts.deviceActivations ? { deviceActivations: opts.deviceActivations } : {}),
        }
      : {}),
  };
  return compileGguf(request);
}

/**
 * Compiles (or reuses) a local file's artifact and serves it as {@link loadModel} serves a catalogue
 * model's default compile (no promotions: the optimization track is for catalogue models).
 */
export async function loadLocalGguf(local: LocalGguf, options: LoadModelOptions = {}): Promise<ServedModel> {
  options.onStage?.(`compiling ${local.path}`);
  const compiled = await provisionLocalGguf(local, {
    compile: options.compile,
    home: options.home,
    force: options.force,
    onStage: options.onStage,
    device: options.session?.device,
  });
  options.signal?.throwIfAborted();
  const warn = options.onWarning ?? ((message: string) => process.stderr.write(`kiln: WARNING: ${message}\n`));
  const served = await serveArtifact(compiled.dir, null, options, warn);
  served.localFile = local.path;
  return served;
}
