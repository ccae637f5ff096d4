/** kiln's own version, as its package.json says (the same file beside `src/` in a checkout and beside `dist/` in a package). */
import { readFileSync } from "node:fs";

let cached: string | undefined;

/** The version of this kiln, e.g. "0.1.0". */
export function kilnVersion(): string {
  cached ??= (JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string }).version;
  return cached;
}
