#!/usr/bin/env node
// A checkout runs kiln from its TypeScript sources through tsx's loader (no build step to forget,
// even where an old dist/ lies beside them). An installed package holds no sources but the
// JavaScript `npm pack` compiled into dist/, and runs that: no loader thread, about 50 MB less
// memory a process, and no transpiling at start.
import { existsSync } from "node:fs";

const fromSources = existsSync(new URL("../src/cli/kiln.ts", import.meta.url));
if (fromSources) {
  const { register } = await import("tsx/esm/api");
  register();
}
const { main } = await import(fromSources ? "../src/cli/kiln.ts" : "../dist/cli/kiln.js");
process.exitCode = await main(process.argv.slice(2));
