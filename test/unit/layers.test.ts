/**
 * The import rule, checked on the sources: cli -> api -> scheduler -> runtime -> catalogue, with
 * provision (pull -> compile -> record -> load) between cli and the compiler and scheduler, and the
 * compiler beside api importing only runtime and catalogue. cloud (keys, limits, ledger and their
 * stores) sits beside api and imports only catalogue: api declares what it needs of cloud mode
 * (`api/cloud-port.ts`) and never imports cloud, cloud never imports api, and cli wires the two.
 * Nothing imports cli or api.
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const SRC = resolve("src");

/** What each top-level folder of src/ may import besides itself. */
const ALLOWED: Record<string, readonly string[]> = {
  cli: ["provision", "api", "cloud", "compiler", "scheduler", "runtime", "catalogue"],
  provision: ["compiler", "scheduler", "runtime", "catalogue"],
  api: ["scheduler", "runtime", "catalogue"],
  cloud: ["catalogue"],
  compiler: ["runtime", "catalogue"],
  scheduler: ["runtime", "catalogue"],
  runtime: ["catalogue"],
  catalogue: [],
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
      for (const m of readFileSync(file, "utf8").matchAll(/^\s*(?:import|export)[^"']*?from\s+["'](\.[^"']+)["']/gm)) {
        const to = layerOf(resolve(dirname(file), m[1]));
        if (to !== from && !ALLOWED[from]?.includes(to)) wrong.push(`${relative(SRC, file)} (${from}) imports ${m[1]} (${to})`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it("knows every folder of src/", () => {
    const folders = readdirSync(SRC).filter((n) => statSync(join(SRC, n)).isDirectory());
    expect(folders.sort()).toEqual(Object.keys(ALLOWED).sort());
  });
});
