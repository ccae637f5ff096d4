/** `kiln tracks [<slug>]`: the optimization track's history, what serves now, and the trend. */
import { hasModel, UnknownModelError } from "../../catalogue/catalogue.js";
import { openDatabase, type KilnDatabase } from "../../catalogue/db.js";
import { sparkline, trackHistory, trend } from "../../track/history.js";
import { trackedSlugs } from "../../track/records.js";
import { defineCommand } from "../command.js";
import { option, UsageError } from "../options.js";
import { formatTrackTable, shortArtifact } from "../track-table.js";

export default defineCommand({
  name: "tracks",
  description: "Show the optimization track: measurements, verdicts, what serves, the trend",
  intro: `Every measurement the track made of a model (or of every model with records), oldest first:
the artifact, what changed from the incumbent, decode, prefill and 16-sequence tokens/s, TTFT, peak
RSS, KL divergence and perplexity ratio against the exact-numerics reference, the verdict
(incumbent, promoted, rejected, failed, running) and why. Then the artifact in service and the
trend: per run, the decode tokens/s of what served at its end. --json prints
{slug, current, candidates: [...]} (an array of them without a slug).`,
  positionals: "[<slug>]",
  options: {
    json: option.flag({ description: "print JSON instead of tables" }),
    limit: option.integer({ min: 1, max: 100_000, description: "show only the newest N measurements per model. Default: all" }),
  },
  async run({ options, positionals }, io) {
    const [slug, ...extra] = positionals;
    if (extra.length > 0) throw new UsageError(`unexpected argument ${extra[0]}`);
    if (slug !== undefined && !hasModel(slug)) throw new UsageError(new UnknownModelError(slug).message);
    const db = openDatabase();
    try {
      const slugs = slug !== undefined ? [slug] : trackedSlugs(db);
      if (options.json) {
        const histories = slugs.map((s) => trackHistory(db, s, options.limit));
        io.stdout.write(`${JSON.stringify(slug !== undefined ? histories[0] : histories, null, 2)}\n`);
        return 0;
      }
      if (slugs.length === 0) {
        io.stdout.write("no track records yet (run one with `kiln track run <slug>`)\n");
        return 0;
      }
      io.stdout.write(slugs.map((s) => section(db, s, options.limit)).join("\n\n") + "\n");
      return 0;
    } finally {
      db.close();
    }
  },
});

function section(db: KilnDatabase, slug: string, limit: number | undefined): string {
  const history = trackHistory(db, slug, limit);
  const lines = [`${slug}`];
  lines.push(history.candidates.length > 0 ? formatTrackTable(history.candidates) : "  no measurements yet");
  const current = history.current;
  lines.push(
    current
      ? `serving: ${shortArtifact(current.artifact)} (${current.artifact}), promoted ${current.created_at}: ${current.reason}`
      : "serving: the default compile (nothing promoted)",
  );
  const points = trend(db, slug);
  if (points.length > 0) {
    const values = points.map((p) => p.decode_tokens_per_second);
    const first = values[0];
    const last = values.at(-1)!;
    const change = points.length > 1 ? ` (${last >= first ? "+" : "−"}${(Math.abs(last / first - 1) * 100).toFixed(1)}% over ${points.length} runs)` : "";
    const steps = points.map((p) => `${p.started_at.slice(5, 10)} ${p.decode_tokens_per_second.toFixed(1)}${p.promoted ? "*" : ""}`).join(" → ");
    lines.push(`trend, decode tok/s serving after each run (* promoted): ${sparkline(values)} ${steps}${change}`);
  }
  return lines.join("\n");
}
