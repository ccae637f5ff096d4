/** The track's measurements as an aligned text table (`kiln tracks`, and the end of `kiln track run`). */
import type { HistoryCandidate } from "../track/index.js";

const num = (value: number | null, digits: number) => (value === null ? "-" : value.toFixed(digits));

/** "2026-11-23T02:17:05.123Z" → "11-23 02:17" (UTC, as recorded). */
function when(iso: string): string {
  return iso.length >= 16 ? `${iso.slice(5, 10)} ${iso.slice(11, 16)}` : iso;
}

/** The artifact id without its slug ("smollm2-135m-instruct-ca0235fd74ea" → "ca0235fd74ea"). */
export function shortArtifact(artifact: string): string {
  return artifact.slice(artifact.lastIndexOf("-") + 1) || "-";
}

/** One row per measurement, oldest first; the reason, the only long column, last and unpadded. */
export function formatTrackTable(candidates: readonly HistoryCandidate[]): string {
  const header = ["WHEN (UTC)", "ARTIFACT", "DEVICE", "CHANGE", "DECODE", "PREFILL", "BATCH16", "TTFT ms", "RSS MB", "KL", "PPL x", "VERDICT", "REASON"];
  const rows = candidates.map((c) => [
    when(c.created_at),
    shortArtifact(c.artifact),
    // Rows recorded before the track knew devices are the CPU's.
    typeof c.settings.device === "string" ? c.settings.device : "cpu",
    c.verdict === "incumbent" || c.change === "" ? "(incumbent)" : c.change,
    num(c.metrics.decode_tokens_per_second, 1),
    num(c.metrics.prefill_tokens_per_second, 0),
    num(c.metrics.batch16_tokens_per_second, 1),
    num(c.metrics.ttft_ms, 0),
    num(c.metrics.peak_rss_mb, 0),
    c.quality.kl_divergence === null ? "-" : c.quality.kl_divergence.toFixed(4),
    num(c.quality.perplexity_ratio, 4),
    c.verdict,
    c.reason,
  ]);
  const all = [header, ...rows];
  const widths = header.map((_, i) => Math.max(...all.map((r) => r[i].length)));
  const numeric = new Set([4, 5, 6, 7, 8, 9, 10]);
  return all
    .map((r) =>
      r
        .map((cell, i) => (i === r.length - 1 ? cell : numeric.has(i) ? cell.padStart(widths[i]) : cell.padEnd(widths[i])))
        .join("  ")
        .trimEnd(),
    )
    .join("\n");
}
