#!/usr/bin/env node
// kiln runs from its TypeScript sources through tsx's loader (no build step to forget).
import { register } from "tsx/esm/api";

register();
const { main } = await import("../src/cli/kiln.ts");
process.exitCode = await main(process.argv.slice(2));
