/** `kiln models`: the catalogue as an aligned text table (or JSON). */
import { join } from "node:path";
import { listModels } from "../../catalogue/catalogue.js";
import { footprintBytes, localFootprint, localSlugs, type LocalFootprint } from "../../catalogue/local-store.js";
import { artifactsDir, kilnHome, modelDir } from "../../catalogue/paths.js";
import { formatBytes } from "../../catalogue/pull/progress.js";
import { readRecord } from "../../catalogue/pull/store.js";
import type { ModelEntry, ModelKind } from "../../catalogue/types.js";
import { assessCompilability, type Compilability, freeDiskBytes, gib, machineMemoryBytes } from "../../compiler/compilability.js";
import { isFirstOrOnlyGguf } from "../../compiler/gguf/split.js";
import { readManifest } from "../../runtime/artifact/index.js";
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

/** The COMPILE cell: yes, yes with what stops it serving here, or no with the first reason. */
export function formatCompilability(c: Compilability): string {
  if (!c.compilable) return `no: ${c.reasons[0]}`;
  return c.memory.fitsToServe ? "yes" : `yes (serving needs ~${gib(c.memory.neededBytes)} memory)`;
}

/** A model this machine keeps that the catalogue does not list: compiled from a local GGUF file. */
export interface LocalFileModel {
  slug: string;
  /** From its newest artifact's manifest; undefined when none can be read. */
  kind?: ModelKind;
  contextLength?: number;
  /** The GGUF file it was compiled from. */
  sourceFile?: string;
  local: LocalFootprint;
}

/** The models under KILN_HOME that the catalogue does not list (compiled from local GGUF files), sorted. */
export function localFileModels(home: string, catalogued: ReadonlySet<string>): LocalFileModel[] {
  const out: LocalFileModel[] = [];
  for (const slug of localSlugs(home)) {
    if (catalogued.has(slug)) continue;
    const local = localFootprint(slug, home);
    if (!local) continue;
    const manifests = local.artifacts.flatMap((a) => {
      try {
        return [readManifest(join(artifactsDir(slug, home), a.id))];
      } catch {
        return []; // still being written, or not an artifact
      }
    });
    const newest = manifests.sort((a, b) => (a.createdAt < b.createdAt ? 1 : -1))[0];
    out.push({
      slug,
      kind: newest?.kind ?? (newest ? "text" : undefined),
      contextLength: newest?.shape?.contextLength,
      sourceFile: newest?.source?.file,
      local,
    });
  }
  return out;
}

/** The LOCAL cell: what this machine keeps of the model, on disk, or "-". */
export function formatLocal(f: LocalFootprint | null | undefined): string {
  return f ? formatBytes(footprintBytes(f)) : "-";
}

/**
 * The aligned table (header + one row per model), without a trailing newline; `local` adds the
 * LOCAL column, `compile` the COMPILE one.
 */
export function formatModelsTable(
  models: readonly ModelEntry[],
  compile?: ReadonlyMap<string, Compilability>,
  local?: ReadonlyMap<string, LocalFootprint | null>,
  files: readonly LocalFileModel[] = [],
): string {
  const header = ["SLUG", "KIND", "PARAMS", "CONTEXT", "PRICE (USD)", "LICENCE", ...(local ? ["LOCAL"] : []), ...(compile ? ["COMPILE"] : [])];
  const rows = models.map((m) => [
    m.slug,
    m.kind,
    formatParameters(m.parameters),
    formatContext(m.contextLength),
    formatPrices(m),
    m.licence,
    ...(local ? [formatLocal(local.get(m.slug))] : []),
    ...(compile ? [formatCompilability(compile.get(m.slug)!)] : []),
  ]);
  // A model compiled from a local file has no catalogue entry: what its artifact says, and "-".
  for (const f of files) {
    rows.push([
      f.slug,
      f.kind ?? "-",
      "-",
      f.contextLength ? formatContext(f.contextLength) : "-",
      "local file",
      "-",
      ...(local ? [formatLocal(f.local)] : []),
      ...(compile ? ["-"] : []),
    ]);
  }
  const rightAligned = new Set([2, 3, ...(local ? [6] : [])]);
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
  intro: `Lists the catalogue: slug, kind, parameters, context length, prices and licence, and whether this
kiln can compile the model here (COMPILE; \`compile\` in --json): the architecture has a graph builder,
every weight type has a mapping (read from the GGUF header once pulled, else from the file name's
quantization), and the disk at KILN_HOME holds the weights and the artifact. A model whose artifact
is larger than this machine's memory still compiles (one tensor at a time) but cannot be served here.
LOCAL is what this machine keeps of the model under KILN_HOME, pulled weights and compiled artifacts
together (\`local\` in --json: the bytes of each, or null); \`kiln rm\` deletes it. With --local, the
models compiled from local GGUF files (\`kiln compile ./file.gguf\`) follow, priced "local file"
(\`sourceFile\` in --json).
Text prices are USD per million input / output tokens; transcription prices are USD per audio minute.`,
  options: {
    kind: option.choice(["text", "transcription"] satisfies ModelKind[], { description: "only the models of this kind; all when absent" }),
    local: option.flag({ description: "only the models this machine keeps something of (pulled weights or compiled artifacts)" }),
    json: option.flag({ description: "print the catalogue entries as JSON" }),
  },
  async run({ options }, io) {
    const home = kilnHome();
    const kept = new Map(listModels({ kind: options.kind }).map((m) => [m.slug, localFootprint(m.slug, home)]));
    const models = listModels({ kind: options.kind }).filter((m) => !options.local || kept.get(m.slug) !== null);
    const files = options.local ? localFileModels(home, new Set(listModels().map((m) => m.slug))).filter((f) => !options.kind || f.kind === options.kind) : [];
    const compile = await assessAll(models);
    const out = options.json
      ? JSON.stringify(
          [
            ...models.map((m) => ({ ...m, local: localJson(kept.get(m.slug) ?? null), compile: compile.get(m.slug) })),
            ...files.map((f) => ({
              slug: f.slug,
              kind: f.kind ?? null,
              contextLength: f.contextLength ?? null,
              sourceFile: f.sourceFile ?? null,
              local: localJson(f.local),
            })),
          ],
          null,
          2,
        )
      : formatModelsTable(models, compile, kept, files);
    io.stdout.write(out + "\n");
    return 0;
  },
});

/** A footprint as --json gives it: bytes of the weights and of each artifact. */
function localJson(f: LocalFootprint | null) {
  return f && { weights_bytes: f.weightsBytes, artifacts: f.artifacts.map((a) => ({ id: a.id, bytes: a.bytes })) };
}

/** Every model's compilability, from its pulled GGUF header where it is pulled. */
async function assessAll(models: readonly ModelEntry[]): Promise<Map<string, Compilability>> {
  const home = kilnHome();
  const machine = { memoryBytes: machineMemoryBytes(), freeDiskBytes: freeDiskBytes(join(home, "artifacts")) };
  const out = new Map<string, Compilability>();
  for (const m of models) {
    const dir = modelDir(m.slug, home);
    const record = await readRecord(dir);
    const gguf = record?.files.find((f) => isFirstOrOnlyGguf(f.path));
    const pulledBytes = record?.files.reduce((n, f) => n + f.bytes, 0);
    try {
      out.set(m.slug, await assessCompilability(m, { home, machine, pulledGguf: gguf ? join(dir, gguf.path) : undefined, pulledBytes }));
    } catch {
      // An unreadable pulled file: judge by the catalogue, as if not pulled.
      out.set(m.slug, await assessCompilability(m, { home, machine }));
    }
  }
  return out;
}
