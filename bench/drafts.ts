/**
 * Drafts (prompt lookup and predicted outputs) against llama.cpp's own prompt lookup: one stream,
 * greedy, the same chat prompts as token ids, the same GGUF and threads. kiln serves the model as
 * `kiln serve` does (worker thread, batch engine) with drafts off, with `--draft-tokens 4`, and with
 * the answer's expected text as chat's `prediction`; llama.cpp runs in process (node-llama-cpp) plain
 * and with its `InputLookupTokenPredictor` (prompt lookup, the same idea). Each figure is decode
 * tokens/s (first token to last), median of the runs, alternating; answers may differ where two
 * tokens nearly tie, so the tokens counted are each engine's own.
 *
 * Then two streams at once on the code edit: kiln serving two sequences (`--max-running 2`) with and
 * without each request's prediction, against llama.cpp decoding two sequences of one context side
 * by side, plain and with its prompt lookup; each figure the output tokens of both answers over
 * the wall time from submission to the later end.
 *
 *   npm run bench -- drafts [--threads 2] [--runs 3] [--max-tokens 100]
 */
import { join } from "node:path";
import { parseArgs } from "node:util";
import { getLlama, InputLookupTokenPredictor, type Token } from "node-llama-cpp";
import { pullModel } from "../src/catalogue/pull/index.js";
import { loadModel } from "../src/provision/index.js";
import type { GenerationRequest, ServedModel } from "../src/scheduler/index.js";

const { values: args } = parseArgs({
  options: { threads: { type: "string", default: "2" }, runs: { type: "string", default: "3" }, "max-tokens": { type: "string", default: "100" } },
});
const SLUG = "smollm2-135m-instruct";
const threads = Number(args.threads);
const runs = Number(args.runs);
const maxTokens = Number(args["max-tokens"]);
const log = (line: string) => process.stdout.write(line + "\n");

const CODE = `function fibonacci(n) {
  if (n <= 1) return n;
  let a = 0, b = 1;
  for (let i = 2; i <= n; i++) {
    const next = a + b;
    a = b;
    b = next;
  }
  return b;
}`;
/** What each workload asks, and the answer's expected text (for `prediction`; null: none sent). */
const WORKLOADS: Array<{ name: string; question: string; prediction: string | null }> = [
  {
    name: "code edit",
    question: `Rename the function below to fib and change nothing else. Reply with the code only.\n\n${CODE}`,
    prediction: CODE.replace("fibonacci", "fib"),
  },
  { name: "table", question: "Write the multiplication table of 7, from 1 to 10.", prediction: null },
  { name: "free text", question: "Explain how a refrigerator works, in a few paragraphs.", prediction: null },
];

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

log(`loading ${SLUG} (kiln, ${threads} threads: drafts off and --draft-tokens 4; llama.cpp in process) ...`);
const plain = await loadModel(SLUG, { threads, maxRunning: 1, draftTokens: 0 });
const drafted = await loadModel(SLUG, { threads, maxRunning: 1, draftTokens: 4 });
const pulled = await pullModel(SLUG);
const gguf = join(pulled.dir, pulled.files.find((f) => f.path.toLowerCase().endsWith(".gguf"))!.path);
const llama = await getLlama({ gpu: false });
const llamaModel = await llama.loadModel({ modelPath: gguf });
const llamaContext = await llamaModel.createContext({ contextSize: 1024, threads: { ideal: threads, min: threads }, sequences: 1 });

/** kiln: decode tokens/s of one greedy answer. */
async function kiln(model: ServedModel, request: GenerationRequest): Promise<{ tps: number; tokens: number }> {
  let first = 0;
  let last = 0;
  let tokens = 0;
  for await (const e of model.engine.submit(request)) {
    if (e.type === "delta" && first === 0) first = performance.now();
    if (e.type === "finish") {
      last = performance.now();
      tokens = e.completionTokens;
    }
  }
  return { tps: ((tokens - 1) * 1000) / (last - first), tokens };
}

/** llama.cpp: decode tokens/s of one greedy answer to the same prompt ids, with or without its prompt lookup. */
async function llamaCpp(promptIds: number[], lookup: boolean): Promise<{ tps: number; tokens: number }> {
  const sequence = llamaContext.getSequence(lookup ? { tokenPredictor: new InputLookupTokenPredictor() } : {});
  try {
    const eog = new Set([llamaModel.tokens.eos, llamaModel.tokens.eot].filter((t) => t !== null));
    let first = 0;
    let tokens = 0;
    for await (const token of sequence.evaluate(promptIds as Token[], { temperature: 0 })) {
      if (eog.has(token) || llamaModel.isEogToken(token)) break;
      if (tokens === 0) first = performance.now();
      if (++tokens >= maxTokens) break;
    }
    return { tps: ((tokens - 1) * 1000) / (performance.now() - first), tokens };
  } finally {
    await sequence.dispose();
  }
}

log(`one stream, greedy, at most ${maxTokens} tokens; decode tokens/s, median of ${runs} (answer tokens in brackets)`);
log("| workload | llama.cpp | llama.cpp + lookup | kiln | kiln --draft-tokens 4 | kiln + prediction | best kiln / best llama.cpp |");
log("|---|---|---|---|---|---|---|");
for (const w of WORKLOADS) {
  const promptIds = plain.chatPrompt([{ role: "user", content: w.question }]);
  const request: GenerationRequest = { promptIds, maxTokens, sampling: { temperature: 0 } };
  const withPrediction = w.prediction ? { ...request, prediction: plain.textPrompt(w.prediction, false) } : null;
  const figures: Record<string, Array<{ tps: number; tokens: number }>> = { llama: [], lookup: [], kiln: [], drafts: [], prediction: [] };
  for (let r = 0; r < runs; r++) {
    figures.llama.push(await llamaCpp(promptIds, false));
    figures.lookup.push(await llamaCpp(promptIds, true));
    figures.kiln.push(await kiln(plain, request));
    figures.drafts.push(await kiln(drafted, request));
    if (withPrediction) figures.prediction.push(await kiln(plain, withPrediction));
  }
  const cell = (xs: Array<{ tps: number; tokens: number }>) => (xs.length ? `${median(xs.map((x) => x.tps)).toFixed(1)} (${xs[0].tokens})` : "-");
  const best = (...keys: string[]) => Math.max(...keys.filter((k) => figures[k].length).map((k) => median(figures[k].map((x) => x.tps))));
  const ratio = best("kiln", "drafts", "prediction") / best("llama", "lookup");
  log(
    `| ${w.name} | ${cell(figures.llama)} | ${cell(figures.lookup)} | ${cell(figures.kiln)} | ${cell(figures.drafts)} | ${cell(figures.prediction)} | ${ratio.toFixed(2)}x |`,
  );
}
log("");
log(`two streams at once, the code edit, greedy; output tokens/s of both, median of ${runs}`);
const pairModel = await loadModel(SLUG, { threads, maxRunning: 2, draftTokens: 0 });
const pairContext = await llamaModel.createContext({ contextSize: 2048, threads: { ideal: threads, min: threads }, sequences: 2 });
const edit = WORKLOADS[0];
const editIds = pairModel.chatPrompt([{ role: "user", content: edit.question }]);
const editRequest: GenerationRequest = { promptIds: editIds, maxTokens, sampling: { temperature: 0 } };
const editPredicted: GenerationRequest = { ...editRequest, prediction: pairModel.textPrompt(edit.prediction!, false) };
// A prediction the answer follows throughout (a client re-asking for text it has): the model's own greedy answer.
let ownAnswer = "";
for await (const e of pairModel.engine.submit(editRequest)) if (e.type === "delta") ownAnswer += e.text;
const editOwn: GenerationRequest = { ...editRequest, prediction: pairModel.textPrompt(ownAnswer, false) };

/** kiln: both answers' tokens over the wall time of two requests submitted together. */
async function kilnPair(request: GenerationRequest): Promise<number> {
  const started = performance.now();
  const counts = await Promise.all(
    [0, 1].map(async () => {
      let tokens = 0;
      for await (const e of pairModel.engine.submit(request)) if (e.type === "finish") tokens = e.completionTokens;
      return tokens;
    }),
  );
  return ((counts[0] + counts[1]) * 1000) / (performance.now() - started);
}

/** llama.cpp: both answers' tokens over the wall time of two sequences of one context evaluated together. */
async function llamaPair(lookup: boolean): Promise<number> {
  const started = performance.now();
  const eog = new Set([llamaModel.tokens.eos, llamaModel.tokens.eot].filter((t) => t !== null));
  const counts = await Promise.all(
    [0, 1].map(async () => {
      const sequence = pairContext.getSequence(lookup ? { tokenPredictor: new InputLookupTokenPredictor() } : {});
      let tokens = 0;
      try {
        for await (const token of sequence.evaluate(editIds as Token[], { temperature: 0 })) {
          if (eog.has(token) || llamaModel.isEogToken(token)) break;
          if (++tokens >= maxTokens) break;
        }
      } finally {
        await sequence.dispose();
      }
      return tokens;
    }),
  );
  return ((counts[0] + counts[1]) * 1000) / (performance.now() - started);
}

const pairs: Record<string, number[]> = { llama: [], lookup: [], kiln: [], prediction: [], own: [] };
for (let r = 0; r < runs; r++) {
  pairs.llama.push(await llamaPair(false));
  pairs.lookup.push(await llamaPair(true));
  pairs.kiln.push(await kilnPair(editRequest));
  pairs.prediction.push(await kilnPair(editPredicted));
  pairs.own.push(await kilnPair(editOwn));
}
const m = (k: string) => median(pairs[k]);
log("| llama.cpp | llama.cpp + lookup | kiln | kiln + the edit's prediction | kiln + its own answer as prediction | best kiln / best llama.cpp |");
log("|---|---|---|---|---|---|");
const bestKiln = Math.max(m("kiln"), m("prediction"), m("own"));
log(
  `| ${m("llama").toFixed(1)} | ${m("lookup").toFixed(1)} | ${m("kiln").toFixed(1)} | ${m("prediction").toFixed(1)} | ${m("own").toFixed(1)} | ${(bestKiln / Math.max(m("llama"), m("lookup"))).toFixed(2)}x |`,
);
const pairStats = pairModel.engine.stats.snapshot();
log(`kiln + prediction, two streams: ${pairStats.draftTokensAccepted} of ${pairStats.draftTokens} draft tokens confirmed over all runs`);
await pairModel.close();
await pairContext.dispose();
const stats = drafted.engine.stats.snapshot();
log(`kiln --draft-tokens 4: ${stats.draftTokensAccepted} of ${stats.draftTokens} draft tokens confirmed over all runs`);
await Promise.all([plain.close(), drafted.close()]);
await llamaContext.dispose();
await llamaModel.dispose();
await llama.dispose();
