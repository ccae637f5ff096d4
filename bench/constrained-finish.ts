/**
 * Do constrained answers finish? With the embedded 135M model, strict schemas whose integers and
 * strings are unbounded, and forced tool calls, each at `max_tokens` 200 through the HTTP API
 * (in process): the share of answers that end on their own (`finish_reason` `stop`, or
 * `tool_calls` for calls) rather than at the limit (`length`). Greedy decoding, so a run is
 * repeatable.
 *
 *   npm run bench -- finish [--threads 2] [--requests 100] [--max-tokens 200]
 */
import { parseArgs } from "node:util";
import { buildApp } from "../src/api/index.js";
import { loadModel } from "../src/provision/index.js";
import { ModelRegistry } from "../src/scheduler/index.js";

const { values: args } = parseArgs({
  options: { threads: { type: "string", default: "2" }, requests: { type: "string", default: "100" }, "max-tokens": { type: "string", default: "200" } },
});
const SLUG = "smollm2-135m-instruct";
const maxTokens = Number(args["max-tokens"]);
const count = Number(args.requests);
const log = (line: string) => process.stdout.write(line + "\n");

/** Seeded choices, so that every run asks the same things. */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

const FIELDS: Array<[string, Record<string, unknown>]> = [
  ["name", { type: "string" }],
  ["age", { type: "integer" }],
  ["city", { type: "string" }],
  ["population", { type: "integer" }],
  ["title", { type: "string" }],
  ["year", { type: "integer" }],
  ["price", { type: "number" }],
  ["count", { type: "integer" }],
  ["description", { type: "string" }],
  ["available", { type: "boolean" }],
];
const TOPICS = ["a person", "a city", "a book", "a product in a shop", "a movie", "a planet", "a car", "a song", "a restaurant", "a country"];

function objectSchema(random: () => number): Record<string, unknown> {
  const n = 1 + Math.floor(random() * 4);
  const picked = [...FIELDS].sort(() => random() - 0.5).slice(0, n);
  return { type: "object", properties: Object.fromEntries(picked), required: picked.map(([k]) => k), additionalProperties: false };
}

type Case = { kind: "schema" | "tool-required" | "tool-named"; body: Record<string, unknown> };

function cases(): Case[] {
  const random = rng(26);
  const out: Case[] = [];
  for (let i = 0; i < count; i++) {
    const topic = TOPICS[i % TOPICS.length];
    const schema = objectSchema(random);
    if (i % 2 === 0) {
      out.push({
        kind: "schema",
        body: {
          messages: [{ role: "user", content: `Describe ${topic} as JSON.` }],
          response_format: { type: "json_schema", json_schema: { name: "answer", schema, strict: true } },
        },
      });
    } else {
      const tools = [
        { type: "function", function: { name: "record", description: `Record ${topic}.`, parameters: schema } },
        {
          type: "function",
          function: {
            name: "lookup",
            description: "Look something up.",
            parameters: {
              type: "object",
              properties: { query: { type: "string" }, limit: { type: "integer" } },
              required: ["query", "limit"],
              additionalProperties: false,
            },
          },
        },
      ];
      const named = i % 4 === 1;
      out.push({
        kind: named ? "tool-named" : "tool-required",
        body: {
          messages: [{ role: "user", content: `Record ${topic} with the tool.` }],
          tools,
          tool_choice: named ? { type: "function", function: { name: "record" } } : "required",
        },
      });
    }
  }
  return out;
}

const model = await loadModel(SLUG, { threads: Number(args.threads), maxRunning: 16 });
const models = new ModelRegistry();
models.serve(model);
const app = await buildApp({ models });
const all = cases();
const results: Array<{ kind: Case["kind"]; finish: string; tokens: number; calls: number; duplicates: number; markup: boolean }> = [];
const t0 = performance.now();
let next = 0;
await Promise.all(
  Array.from({ length: 16 }, async () => {
    while (next < all.length) {
      const c = all[next++];
      const res = await app.inject({
        method: "POST",
        url: "/v1/chat/completions",
        payload: { model: SLUG, temperature: 0, max_tokens: maxTokens, ...c.body },
      });
      const body = res.json() as any;
      if (res.statusCode !== 200) throw new Error(`${res.statusCode}: ${res.body}`);
      const choice = body.choices[0];
      const calls: Array<{ function: { name: string; arguments: string } }> = choice.message.tool_calls ?? [];
      const seen = new Set(calls.map((k) => `${k.function.name} ${k.function.arguments}`));
      results.push({
        kind: c.kind,
        finish: choice.finish_reason,
        tokens: body.usage.completion_tokens,
        calls: calls.length,
        duplicates: calls.length - seen.size,
        markup: typeof choice.message.content === "string" && choice.message.content.includes("<tool_call>"),
      });
    }
  }),
);
const seconds = (performance.now() - t0) / 1000;
await app.close();
await model.close();

const share = (rows: typeof results) => {
  const finished = rows.filter((r) => r.finish === "stop" || r.finish === "tool_calls").length;
  return `${finished}/${rows.length} finished (${((100 * finished) / Math.max(1, rows.length)).toFixed(0)}%)`;
};
log(`constrained answers at max_tokens ${maxTokens}, ${results.length} requests, ${seconds.toFixed(0)} s`);
for (const kind of ["schema", "tool-required", "tool-named"] as const) {
  const rows = results.filter((r) => r.kind === kind);
  const mean = rows.reduce((s, r) => s + r.tokens, 0) / Math.max(1, rows.length);
  const calls = rows.reduce((s, r) => s + r.calls, 0);
  const dups = rows.reduce((s, r) => s + r.duplicates, 0);
  log(
    `  ${kind.padEnd(14)} ${share(rows)}, mean ${mean.toFixed(0)} tokens${kind === "schema" ? "" : `, ${calls} calls, ${dups} exact duplicates, ${rows.filter((r) => r.markup).length} with call markup in content`}`,
  );
}
log(`  all            ${share(results)}`);
