/**
 * Structured-output benchmark: the per-token cost of a JSON-schema constraint against unconstrained
 * decoding on the same model, at batch 1 and 16, and the schema preparation time (first use and
 * cached). In-process, through the served model's engine and worker (no HTTP).
 *
 *   npm run bench -- structured [--threads 2] [--requests 16] [--max-tokens 96] [--rounds 4]
 *
 * Time per output token = the sum over requests of (last token - first token) over the sum of
 * (tokens - 1), so short JSON answers weigh by their length, not as much as long ones. The
 * unconstrained run then generates exactly as many tokens per request as its constrained twin
 * (`logit_bias` -100 on the end-of-generation ids, `max_tokens` = that length), so both runs have
 * the same batch sizes step by step and only the constraint differs. The bar a constraint must stay
 * under: 10% extra time per token at batch 1.
 */
import { parseArgs } from "node:util";
import { loadModel } from "../src/provision/index.js";
import type { ConstraintSpec } from "../src/runtime/constrain/index.js";
import type { GenerationRequest, ServedModel } from "../src/scheduler/index.js";
import { structuredSchemas } from "../test/support/schemas.js";

const { values: args } = parseArgs({
  options: {
    threads: { type: "string", default: "2" },
    requests: { type: "string", default: "16" },
    "max-tokens": { type: "string", default: "96" },
    rounds: { type: "string", default: "4" },
  },
});
const TEXT_SLUG = "smollm2-135m-instruct";
const maxTokens = Number(args["max-tokens"]);
const log = (line: string) => process.stdout.write(line + "\n");
const now = () => performance.now();

const model = await loadModel(TEXT_SLUG, { threads: Number(args.threads), maxRunning: 16 });
const schemas = structuredSchemas(100).filter((s) => !JSON.stringify(s.schema).includes('maxLength":2'));

function request(i: number, constraint?: ConstraintSpec, tokens = maxTokens): GenerationRequest {
  const promptIds = model.chatPrompt([{ role: "user", content: `Describe ${schemas[i % schemas.length].ask} as JSON.` }]);
  // SmolLM2's <|endoftext|>, <|im_start|> and <|im_end|>: the unconstrained run never ends early.
  const stopBias = constraint ? undefined : Object.fromEntries([0, 1, 2].map((id) => [String(id), -100]));
  return { promptIds, maxTokens: tokens, sampling: { temperature: 0, ...(stopBias ? { logit_bias: stopBias } : {}) }, ...(constraint ? { constraint } : {}) };
}

/** Mean time per output token (ms) of `count` requests run `batch` at a time. */
async function tpot(
  served: ServedModel,
  batch: number,
  count: number,
  constraintOf: (i: number) => ConstraintSpec | undefined,
  lengthOf: (i: number) => number = () => maxTokens,
): Promise<{ tpotMs: number; tokens: number; lengths: number[] }> {
  const lengths: number[] = [];
  let spent = 0;
  let steps = 0;
  let tokens = 0;
  let next = 0;
  await Promise.all(
    Array.from({ length: batch }, async () => {
      while (next < count) {
        const i = next++;
        let first = 0;
        let last = 0;
        let n = 0;
        for await (const e of served.engine.submit(request(i, constraintOf(i), lengthOf(i)))) {
          if (e.type !== "delta") continue;
          if (n === 0) first = now();
          last = now();
          n = e.completionTokens;
        }
        lengths[i] = n;
        // First to last token: a constrained answer's closing step (the stop token its grammar then
        // requires) is not a token, and its length-capped twin has none.
        if (n > 1) {
          spent += last - first;
          steps += n - 1;
        }
        tokens += n;
      }
    }),
  );
  return { tpotMs: spent / steps, tokens, lengths };
}

const schemaOf = (i: number): ConstraintSpec => ({ type: "json_schema", schema: JSON.stringify(schemas[i % schemas.length].schema) });
// Schema preparation: first use compiles on the worker, a second use of the same content hits the cache.
for (const [label, spec] of [
  ["first use", schemaOf(3)],
  ["cached", schemaOf(3)],
] as const) {
  const t0 = now();
  for await (const e of model.engine.submit({ ...request(3, spec), maxTokens: 1 })) void e;
  log(`schema preparation + 1 token (${label}): ${(now() - t0).toFixed(1)} ms`);
}
const requests = Number(args.requests);
// Warm the cache for every schema the timed runs use, so they measure masks, not compiles.
await tpot(model, 16, requests, schemaOf);
log(`\n| batch | unconstrained ms/token | json_schema ms/token | extra | rounds |`);
log(`|---|---|---|---|---|`);
const rounds = Number(args.rounds);
for (const batch of [1, 16]) {
  const count = batch === 1 ? Math.min(requests, 6) : requests;
  // Greedy, so every constrained run has these lengths; the unconstrained twin runs the same
  // lengths, so both finish (and free their slots) at the same steps.
  const { lengths } = await tpot(model, batch, count, schemaOf);
  const runConstrained = () => tpot(model, batch, count, schemaOf);
  const runFree = () =>
    tpot(
      model,
      batch,
      count,
      () => undefined,
      (i) => lengths[i],
    );
  // Rounds alternate which run goes first, so the machine's drift over time, which on a shared
  // machine is larger than the effect, falls on both sides alike.
  let free = 0;
  let constrained = 0;
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? [runConstrained, runFree] : [runFree, runConstrained];
    for (const run of order) {
      const { tpotMs } = await run();
      if (run === runFree) free += tpotMs;
      else constrained += tpotMs;
    }
  }
  log(`| ${batch} | ${(free / rounds).toFixed(2)} | ${(constrained / rounds).toFixed(2)} | ${(100 * (constrained / free - 1)).toFixed(1)}% | ${rounds} |`);
}
await model.close();
