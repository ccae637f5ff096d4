/**
 * Progress reporting for pulls: a one-line bar redrawn in place when the stream is a TTY, and
 * occasional plain lines otherwise (logs, CI).
 */
import type { PullProgress } from "./index.js";

export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v >= 100 ? v.toFixed(0) : v.toFixed(1)} ${units[i]}`;
}

function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return "--";
  if (seconds < 60) return `${Math.ceil(seconds)}s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m${String(Math.ceil(seconds % 60)).padStart(2, "0")}s`;
  return `${Math.floor(seconds / 3600)}h${String(Math.floor((seconds % 3600) / 60)).padStart(2, "0")}m`;
}

const PHASE_LABEL: Record<PullProgress["phase"], string> = {
  download: "downloading",
  "fetch-package": "fetching package",
  extract: "extracting",
  verify: "verifying",
};

export interface ProgressStream {
  write(chunk: string): unknown;
  isTTY?: boolean;
  columns?: number;
}

export interface ProgressPrinter {
  (p: PullProgress): void;
  /** Ends the in-place line (TTY) so the next output starts on a fresh line. */
  done(): void;
}

/** A progress callback for `pullModel` that draws on `stream` (usually process.stderr). */
export function createProgressPrinter(stream: ProgressStream = process.stderr, options: { tty?: boolean; intervalMs?: number } = {}): ProgressPrinter {
  const tty = options.tty ?? stream.isTTY === true;
  const interval = options.intervalMs ?? (tty ? 100 : 5000);
  let lastDraw = 0;
  let lastKey = "";
  let lastFraction = -1;
  let open = false;

  const printer = ((p: PullProgress) => {
    const key = `${p.phase}:${p.file}`;
    const now = Date.now();
    const finished = p.bytesTotal !== null && p.bytesDone >= p.bytesTotal;
    const fraction = p.bytesTotal ? Math.min(1, p.bytesDone / p.bytesTotal) : null;
    const newItem = key !== lastKey;
    if (tty) {
      if (!newItem && !finished && now - lastDraw < interval) return;
      lastDraw = now;
      lastKey = key;
      const width = Math.max(40, Math.min((stream.columns ?? 100) - 1, 160));
      const rate = p.bytesPerSecond > 0 ? `${formatBytes(p.bytesPerSecond)}/s` : "";
      const eta =
        fraction !== null && !finished && p.bytesPerSecond > 0 && p.bytesTotal !== null
          ? `ETA ${formatDuration((p.bytesTotal - p.bytesDone) / p.bytesPerSecond)}`
          : "";
      const amount = p.bytesTotal !== null ? `${formatBytes(p.bytesDone)}/${formatBytes(p.bytesTotal)}` : p.bytesDone > 0 ? formatBytes(p.bytesDone) : "";
      const pct = fraction !== null ? `${(fraction * 100).toFixed(0).padStart(3)}%` : "";
      // Fit: the file name matters most, then the amount; the bar shrinks first, then ETA and rate go.
      let tailParts = [pct, amount, rate, eta].filter(Boolean);
      let tailText = tailParts.join("  ");
      const label = `${PHASE_LABEL[p.phase]} `;
      let barWidth = 30;
      const roomFor = () => width - tailText.length - barWidth - 4;
      while (roomFor() < label.length + p.file.length && barWidth > 10) barWidth--;
      while (roomFor() < p.file.length && tailParts.length > 2) {
        tailParts = tailParts.slice(0, -1);
        tailText = tailParts.join("  ");
      }
      const room = Math.max(8, roomFor());
      let name = label.length + p.file.length <= room ? label + p.file : p.file;
      if (name.length > room) name = "…" + name.slice(name.length - (room - 1));
      const filled = fraction !== null ? Math.round(fraction * barWidth) : 0;
      const bar = fraction !== null ? "#".repeat(filled) + "-".repeat(barWidth - filled) : "~".repeat(barWidth);
      stream.write(`\r\x1b[2K${name} [${bar}] ${tailText}`);
      open = true;
      if (finished) {
        stream.write("\n");
        open = false;
      }
      return;
    }
    // Plain lines: the start of each item, then every `interval` ms or 25 %, and the end.
    const quarter = fraction !== null ? Math.floor(fraction * 4) : -1;
    if (!newItem && !finished && now - lastDraw < interval && quarter === lastFraction) return;
    if (!newItem && finished && lastFraction === 4) return;
    lastDraw = now;
    lastKey = key;
    lastFraction = finished ? 4 : quarter;
    const amount =
      p.bytesTotal !== null ? `: ${formatBytes(p.bytesDone)} of ${formatBytes(p.bytesTotal)}` : p.bytesDone > 0 ? `: ${formatBytes(p.bytesDone)}` : "";
    const rate = p.bytesPerSecond > 0 ? `, ${formatBytes(p.bytesPerSecond)}/s` : "";
    const pct = fraction !== null ? ` (${Math.floor(fraction * 100)}%)` : "";
    stream.write(`${p.slug}: ${PHASE_LABEL[p.phase]} ${p.file}${amount}${pct}${rate}\n`);
  }) as ProgressPrinter;
  printer.done = () => {
    if (open) stream.write("\n");
    open = false;
  };
  return printer;
}
