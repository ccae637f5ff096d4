/**
 * Constrained decoding on @mlc-ai/web-xgrammar: one engine per model, living on the model's worker
 * thread, compiling each distinct constraint once and handing out one matcher per sequence.
 *
 * Every engine error is an emscripten abort() (a thrown WebAssembly.RuntimeError) after which the
 * WASM instance may be corrupt: schemas are checked in JS first (checkJsonSchema), and any error that
 * still comes out of the engine retires its instance. Matchers already running on a retired instance
 * keep it (it normally still works after one abort); new ones go to a fresh instance built in the
 * background, which replaces it once ready.
 */
import type { CompiledGrammar, GrammarCompiler, GrammarMatcher, TokenizerInfo } from "@mlc-ai/web-xgrammar";
import type { TokenizerSpec } from "../artifact/index.js";
import { BYTE_TO_CHAR } from "../text/byte-level.js";
import { Tokenizer } from "../text/tokenizer.js";
import { checkJsonSchema } from "./check-schema.js";
import { ConstraintError } from "./errors.js";
import { JSON_OBJECT_EBNF } from "./json-object-grammar.js";
import { loadXgrammar, type Xgrammar } from "./xgrammar.js";

/** What a sequence's output must be. `schema` is JSON text (the client's schema). */
export type ConstraintSpec = { type: "json_object" } | { type: "json_schema"; schema: string };

export interface TokenMatcher {
  /** Allowed next tokens: bit (id & 31) of word (id >> 5) set = allowed; words = ceil(logitsWidth / 32). */
  nextMask(): Promise<Int32Array>;
  /** Records the sampled token; false when the grammar does not allow it. */
  accept(token: number): boolean;
  /** The output is complete (only a stop token may follow, and it was accepted). */
  readonly terminated: boolean;
  dispose(): void;
}

/** Distinct compiled constraints kept per engine. */
export const GRAMMAR_CACHE_ENTRIES = 64;

const JSON_OBJECT_KEY = "json_object";

/** JSON-schema output format: compact separators, no whitespace, strict (no unlisted properties or items). */
const SCHEMA_FORMAT = { anyWhitespace: false, separators: { first: ",", second: ":" }, strict: true } as const;

/** The embind handles under the package's wrappers (the wrappers only add an `await` on top). */
interface CompilerHandle {
  CompileJSONSchema(
    schema: string,
    anyWhitespace: boolean,
    indent: number | undefined,
    separators: { first: string; second: string } | undefined,
    strict: boolean,
    maxWhitespace: number | undefined,
  ): unknown;
}
type MatcherHandleClass = new (compiled: unknown, stopTokens: undefined, terminateWithoutStop: boolean, maxRollback: number) => {
  delete(): void;
};
type MatcherClass = new (handle: unknown, vocabSize: number) => GrammarMatcher;

/** One WASM instance with the model's vocabulary loaded. */
class Instance {
  /** Set once an engine error came out of this instance: it gets no new matchers once a replacement is ready. */
  failed = false;
  private readonly cache = new Map<string, CompiledGrammar>();

  private constructor(
    private readonly xg: Xgrammar,
    private readonly info: TokenizerInfo,
    private readonly compiler: GrammarCompiler,
    private readonly jsonObject: CompiledGrammar,
    private readonly matcherHandle: MatcherHandleClass,
    readonly vocabSize: number,
  ) {}

  static async build(vocab: string[], vocabSize: number, stopTokenIds: readonly number[]): Promise<Instance> {
    const xg = loadXgrammar();
    const info = await xg.TokenizerInfo.createTokenizerInfo(vocab, "byte_level", false, vocabSize, [...stopTokenIds]);
    // The package's own cache would keep every schema ever compiled; ours is bounded.
    const compiler = await xg.GrammarCompiler.createGrammarCompiler(info, false);
    const jsonObject = await compiler.compileGrammar(JSON_OBJECT_EBNF);
    // The embind matcher class, reached through one matcher, so that matchers can be made synchronously.
    const probe = await xg.GrammarMatcher.createGrammarMatcher(jsonObject);
    const matcherHandle = (probe as unknown as { handle: { constructor: MatcherHandleClass } }).handle.constructor;
    probe.dispose();
    if (typeof matcherHandle !== "function") throw new Error("web-xgrammar: cannot reach the GrammarMatcher binding");
    return new Instance(xg, info, compiler, jsonObject, matcherHandle, vocabSize);
  }

  /** The compiled grammar for a constraint, from the LRU cache or compiled now. */
  compiled(key: string, schemaText: string | undefined): CompiledGrammar {
    if (schemaText === undefined) return this.jsonObject;
    const hit = this.cache.get(key);
    if (hit !== undefined) {
      this.cache.delete(key);
      this.cache.set(key, hit);
      return hit;
    }
    const handle = (this.compiler.handle as CompilerHandle).CompileJSONSchema(
      schemaText,
      SCHEMA_FORMAT.anyWhitespace,
      undefined,
      SCHEMA_FORMAT.separators,
      SCHEMA_FORMAT.strict,
      undefined,
    );
    const grammar = new this.xg.CompiledGrammar(handle);
    this.cache.set(key, grammar);
    if (this.cache.size > GRAMMAR_CACHE_ENTRIES) {
      const [oldest, evicted] = this.cache.entries().next().value as [string, CompiledGrammar];
      this.cache.delete(oldest);
      // Matchers hold their own reference to the grammar inside the engine; this drops only ours.
      evicted.dispose();
    }
    return grammar;
  }

  matcher(grammar: CompiledGrammar): GrammarMatcher {
    const handle = new this.matcherHandle(grammar.handle, undefined, false, -1);
    return new (this.xg.GrammarMatcher as unknown as MatcherClass)(handle, this.vocabSize);
  }
}

/** Per model, on the model's worker thread: builds matchers for constraints, compiling each distinct constraint once (LRU cache by content, 64 entries). */
export class ConstraintEngine {
  private rebuilding: Promise<void> | undefined;

  private constructor(
    private current: Instance,
    private readonly vocab: string[],
    private readonly logitsWidth: number,
    private readonly stopTokenIds: readonly number[],
  ) {}

  static async create(tokenizer: TokenizerSpec, logitsWidth: number, stopTokenIds: readonly number[]): Promise<ConstraintEngine> {
    if (!Number.isInteger(logitsWidth) || logitsWidth <= 0) throw new Error(`logits width ${logitsWidth} is not a positive integer`);
    const stops = [...new Set(stopTokenIds)];
    if (stops.length === 0) throw new Error("constrained decoding needs at least one stop token id");
    for (const id of stops) {
      if (!Number.isInteger(id) || id < 0 || id >= logitsWidth) throw new Error(`stop token id ${id} is outside the logits width ${logitsWidth}`);
    }
    const vocab = engineVocabulary(tokenizer, logitsWidth);
    const instance = await Instance.build(vocab, logitsWidth, stops);
    return new ConstraintEngine(instance, vocab, logitsWidth, stops);
  }

  /** A fresh matcher for one sequence. Throws ConstraintError for a schema the engine refuses. */
  matcher(spec: ConstraintSpec): TokenMatcher {
    let key = JSON_OBJECT_KEY;
    let schemaText: string | undefined;
    if (spec.type === "json_schema") {
      let parsed: unknown;
      try {
        parsed = JSON.parse(spec.schema);
      } catch (e) {
        throw new ConstraintError(`the schema is not valid JSON: ${(e as Error).message}`, "");
      }
      checkJsonSchema(parsed);
      schemaText = JSON.stringify(parsed);
      key = "json_schema:" + schemaText;
    } else if (spec.type !== "json_object") {
      throw new ConstraintError(`unknown constraint type "${(spec as { type: unknown }).type}"`, "");
    }
    const instance = this.current;
    let matcher: GrammarMatcher;
    try {
      matcher = instance.matcher(instance.compiled(key, schemaText));
    } catch (e) {
      this.failed(instance);
      throw new ConstraintError(`the constrained-decoding engine refused this schema: ${engineMessage(e)}`, "");
    }
    return new XgrammarMatcher(matcher, instance, this.logitsWidth, this.stopTokenIds, (i) => this.failed(i));
  }

  /** Retires an instance an engine error came out of and starts building its replacement. */
  private failed(instance: Instance): void {
    instance.failed = true;
    if (instance !== this.current || this.rebuilding !== undefined) return;
    this.rebuilding = Instance.build(this.vocab, this.logitsWidth, this.stopTokenIds)
      .then(
        (fresh) => {
          this.current = fresh;
        },
        () => {
          // Keep serving from the old instance; the next engine error tries again.
        },
      )
      .finally(() => {
        this.rebuilding = undefined;
      });
  }

  /** Resolves once a replacement instance started after an engine error is in place (for tests). */
  async settled(): Promise<void> {
    await this.rebuilding;
  }
}

class XgrammarMatcher implements TokenMatcher {
  private disposed = false;
  private done = false;

  constructor(
    private readonly matcher: GrammarMatcher,
    private readonly instance: Instance,
    private readonly logitsWidth: number,
    private readonly stopTokenIds: readonly number[],
    private readonly onEngineError: (instance: Instance) => void,
  ) {}

  get terminated(): boolean {
    return this.done;
  }

  async nextMask(): Promise<Int32Array> {
    this.checkLive();
    if (this.done) {
      const mask = new Int32Array(Math.ceil(this.logitsWidth / 32));
      for (const id of this.stopTokenIds) mask[id >>> 5] |= 1 << (id & 31);
      return mask;
    }
    try {
      return await this.matcher.getNextTokenBitmask();
    } catch (e) {
      throw this.engineError(e);
    }
  }

  accept(token: number): boolean {
    this.checkLive();
    if (this.done || !Number.isInteger(token) || token < 0 || token >= this.logitsWidth) return false;
    try {
      const ok = this.matcher.acceptToken(token);
      if (ok && this.matcher.isTerminated()) this.done = true;
      return ok;
    } catch (e) {
      throw this.engineError(e);
    }
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    try {
      this.matcher.dispose();
    } catch {
      // A handle of a broken instance: nothing more to free.
    }
  }

  private checkLive(): void {
    if (this.disposed) throw new Error("the token matcher was disposed");
  }

  private engineError(e: unknown): Error {
    this.onEngineError(this.instance);
    return new Error(`the constrained-decoding engine failed: ${engineMessage(e)}`, { cause: e });
  }
}

/**
 * The vocabulary as the engine takes it: each token's output bytes in GPT-2 byte-level form, and ""
 * for tokens that print nothing (control tokens above all), which the engine treats as special and
 * never allows inside the output. Padded with "" (or cut) to the logits width.
 */
export function engineVocabulary(spec: TokenizerSpec, logitsWidth: number): string[] {
  const tokenizer = Tokenizer.fromSpec(spec);
  const vocab = new Array<string>(logitsWidth).fill("");
  const n = Math.min(logitsWidth, tokenizer.vocabSize);
  for (let id = 0; id < n; id++) {
    if (tokenizer.isControl(id)) continue;
    const bytes = tokenizer.tokenBytes(id);
    let text = "";
    for (const b of bytes) text += BYTE_TO_CHAR[b];
    vocab[id] = text;
  }
  return vocab;
}

function engineMessage(e: unknown): string {
  const text = e instanceof Error ? e.message : String(e);
  return text.replace(/\. Build with -sASSERTIONS for more info\.?$/, "").trim() || "unknown engine error";
}
