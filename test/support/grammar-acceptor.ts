/**
 * The real engine (web-xgrammar) without a vocabulary, for unit tests of grammars kiln writes: does
 * a grammar accept a text whole, and what EBNF does the engine write for a schema.
 */
import type { GrammarCompiler } from "@mlc-ai/web-xgrammar";
import { loadXgrammar, type Xgrammar } from "../../src/runtime/constrain/xgrammar.js";

let engine: Promise<{ xg: Xgrammar; compiler: GrammarCompiler }> | undefined;

function ready(): Promise<{ xg: Xgrammar; compiler: GrammarCompiler }> {
  engine ??= (async () => {
    const xg = loadXgrammar();
    const compiler = await xg.GrammarCompiler.createGrammarCompiler(await xg.TokenizerInfo.createTokenizerInfo([]), false);
    return { xg, compiler };
  })();
  return engine;
}

/** The package, loaded once per test file. */
export async function xgrammar(): Promise<Xgrammar> {
  return (await ready()).xg;
}

/**
 * What Testings.isGrammarAcceptString does (a matcher without vocabulary fed the string, then
 * asked whether it terminated), compiling the grammar once rather than per string.
 */
export async function acceptor(ebnf: string): Promise<{ accepts(text: string): boolean; dispose(): void }> {
  const { xg, compiler } = await ready();
  const compiled = await compiler.compileGrammar(ebnf);
  const matcher = await xg.GrammarMatcher.createGrammarMatcher(compiled, undefined, true);
  return {
    accepts(text) {
      const ok = matcher._acceptString(text) && matcher.isTerminated();
      matcher.reset();
      return ok;
    },
    dispose() {
      matcher.dispose();
      compiled.dispose();
    },
  };
}

/** The engine's own EBNF for a JSON schema (compact separators, strict). */
export async function schemaEbnf(schema: unknown): Promise<string> {
  const { xg } = await ready();
  const grammar = await xg.Grammar.fromJSONSchema(JSON.stringify(schema), false, -1, [",", ":"], true);
  try {
    return grammar.toString();
  } finally {
    grammar.dispose();
  }
}
