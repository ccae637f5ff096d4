/**
 * Trust on first use for hub files the catalogue has no published digest for: the sha256 and size
 * a file had at its first pull are kept in `source-pins.json` in the model's folder, and a later
 * pull that finds a different file refuses it unless the operator accepts the change.
 *
 * Kept apart from `pulled.json` on purpose: that file describes what is on disk now and is rewritten
 * by every pull, while a pin outlives re-downloads (a deleted or damaged file fetched again must
 * still be the file first seen).
 */
import { readFile, rename, writeFile } from "node:fs/promises";
import { join } from "node:path";

export const PINS_FILE = "source-pins.json";

export interface SourcePin {
  sha256: string;
  bytes: number;
  /** The revision asked for when the pin was taken (a branch name when the catalogue has no commit). */
  revision: string;
  pinnedAt: string;
}

interface PinsFile {
  version: 1;
  /** By `<repo>/<path>`. */
  files: Record<string, SourcePin>;
}

/** The key of one hub file in the pins file. */
export function pinKey(repo: string, path: string): string {
  return `${repo}/${path}`;
}

export async function readPins(dir: string): Promise<Map<string, SourcePin>> {
  try {
    const parsed = JSON.parse(await readFile(join(dir, PINS_FILE), "utf8")) as PinsFile;
    if (parsed?.version !== 1 || typeof parsed.files !== "object" || parsed.files === null) return new Map();
    return new Map(Object.entries(parsed.files));
  } catch {
    return new Map();
  }
}

/** Writes every pin (atomically: a crash leaves the old file or the new one). */
export async function writePins(dir: string, pins: Map<string, SourcePin>): Promise<void> {
  const body: PinsFile = { version: 1, files: Object.fromEntries([...pins].sort(([a], [b]) => a.localeCompare(b))) };
  const tmp = join(dir, `${PINS_FILE}.${process.pid}.tmp`);
  await writeFile(tmp, JSON.stringify(body, null, 2) + "\n");
  await rename(tmp, join(dir, PINS_FILE));
}

/** The hub now serves a file other than the one pinned at its first pull. */
export class PinChangedError extends Error {
  constructor(
    readonly repo: string,
    readonly path: string,
    readonly pinned: SourcePin,
    readonly found: string,
  ) {
    super(
      `${path} in ${repo}@${pinned.revision} changed upstream: the hub now serves sha256 ${found}, but ${pinned.sha256} was recorded at its first pull (${pinned.pinnedAt}); refusing it. ` +
        `Run \`kiln pull --accept-changed\` to take the new file and pin its digest`,
    );
    this.name = "PinChangedError";
  }
}
