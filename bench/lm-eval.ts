/**
 * lm-evaluation-harness against `kiln serve`: its `local-completions` model scores the
 * choices of a small local task (bench/peers/lm-eval/kiln_tiny_mc.yaml, 20 questions of our own)
 * through /v1/completions with `echo`, `logprobs` and token-id prompts, batched.
 *
 *   npm run bench -- lm-eval [--model smollm2-135m-instruct] [--tasks kiln_tiny_mc] [--batch-size 8]
 *        [--threads 2] [--limit N] [--skip-reference]
 *
 * Needs `bash scripts/peers/genai.sh` first: its venv has lm-eval, and its hf/ folder holds the
 * tokenizer (dequantized from the same GGUF) that lm-eval tokenizes with. Starts `kiln serve` on a
 * free port, runs `lm_eval` from that venv, prints its results table, stops the server. Then, unless
 * --skip-reference, the same task through lm-eval's own `hf` model on that float32 checkpoint in
 * torch (the exact reference kiln's artifact is quantized from), so the two tables sit side by side.
 */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { GENAI_ROOT } from "./peers/genai.js";

const { values: args } = parseArgs({
  options: {
    model: { type: "string", default: "smollm2-135m-instruct" },
    tasks: { type: "string", default: "kiln_tiny_mc" },
    "batch-size": { type: "string", default: "8" },
    threads: { type: "string", default: "2" },
    limit: { type: "string" },
    "skip-reference": { type: "boolean", default: false },
  },
});
const REPO = fileURLToPath(new URL("..", import.meta.url));
const VENV_BIN = join(GENAI_ROOT, "venv", "bin");
const tokenizerDir = join(GENAI_ROOT, "hf");
const log = (s: string) => process.stderr.write(`${s}\n`);

if (!existsSync(join(VENV_BIN, "lm_eval")) || !existsSync(join(tokenizerDir, "tokenizer.json"))) {
  log(`lm-eval or the tokenizer missing under ${GENAI_ROOT}: run \`bash scripts/peers/genai.sh\` first`);
  process.exit(1);
}

log(`starting kiln serve --model ${args.model} on a free port ...`);
const server = spawn(
  process.execPath,
  [join(REPO, "bin", "kiln.mjs"), "serve", "--model", args.model!, "--port", "0", "--threads", args.threads!, "--log-level", "warn", "--no-nightly"],
  {
    cwd: REPO,
    stdio: ["ignore", "ignore", "pipe"],
  },
);
let serverLog = "";
const baseURL = await new Promise<string>((resolve, reject) => {
  let url = "";
  server.stderr.on("data", (chunk: Buffer) => {
    serverLog += chunk.toString();
    url ||= /listening on (http:\/\/\S+\/v1)/.exec(serverLog)?.[1] ?? "";
    if (url && serverLog.includes("kiln serve: ready")) resolve(url);
  });
  server.once("exit", (code) => reject(new Error(`kiln serve exited with ${code}:\n${serverLog}`)));
});
log(`kiln serve ready at ${baseURL}`);

async function stop(): Promise<void> {
  if (server.exitCode !== null) return;
  const exited = new Promise((r) => server.once("exit", r));
  server.kill("SIGTERM");
  await Promise.race([exited, new Promise((r) => setTimeout(r, 20_000))]);
  if (server.exitCode === null) server.kill("SIGKILL");
}

const modelArgs = [
  `base_url=${baseURL}/completions`,
  `model=${args.model}`,
  `tokenizer=${tokenizerDir}`,
  "tokenizer_backend=huggingface",
  "tokenized_requests=True",
  "num_concurrent=1",
  "max_retries=1",
  "max_length=2048",
].join(",");
const argv = [
  "--model",
  "local-completions",
  "--model_args",
  modelArgs,
  "--tasks",
  args.tasks!,
  "--include_path",
  join(REPO, "bench", "peers", "lm-eval"),
  "--batch_size",
  args["batch-size"]!,
];
if (args.limit) argv.push("--limit", args.limit);
log(`lm_eval ${argv.join(" ")}`);
const lmEnv = {
  ...process.env,
  HF_HUB_OFFLINE: "1",
  HF_DATASETS_OFFLINE: "1",
  TOKENIZERS_PARALLELISM: "false",
  OPENAI_API_KEY: process.env.OPENAI_API_KEY ?? "kiln-local",
};
function lmEval(argv: string[]): Promise<number | null> {
  return new Promise((resolve, reject) => {
    // No hub here: the task's data is local and the tokenizer a folder (hence offline); lm-eval's
    // API model wants some key in the environment, and kiln's local mode takes any.
    const child = spawn(join(VENV_BIN, "lm_eval"), argv, { cwd: REPO, stdio: ["ignore", "inherit", "inherit"], env: lmEnv });
    child.on("error", reject);
    child.on("exit", resolve);
  });
}
let t0 = performance.now();
let code = await lmEval(argv).finally(stop); // cwd: the task's data path is relative to the repository root
log(`lm_eval (kiln) exited ${code} after ${((performance.now() - t0) / 1000).toFixed(1)} s; kiln serve stopped`);
if (code === 0 && !args["skip-reference"]) {
  const refArgv = [
    "--model",
    "hf",
    "--model_args",
    `pretrained=${tokenizerDir},dtype=float32`,
    "--device",
    "cpu",
    "--tasks",
    args.tasks!,
    "--include_path",
    join(REPO, "bench", "peers", "lm-eval"),
    "--batch_size",
    args["batch-size"]!,
  ];
  if (args.limit) refArgv.push("--limit", args.limit);
  log(`reference: lm_eval ${refArgv.join(" ")}`);
  t0 = performance.now();
  code = await lmEval(refArgv);
  log(`lm_eval (float32 reference in torch) exited ${code} after ${((performance.now() - t0) / 1000).toFixed(1)} s`);
}
process.exit(code ?? 1);
