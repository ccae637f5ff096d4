/**
 * Embeddings throughput against llama.cpp on the same GGUF, token ids, threads and pooling (the
 * last position's, unnormalized): kiln's engine as `/v1/embeddings` drives it (each input a request,
 * 16 at a time), llama.cpp in process (node-llama-cpp's embedding context, one input at a time, as
 * its API embeds) and, when built (`bash scripts/peers/llama-cpp-native.sh`), llama.cpp's own
 * `llama-embedding`, which packs many inputs into each batch. Each figure is input tokens/s over the
 * whole set (load excluded; llama-embedding's from its own prompt-eval timer), the median of the
 * runs, alternating; the cosine to llama.cpp's vectors is printed beside kiln's as a check. Last,
 * what a large embedding request costs a chat beside it: the chat's decode tokens/s alone and while
 * 512 inputs are embedded.
 *
 *   npm run bench -- embeddings [--threads 2] [--runs 3]
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { getLlama } from "node-llama-cpp";
import { embedInWindows } from "../src/api/routes/embedding-run.js";
import { pullModel } from "../src/catalogue/pull/index.js";
import { loadModel } from "../src/provision/index.js";
import type { EmbeddingSupport, ServedModel } from "../src/scheduler/index.js";
import { findNative, runEmbeddingBinary } from "./peers/llama-native.js";

const { values: args } = parseArgs({ options: { threads: { type: "string", default: "2" }, runs: { type: "string", default: "3" } } });
const SLUG = "smollm2-135m-instruct";
const threads = Number(args.threads);
const runs = Number(args.runs);
const log = (line: string) => process.stdout.write(line + "\n");
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

const SUBJECTS = ["the harbour", "a quiet library", "the night train", "an old clock", "the market square", "a mountain lake", "the last bus", "a red kite"];
const VERBS = ["was described in", "appeared in", "was the subject of", "was mentioned in"];
/** Sentences of 12-20 tokens, and passages of about 300 (each a different mix, so no two inputs are the same). */
const WORKLOADS: Array<{ name: string; texts: string[] }> = [
  {
    name: "256 sentences",
    texts: Array.from({ length: 256 }, (_, i) => `Sentence ${i}: ${SUBJECTS[i % 8]} ${VERBS[i % 4]} a story told on day ${(i * 37) % 365}.`),
  },
  {
    name: "32 passages",
    texts: Array.from({ length: 32 }, (_, i) =>
      Array.from({ length: 18 }, (_, j) => `${SUBJECTS[(i + j) % 8]} ${VERBS[(i * j) % 4]} letter ${i * 18 + j}.`).join(" "),
    ),
  },
];

log(`loading ${SLUG} (kiln, ${threads} threads; llama.cpp in process${findNative() ? " and llama-embedding" : ""}) ...`);
const kilnModel = (await loadModel(SLUG, { threads })) as ServedModel & { embeddings: EmbeddingSupport };
const pulled = await pullModel(SLUG);
const gguf = join(pulled.dir, pulled.files.find((f) => f.path.toLowerCase().endsWith(".gguf"))!.path);
const llama = await getLlama({ gpu: false });
const llamaModel = await llama.loadModel({ modelPath: gguf });
const llamaContext = await llamaModel.createEmbeddingContext({ contextSize: 1024, threads });
const native = findNative();
const work = mkdtempSync(join(tmpdir(), "kiln-bench-embeddings-"));

function cosine(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let [dot, na, nb] = [0, 0, 0];
  for (let i = 0; i < a.length; i++) [dot, na, nb] = [dot + a[i] * b[i], na + a[i] * a[i], nb + b[i] * b[i]];
  return dot / Math.sqrt(na * nb);
}

for (const { name, texts } of WORKLOADS) {
  const prompts = texts.map((t) => kilnModel.embeddings.prompt(t));
  const tokens = prompts.reduce((n, p) => n + p.length, 0);
  const figures: Record<string, number[]> = { kiln: [], "llama.cpp (binding)": [], "llama-embedding": [] };
  let kilnVectors: Float32Array[] = [];
  let llamaVectors: Array<readonly number[]> = [];
  for (let run = 0; run < runs; run++) {
    let t0 = performance.now();
    kilnVectors = await embedInWindows(kilnModel, prompts, new AbortController().signal);
    figures.kiln.push((tokens * 1000) / (performance.now() - t0));
    t0 = performance.now();
    llamaVectors = [];
    for (const ids of prompts) llamaVectors.push((await llamaContext.getEmbeddingFor(ids as never)).vector);
    figures["llama.cpp (binding)"].push((tokens * 1000) / (performance.now() - t0));
    if (native?.embedding) {
      const file = join(work, "texts.txt");
      writeFileSync(file, texts.join("\n"));
      const r = await runEmbeddingBinary(native.embedding, gguf, file, { threads, pooling: "last", batchTokens: 512 });
      if (r.tokens !== tokens) log(`  (llama-embedding counted ${r.tokens} tokens, kiln ${tokens})`);
      figures["llama-embedding"].push((r.tokens * 1000) / r.promptMs);
    }
  }
  const cosines = kilnVectors.map((v, i) => cosine(v, llamaVectors[i]));
  log(`\n${name}: ${texts.length} inputs, ${tokens} tokens; kiln's cosine to llama.cpp min ${Math.min(...cosines).toFixed(4)}`);
  const best = Math.max(...Object.entries(figures).flatMap(([k, v]) => (k === "kiln" || v.length === 0 ? [] : [median(v)])));
  for (const [engine, v] of Object.entries(figures)) {
    if (v.length === 0) continue;
    log(`  ${engine.padEnd(22)} ${median(v).toFixed(0).padStart(7)} tokens/s   (runs ${v.map((x) => x.toFixed(0)).join(", ")})`);
  }
  log(`  kiln / strongest llama.cpp: ${(median(figures.kiln) / best).toFixed(2)}x`);
}

/** Decode tokens/s of one greedy chat answer, first token to last. */
async function chatDecode(): Promise<number> {
  const promptIds = kilnModel.chatPrompt([{ role: "user", content: "Explain how a bicycle works." }]);
  let [first, last, tokens] = [0, 0, 0];
  for await (const e of kilnModel.engine.submit({ promptIds, maxTokens: 48, sampling: { temperature: 0 } })) {
    if (e.type === "delta" && first === 0) first = performance.now();
    if (e.type === "finish") [last, tokens] = [performance.now(), e.completionTokens];
  }
  return ((tokens - 1) * 1000) / (last - first);
}

// What a large embedding request costs a chat beside it: embeddings yield to decoding (one prefill chunk a step).
const alone: number[] = [];
const beside: number[] = [];
const sentences = WORKLOADS[0].texts.map((t) => kilnModel.embeddings.prompt(t));
for (let run = 0; run < runs; run++) {
  alone.push(await chatDecode());
  const background = embedInWindows(kilnModel, [...sentences, ...sentences], new AbortController().signal);
  await new Promise((r) => setTimeout(r, 300));
  beside.push(await chatDecode());
  await background;
}
log(
  `\nchat decode beside 512 inputs being embedded: ${median(beside).toFixed(1)} tokens/s, alone ${median(alone).toFixed(1)} (${(median(beside) / median(alone)).toFixed(2)}x)`,
);

rmSync(work, { recursive: true, force: true });
await llamaContext.dispose();
await llamaModel.dispose();
await kilnModel.close();
