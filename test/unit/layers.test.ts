/**
 * The import rule, checked on the sources. A layer imports only the layers below it:
 *
 *   cli (the composition root) -> track -> provision -> compiler, scheduler -> runtime
 *   cli -> api -> scheduler -> runtime
 *   cli -> cloud
 *   and catalogue at the bottom, importing nothing.
 *
 * The optimization track (track) measures and promotes artifacts that provision builds and loads.
 * cloud (keys, limits, ledger and their stores) sits beside api and imports only catalogue: api
 * declares what it needs of cloud mode (`api/cloud-port.ts`) and never imports cloud, cloud never
 * imports api, and cli wires the two. The compiler sees only runtime's artifact contract
 * (`runtime/artifact/`). runtime does not import catalogue. Nothing imports cli, api, cloud or track.
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const SRC = resolve("src");

/** What each top-level folder of src/ may import besides itself. */
const ALLOWED: Record<string, readonly string[]> = {
  cli: ["track", "provision", "api", "cloud", "compiler", "scheduler", "runtime", "catalogue"],
  track: ["provision", "compiler", "scheduler", "runtime", "catalogue"],
  provision: ["compiler", "scheduler", "runtime", "catalogue"],
  api: ["scheduler", "runtime", "catalogue"],
  cloud: ["catalogue"],
  compiler: ["runtime", "catalogue"],
  scheduler: ["runtime", "catalogue"],
  runtime: [],
  catalogue: [],
};

/** Where a layer may import only one folder of another: the compiler writes what runtime's artifact contract reads, and needs nothing else of runtime. */
const ONLY: Record<string, Record<string, string>> = {
  compiler: { runtime: "runtime/artifact/" },
};

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? sources(path) : path.endsWith(".ts") ? [path] : [];
  });
}

function layerOf(path: string): string {
  return relative(SRC, path).split(/[\\/]/)[0];
}

describe("layers", () => {
  it("every import points down the rule", () => {
    const wrong: string[] = [];
    for (const file of sources(SRC)) {
      const from = layerOf(file);
      const text = readFileSync(file, "utf8");
      // Static imports and re-exports, and dynamic imports (a module loaded only when needed obeys the rule too).
      const specifiers = [
        ...text.matchAll(/^\s*(?:import|export)[^"']*?from\s+["'](\.[^"']+)["']/gm),
        ...text.matchAll(/\bimport\(\s*["'](\.[^"']+)["']\s*\)/g),
      ];
      for (const m of specifiers) {
        const target = resolve(dirname(file), m[1]);
        const to = layerOf(target);
        if (to === from) continue;
        const only = ONLY[from]?.[to];
        const allowed = ALLOWED[from]?.includes(to) && (only === undefined || relative(SRC, target).split(/[\\/]/).join("/").startsWith(only));
        if (!allowed) wrong.push(`${relative(SRC, file)} (${from}) imports ${m[1]} (${to}${only ? `, outside ${only}` : ""})`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it("knows every folder of src/", () => {
    const folders = readdirSync(SRC).filter((n) => statSync(join(SRC, n)).isDirectory());
    expect(folders.sort()).toEqual(Object.keys(ALLOWED).sort());
  });
});
