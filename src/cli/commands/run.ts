/** `kiln run <slug> <prompt>`: one chat turn from the terminal, streamed as it is generated. */
import { compileModel } from "../../compiler/compile-model.js";
import { generate } from "../../runtime/generate.js";
import { TextRuntime } from "../../runtime/text-runtime.js";
import type { CommandIO } from "../command.js";

export const name = "run";
export const description = "Generate a chat answer from the terminal";
export const usage = `Usage: kiln run <slug> <prompt> [--system <text>] [--max-tokens N] [--temperature T] [--seed S] [--threads N]

Pulls and compiles the model if needed, renders the prompt through the model's chat template and
streams the answer to stdout.

Options:
  --system <text>   system message (the template's default when absent)
  --max-tokens N    most tokens to generate (default 256)
  --temperature T   0 = greedy (default 0.7)
  --seed S          sampling seed, for reproducible output
  --threads N       ONNX Runtime threads (default 2)
  -h, --help        show this help`;

export async function run(argv: string[], io: CommandIO = process): Promise<number> {
  const positional: string[] = [];
  const opts = { system: undefined as string | undefined, maxTokens: 256, temperature: 0.7, seed: undefined as number | undefined, threads: 2 };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const num = () => Number(argv[++i]);
    if (arg === "-h" || arg === "--help") {
      io.stdout.write(usage + "\n");
      return 0;
    } else if (arg === "--system") opts.system = argv[++i];
    else if (arg === "--max-tokens") opts.maxTokens = num();
    else if (arg === "--temperature") opts.temperature = num();
    else if (arg === "--seed") opts.seed = num();
    else if (arg === "--threads") opts.threads = num();
    else if (arg.startsWith("-")) return usageError(io, `unknown option ${arg}`);
    else positional.push(arg);
  }
  const [slug, ...promptWords] = positional;
  if (!slug || promptWords.length === 0) return usageError(io, "needs a model slug and a prompt");
  for (const [k, v] of Object.entries({ "--max-tokens": opts.maxTokens, "--temperature": opts.temperature, "--threads": opts.threads })) {
    if (!Number.isFinite(v) || v < 0) return usageError(io, `${k} must be a non-negative number`);
  }
  let runtime: TextRuntime | null = null;
  try {
    const compiled = await compileModel(slug, { onStage: (s) => io.stderr.write(`${slug}: ${s}\n`) });
    runtime = await TextRuntime.load(compiled.dir, { threads: opts.threads });
    const messages = [...(opts.system ? [{ role: "system", content: opts.system }] : []), { role: "user", content: promptWords.join(" ") }];
    const prompt = runtime.encodePrompt(runtime.renderChat(messages));
    const decoder = runtime.tokenizer.createStreamDecoder();
    const stream = generate(runtime.worker, prompt, { maxTokens: opts.maxTokens, sampling: { temperature: opts.temperature, seed: opts.seed } });
    for await (const sample of stream) io.stdout.write(decoder.push(sample.token));
    io.stdout.write(decoder.flush() + "\n");
    return 0;
  } catch (err) {
    io.stderr.write(`kiln run: ${err instanceof Error ? err.message : String(err)}\n`);
    return 1;
  } finally {
    await runtime?.close();
  }
}

function usageError(io: CommandIO, message: string): number {
  io.stderr.write(`kiln run: ${message}\n${usage}\n`);
  return 2;
}
