/**
 * Benchmark dispatcher: `npm run bench [-- text|serve|soak|speech|structured|cloud [options]]`.
 *   text   runtime benchmark, kiln's artifact vs llama.cpp in-process (bench/text.ts)
 *   serve  serving benchmark, `kiln serve` over HTTP vs llama.cpp batched sequences (bench/serve.ts)
 *   soak   soak run of `kiln serve`: many streaming clients, aborts, slow readers; errors, p99, RSS over time (bench/soak.ts)
 *   speech Whisper real-time factor vs faster-whisper, streamed TTFT, chat TTFT while transcribing (bench/speech.ts)
 *   structured  per-token cost of JSON-schema constraints vs unconstrained decoding, schema preparation time (bench/structured.ts)
 *   drafts drafts (prompt lookup, predicted outputs) vs llama.cpp's own prompt lookup, one greedy stream (bench/drafts.ts)
 *   embeddings embeddings throughput vs llama.cpp (binding and llama-embedding), same GGUF and pooling (bench/embeddings.ts)
 *   finish      share of strict-schema and forced tool-call answers that end on their own at max_tokens 200 (bench/constrained-finish.ts)
 *   peers  kiln vs onnxruntime-genai's own int4/int8 builds: speed and fidelity against the float reference (bench/peers.ts; needs scripts/peers/genai.sh)
 *   lm-eval  lm-evaluation-harness on a small local task against `kiln serve` (bench/lm-eval.ts; needs scripts/peers/genai.sh)
 *   floor  kernel floor of decode: the compiled model's weight products alone vs its whole step and native llama.cpp (bench/floor.ts)
 *   gpu    per model shape on a device: TTFT, decode at 1/16/64 sequences through the engine, the bare graph, the weight-product floor, PyTorch, the CPU engine (bench/gpu.ts)
 *   gpu-speech  Whisper per model shape on a device: encode a window, decoder steps at beam 5 for 1 and 4 transcriptions, PyTorch, the CPU engine (bench/gpu-speech.ts)
 *   gpu-profile  where a GPU decode step's time goes: wall, device and host time per build and row count, the costliest operators (bench/gpu-profile.ts)
 *   attention  kiln's attention block vs onnxruntime's fused GroupQueryAttention at decode (bench/attention.ts)
 *   gpu-attention  decode attention on WebGPU over a device-resident cache: the GPU target's pool and explicit attention, GroupQueryAttention with its presents fed back, with past and present one buffer, and one batch-1 node per row (bench/gpu-attention.ts)
 *   cloud  overhead of cloud mode (auth + limits + ledger) on a fleet behind nginx at a steady request rate, ledger write rate (bench/cloud.ts)
 * With no subcommand text and serve run, one after the other, each in its own process with its
 * defaults (the soak takes ten minutes and only runs when asked for).
 */
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const SUBCOMMANDS: Record<string, string> = {
  text: "./text.ts",
  serve: "./serve.ts",
  soak: "./soak.ts",
  speech: "./speech.ts",
  structured: "./structured.ts",
  finish: "./constrained-finish.ts",
  drafts: "./drafts.ts",
  embeddings: "./embeddings.ts",
  cloud: "./cloud.ts",
  peers: "./peers.ts",
  "lm-eval": "./lm-eval.ts",
  attention: "./attention.ts",
  "gpu-attention": "./gpu-attention.ts",
  floor: "./floor.ts",
  gpu: "./gpu.ts",
  "gpu-profile": "./gpu-profile.ts",
  "gpu-speech": "./gpu-speech.ts",
};
const sub = process.argv[2];

if (sub !== undefined && sub in SUBCOMMANDS) {
  process.argv.splice(2, 1); // the module parses the remaining options itself
  await import(SUBCOMMANDS[sub]);
} else if (sub === undefined) {
  for (const name of ["text", "serve"]) {
    process.stderr.write(`\n== bench ${name} ==\n`);
    const r = spawnSync(process.execPath, ["--import", "tsx", fileURLToPath(new URL(SUBCOMMANDS[name], import.meta.url))], { stdio: "inherit" });
    if (r.status !== 0) process.exit(r.status ?? 1);
  }
} else {
  process.stderr.write(
    `usage: npm run bench [-- text|serve|soak|speech|structured|finish|drafts|embeddings|cloud|peers|lm-eval|attention|gpu-attention|floor|gpu|gpu-profile|gpu-speech [options]]  (unknown: ${sub})\n`,
  );
  process.exit(2);
}
