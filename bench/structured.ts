/**
 * Structured-output benchmark: the per-token cost of a JSON-schema constraint against unconstrained
 * decoding on the same model, at batch 1 and 16, and the schema preparation time (first use and
 * cached). In-process, through the served model's engine and worker (no HTTP).
 *
 *   npm run bench -- structured [--threads 2] [--requests 16] [--max-tokens 96]
 *
 * Time per output token = (end - first token) / (tokens - 1) per request, averaged; unconstrained
 * requests get `logit_bias` -100 on the end-of-generation ids so they run to `--max-tokens` like the
 * constrained ones run to their JSON's end. Bar (issue 10): under 10% extra time per token at batch 1.
 */
import { parseArgs } from "node:util";
import { loadModel } from "../src/provision/index.js";
import type { ConstraintSpec } from "../src/runtime/constrain/index.js";
import type { GenerationRequest, ServedModel } from "../src/scheduler/index.js";
import { structuredSchemas } from "../test/support/schemas.js";

const { values: args } = parseArgs({ options: { threads: { type: "string", default: "2" }, requests: { type: "string", default: "16" }, "max-tokens": { type: "string", default: "96" } } });
const TEXT_SLUG = "smollm2-135m-instruct";
const maxTokens = Number(args["max-tokens"]);
const log = (line: string) => process.stdout.write(line + "\n");
const now = () => performance.now();

const model = await loadModel(TEXT_SLUG, { threads: Number(args.threads), maxRunning: 16 });
const schemas = structuredSchemas(100).filter((s) => !JSON.stringify(s.schema).includes("maxLength\":2"));

function request(i: number, constraint?: ConstraintSpec): GenerationRequest {
  const promptIds = model.chatPrompt([{ role: "user", content: `Describe ${schemas[i % schemas.length].ask} as JSON.` }]);
  // SmolLM2's <|endoftext|>, <|im_start|> and <|im_end|>: the unconstrained run never ends early.
  const stopBias = constraint ? undefined : Object.fromEntries([0, 1, 2].map((id) => [String(id), -100]));
  return { promptIds, maxTokens, sampling: { temperature: 0, ...(stopBias ? { logit_bias: stopBias } : {}) }, ...(constraint ? { constraint } : {}) };
}

/** Mean time per output token (ms) of `count` requests run `batch` at a time. */
async function tpot(served: ServedModel, batch: number, count: number, constraintOf: (i: number) => ConstraintSpec | undefined): Promise<{ tpotMs: number; tokens: number }> {
  const per: number[] = [];
  let tokens = 0;
  let next = 0;
  await Promise.all(
    Array.from({ length: batch }, async () => {
      while (next < count) {
        const i = next++;
        let first = 0;
        let n = 0;
        for await (const e of served.engine.submit(request(i, constraintOf(i)))) {
          if (e.type !== "delta") continue;
          if (n === 0) first = now();
          n = e.completionTokens;
        }
        if (n > 1) per.push((now() - first) / (n - 1));
        tokens += n;
      }
    }),
  );
  return { tpotMs: per.reduce((a, b) => a + b, 0) / per.length, tokens };
}

const schemaOf = (i: number): ConstraintSpec => ({ type: "json_schema", schema: JSON.stringify(schemas[i % schemas.length].schema) });
// Schema preparation: first use compiles on the worker, a second use of the same content hits the cache.
for (const [label, spec] of [["first use", schemaOf(3)], ["cached", schemaOf(3)]] as const) {
  const t0 = now();
  for await (const e of model.engine.submit({ ...request(3, spec), maxTokens: 1 })) void e;
  log(`schema preparation + 1 token (${label}): ${(now() - t0).toFixed(1)} ms`);
}
const requests = Number(args.requests);
// Warm the cache for every schema the timed runs use, so they measure masks, not compiles.
await tpot(model, 16, requests, schemaOf);
log(`\n| batch | unconstrained ms/token | json_schema ms/token | extra |`);
log(`|---|---|---|---|`);
for (const batch of [1, 16]) {
  const free = await tpot(model, batch, batch === 1 ? Math.min(requests, 6) : requests, () => undefined);
  const constrained = await tpot(model, batch, batch === 1 ? Math.min(requests, 6) : requests, schemaOf);
  log(`| ${batch} | ${free.tpotMs.toFixed(2)} | ${constrained.tpotMs.toFixed(2)} | ${(100 * (constrained.tpotMs / free.tpotMs - 1)).toFixed(1)}% |`);
}
await model.close();
