/** `kiln compile <slug>`: compile a model's weights into an ONNX artifact. */
import { UnknownModelError } from "../../catalogue/catalogue.js";
import { compileModel } from "../../compiler/compile-model.js";
import type { CommandIO } from "../command.js";

export const name = "compile";
export const description = "Compile a model's weights into an ONNX artifact";
export const usage = `Usage: kiln compile <slug> [--numerics fast|llama.cpp] [--accuracy-level 0|4] [--force]

Pulls the model if needed, reads its GGUF file and writes an artifact folder under
$KILN_HOME/artifacts/<slug>/<artifact-id>/ (graph, weights, tokenizer, chat template, manifest).
The same source, compiler version and options give the same artifact id, so a repeated compile
is reused unless --force. Each compile is recorded in $KILN_HOME/kiln.sqlite.

Options:
  --numerics fast|llama.cpp  fast (default): ONNX Runtime's int8-activation fast path;
                             llama.cpp: reproduce llama.cpp's CPU rounding (slower)
  --accuracy-level N         MatMulNBits accuracy level for the fast path (4 default, 0 float)
  --force                    rebuild even when the artifact exists
  -h, --help                 show this help`;

export async function run(argv: string[], io: CommandIO = process): Promise<number> {
  let slug: string | null = null;
  let force = false;
  let numerics: "fast" | "llama.cpp" | undefined;
  let accuracyLevel: number | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "-h" || arg === "--help") {
      io.stdout.write(usage + "\n");
      return 0;
    } else if (arg === "--force") force = true;
    else if (arg === "--numerics") {
      const v = argv[++i];
      if (v !== "fast" && v !== "llama.cpp") return usageError(io, `--numerics must be fast or llama.cpp, not ${v}`);
      numerics = v;
    } else if (arg === "--accuracy-level") {
      accuracyLevel = Number(argv[++i]);
      if (![0, 1, 2, 3, 4].includes(accuracyLevel)) return usageError(io, "--accuracy-level must be 0..4");
    } else if (arg.startsWith("-")) return usageError(io, `unknown option ${arg}`);
    else if (slug === null) slug = arg;
    else return usageError(io, `one model at a time (got ${slug} and ${arg})`);
  }
  if (!slug) return usageError(io, "which model? (a slug from `kiln models`)");
  const started = Date.now();
  try {
    const result = await compileModel(slug, {
      force,
      options: { numerics, accuracyLevel },
      onStage: (stage) => io.stderr.write(`${slug}: ${stage}\n`),
    });
    const what = result.reused ? "already compiled" : `compiled in ${((Date.now() - started) / 1000).toFixed(1)} s`;
    io.stdout.write(`${result.manifest.id} ${what}\n${result.dir}\n`);
    return 0;
  } catch (err) {
    const message = err instanceof UnknownModelError || err instanceof Error ? err.message : String(err);
    io.stderr.write(`kiln compile: ${message.split("\n")[0]}\n`);
    return 1;
  }
}

function usageError(io: CommandIO, message: string): number {
  io.stderr.write(`kiln compile: ${message}\n${usage}\n`);
  return 2;
}
