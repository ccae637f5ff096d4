/** Pull -> compile -> record: a catalogue model's compiled artifact, built when missing. */
import { join } from "node:path";
import { getModel } from "../catalogue/catalogue.js";
import { openDatabase } from "../catalogue/db.js";
import { kilnHome } from "../catalogue/paths.js";
import { pullModel, type PullOptions } from "../catalogue/pull/index.js";
import { COMPILER_VERSION, compileGguf, type CompileOptions, type CompileResult } from "../compiler/compile.js";
import { recordCompileFailure, recordCompileFinish, recordCompileStart } from "./compile-records.js";

export class NotCompilableError extends Error {
  constructor(slug: string, why: string) {
    super(`cannot compile ${slug}: ${why}`);
  }
}

export interface ProvisionOptions {
  /** Compile options (part of the artifact id). Default: the compiler's defaults. */
  compile?: CompileOptions;
  /** Root of kiln's store. Default `kilnHome()`. */
  home?: string;
  /** Rebuild even when an artifact with the same id exists. Default false. */
  force?: boolean;
  pull?: PullOptions;
  /** Progress, as short phrases ("pulling weights", "compiling"...). */
  onStage?: (stage: string) => void;
}

/** Pulls a catalogue model if needed, compiles it (or reuses its artifact), and records the compile in SQLite. */
export async function provisionArtifact(slug: string, opts: ProvisionOptions = {}): Promise<CompileResult> {
  const entry = getModel(slug);
  if (entry.kind !== "text") throw new NotCompilableError(slug, `it is a ${entry.kind} model; the text compiler handles GGUF text models`);
  const home = opts.home ?? kilnHome();
  opts.onStage?.("pulling weights");
  const pulled = await pullModel(slug, { ...opts.pull, home });
  opts.pull?.signal?.throwIfAborted();
  const gguf = pulled.files.find((f) => f.path.endsWith(".gguf"));
  if (!gguf) throw new NotCompilableError(slug, `no GGUF file among the pulled files (${pulled.files.map((f) => f.path).join(", ")})`);
  const db = openDatabase({ home });
  const recordId = recordCompileStart(db, slug, COMPILER_VERSION, opts.compile ?? {});
  try {
    const result = await compileGguf({ slug, ggufPath: join(pulled.dir, gguf.path), options: opts.compile, home, force: opts.force, onStage: opts.onStage });
    recordCompileFinish(db, recordId, result);
    return result;
  } catch (err) {
    recordCompileFailure(db, recordId, err);
    throw err;
  } finally {
    db.close();
  }
}
