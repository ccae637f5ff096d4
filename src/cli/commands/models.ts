/** `kiln models`: the catalogue as an aligned text table (or JSON). */
import { listModels } from "../../catalogue/catalogue.js";
import type { ModelEntry, ModelKind } from "../../catalogue/types.js";
import { defineCommand } from "../command.js";
import { option } from "../options.js";

/** 135e6 → "135M", 70.6e9 → "70.6B", 1.55e9 → "1.55B". */
export function formatParameters(n: number): string {
  const [value, unit] = n >= 1e9 ? [n / 1e9, "B"] : [n / 1e6, "M"];
  const digits = value >= 100 ? 0 : value >= 10 ? 1 : 2;
  return `${Number(value.toFixed(digits))}${unit}`;
}

/** 131072 → "131,072". */
export function formatContext(n: number): string {
  return n.toLocaleString("en-US");
}

/** 0.1 → "$0.10", 0.005 → "$0.005": at least two decimals, more when the price has them. */
export function formatUsd(n: number): string {
  let digits = 2;
  while (digits < 8 && Number(n.toFixed(digits)) !== n) digits++;
  return `$${n.toFixed(digits)}`;
}

export function formatPrices(m: ModelEntry): string {
  const p = m.prices;
  if (p.usdPerAudioMinute !== undefined) return `${formatUsd(p.usdPerAudioMinute)} / audio min`;
  return `${formatUsd(p.inputUsdPerMillionTokens ?? 0)} in / ${formatUsd(p.outputUsdPerMillionTokens ?? 0)} out per 1M tok`;
}

/** The aligned table (header + one row per model), without a trailing newline. */
export function formatModelsTable(models: readonly ModelEntry[]): string {
  const header = ["SLUG", "KIND", "PARAMS", "CONTEXT", "PRICE (USD)", "LICENCE"];
  const rows = models.map((m) => [
    m.slug,
    m.kind,
    formatParameters(m.parameters),
    formatContext(m.contextLength),
    formatPrices(m),
    m.licence,
  ]);
  const rightAligned = new Set([2, 3]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (rightAligned.has(i) ? c.padStart(widths[i]!) : c.padEnd(widths[i]!)))
      .join("  ")
      .trimEnd();
  return [line(header), ...rows.map(line)].join("\n");
}

export default defineCommand({
  name: "models",
  description: "List the models kiln serves (the catalogue)",
  intro: `Lists the catalogue: slug, kind, parameters, context length, prices and licence.
Text prices are USD per million input / output tokens; transcription prices are USD per audio minute.`,
  options: {
    kind: option.choice(["text", "transcription"] satisfies ModelKind[], { description: "only the models of this kind; all when absent" }),
    json: option.flag({ description: "print the catalogue entries as JSON" }),
  },
  async run({ options }, io) {
    const models = listModels({ kind: options.kind });
    io.stdout.write((options.json ? JSON.stringify(models, null, 2) : formatModelsTable(models)) + "\n");
    return 0;
  },
});
