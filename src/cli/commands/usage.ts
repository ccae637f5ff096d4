/** `kiln usage`: the usage ledger of cloud mode, totalled by key, model or day. */
import { formatNanoUsd, type UsageGrouping, type UsageLine } from "../../cloud/index.js";
import { databaseOption, withCloudStore } from "../cloud-options.js";
import { defineCommand } from "../command.js";
import { option, UsageError } from "../options.js";

const options = {
  key: option.string({ value: "<id>", description: "only this key's requests (key_…)" }),
  model: option.string({ value: "<slug>", description: "only this model's requests" }),
  since: option.string({ value: "<date>", description: "only requests at or after this ISO 8601 date or UTC time" }),
  by: option.choice(["key", "model", "day"], { default: "key", description: "what each line totals: a key, a model, or a UTC day" }),
  database: databaseOption,
  json: option.flag({ description: "print JSON (money as exact decimal strings of nano-USD and USD)" }),
};

export default defineCommand({
  name: "usage",
  description: "Report the usage ledger of cloud mode",
  intro: `Totals of the usage ledger that \`kiln serve --cloud\` writes (one row per request, costs in integer
nano-USD): requests, prompt and completion tokens, audio, and cost, per key, model or UTC day.
Local mode charges nothing and writes no ledger.`,
  options,
  async run({ options }, io) {
    const since = options.since === undefined ? undefined : sinceTime(options.since);
    return withCloudStore(options.database, async (store) => {
      const lines = await store.usage({ keyId: options.key, slug: options.model, since, by: options.by as UsageGrouping });
      io.stdout.write(options.json ? `${JSON.stringify(lines.map(lineJson), null, 2)}\n` : table(lines, options.by));
      return 0;
    });
  },
});

function sinceTime(text: string): string {
  const ms = /^\d{4}-\d{2}-\d{2}(T.*(Z|[+-]\d{2}:?\d{2}))?$/.test(text) ? Date.parse(text) : NaN;
  if (Number.isNaN(ms)) throw new UsageError(`--since must be an ISO 8601 date or UTC time (2027-01-31, 2027-01-31T12:00:00Z), not ${text}`);
  return new Date(ms).toISOString();
}

function lineJson(l: UsageLine) {
  return {
    group: l.group,
    requests: l.requests,
    promptTokens: l.promptTokens,
    completionTokens: l.completionTokens,
    audioMs: l.audioMs,
    costNanoUsd: String(l.costNanoUsd),
    costUsd: formatNanoUsd(l.costNanoUsd),
  };
}

function table(lines: UsageLine[], by: string): string {
  if (lines.length === 0) return "no usage recorded\n";
  const total = lines.reduce(
    (t, l) => ({ requests: t.requests + l.requests, p: t.p + l.promptTokens, c: t.c + l.completionTokens, a: t.a + l.audioMs, cost: t.cost + l.costNanoUsd }),
    { requests: 0, p: 0, c: 0, a: 0, cost: 0n },
  );
  const rows = [
    [by.toUpperCase(), "REQUESTS", "PROMPT", "COMPLETION", "AUDIO S", "COST USD"],
    ...lines.map((l) => [
      l.group,
      String(l.requests),
      String(l.promptTokens),
      String(l.completionTokens),
      (l.audioMs / 1000).toFixed(0),
      formatNanoUsd(l.costNanoUsd),
    ]),
    ["TOTAL", String(total.requests), String(total.p), String(total.c), (total.a / 1000).toFixed(0), formatNanoUsd(total.cost)],
  ];
  const widths = rows[0].map((_, c) => Math.max(...rows.map((r) => r[c].length)));
  return rows.map((r) => r.map((cell, c) => (c === 0 ? cell.padEnd(widths[c]) : cell.padStart(widths[c]))).join("  ")).join("\n") + "\n";
}
