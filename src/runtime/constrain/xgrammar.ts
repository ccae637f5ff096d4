/**
 * Loading @mlc-ai/web-xgrammar 0.1.27 in Node. Its bundle is a UMD script inside a "type": "module"
 * package that uses `require` and `__filename`, so an ESM `import` of it fails; it is compiled here
 * as CommonJS instead. Each load is a fresh module with its own WASM instance, which is how a
 * ConstraintEngine replaces an instance after an engine abort.
 */
import { readFileSync } from "node:fs";
import { createRequire, Module } from "node:module";
import type * as XG from "@mlc-ai/web-xgrammar";

export type Xgrammar = typeof XG;

const require = createRequire(import.meta.url);

interface CompilableModule {
  filename: string;
  paths: string[];
  exports: unknown;
  _compile(source: string, filename: string): void;
}
type ModuleStatics = { new (id: string): CompilableModule; _nodeModulePaths(from: string): string[] };

let source: { file: string; text: string } | undefined;

/** A fresh copy of the package (a new WASM instance once first used). */
export function loadXgrammar(): Xgrammar {
  if (source === undefined) {
    const file = require.resolve("@mlc-ai/web-xgrammar/lib/index.js");
    source = { file, text: readFileSync(file, "utf8") };
  }
  const M = Module as unknown as ModuleStatics;
  const m = new M(source.file);
  m.filename = source.file;
  m.paths = M._nodeModulePaths(source.file);
  m._compile(source.text, source.file);
  return m.exports as Xgrammar;
}
