/**
 * Constrained decoding on @mlc-ai/web-xgrammar: one engine per model, living on the model's worker
 * thread, compiling each distinct constraint once and handing out one matcher per sequence.
 *
 * Every engine error is an emscripten abort() (a thrown WebAssembly.RuntimeError) after which the
 * WASM instance may be corrupt: constraints are checked in JS first (checkConstraint), and any error
 * that still comes out of the engine retires its instance. Matchers already running on a retired
 * instance keep it (it normally still works after one abort); new ones go to a fresh instance built
 * in the background, which replaces it once ready.
 *
 * Compiles are synchronous calls on the embind handles under the package's async wrappers, so a
 * matcher is ready in the same turn. Masks that allow all the engine ever allows (a structural tag's
 * free text) come back as null, sparing the worker a copy and a masking pass over the whole row.
 */
import type { CompiledGrammar, GrammarCompiler, GrammarMatcher, TokenizerInfo } from "@mlc-ai/web-xgrammar";
import type { TokenizerSpec } from "../artifact/index.js";
import { BYTE_TO_CHAR } from "../text/byte-level.js";
import { Tokenizer } from "../text/tokenizer.js";
import { checkedConstraint, type CheckedConstraint } from "./check-constraint.js";
import { ConstraintError } from "./errors.js";
import { stringFormatRule } from "./string-formats.js";
import { stringLengthRule } from "./string-lengths.js";
import { boundedIntegerRule } from "./int-range.js";
import { JSON_OBJECT_EBNF, JSON_WS_EBNF } from "./json-object-grammar.js";
import { jsonStringClasses } from "./json-string-classes.js";
import { fillRules, placeRules } from "./placed-rules.js";
import { engineEbnf, parseGbnf } from "./gbnf.js";
import { enginePattern } from "./regex.js";
import { withEnginePatterns } from "./schema-patterns.js";
import { loadXgrammar, type Xgrammar } from "./xgrammar.js";

/**
 * What a sequence's output must be:
 * - `json_object`: one JSON object;
 * - `json_schema`: JSON valid against `schema` (JSON text of the client's schema);
 * - `regex`: text matching `pattern` whole (vLLM's `guided_regex`; the dialect regex.ts accepts);
 * - `choice`: exactly one of `choices` (vLLM's `guided_choice`);
 * - `grammar`: text the GBNF `grammar` derives from its `root` rule (llama.cpp's `grammar`, vLLM's
 *   `guided_grammar`; the dialect gbnf.ts accepts);
 * - `structural_tag`: `format` is the JSON text of an xgrammar structural-tag format (free text,
 *   tags whose content is constrained, triggers): how tool calls are constrained.
 */
export type ConstraintSpec =
  | { type: "json_object" }
  | { type: "json_schema"; schema: string }
  | { type: "regex"; pattern: string }
  | { type: "choice"; choices: string[] }
  | { type: "grammar"; grammar: string }
  | { type: "structural_tag"; format: string };

export interface TokenMatcher {
  /**
   * Allowed next tokens: bit (id & 31) of word (id >> 5) set = allowed; words = ceil(logitsWidth / 32).
   * null when the constraint allows every token the engine ever allows (free text outside a
   * structural tag's tags): then only the engine's {@link ConstraintEngine.freeTextBans} are banned.
   * undefined when nothing holds the next token (a thinking budget not yet spent, alone): no token is banned.
   */
  nextMask(): Promise<Int32Array | null | undefined>;
  /** Records the sampled token; false when the grammar does not allow it. */
  accept(token: number): boolean;
  /** The output is complete (only a stop token may follow, and it was accepted). */
  readonly terminated: boolean;
  dispose(): void;
}

/** Distinct compiled constraints kept per engine. */
export const GRAMMAR_CACHE_ENTRIES = 64;

/**
 * JSON-schema output format: strict (no unlisted properties or items), the engine's own whitespace
 * off (unbounded, it lets a small model loop on blanks), and separators carrying a private-use
 * marker so that {@link boundedJsonEbnf} can find them and allow a bounded run of whitespace after
 * each: a literal "," or ":" may also come from a schema's pattern, where no whitespace belongs.
 */
const SCHEMA_FORMAT = { anyWhitespace: false, separators: { first: ",\ue000", second: ":\ue001" }, strict: true } as const;

/** The embind handles under the package's wrappers (the wrappers only add an `await` on top). */
interface CompilerHandle {
  CompileGrammar(grammar: GrammarHandle): unknown;
  /** `json`: a structural tag, `{"type": "structural_tag", "format": ...}`. */
  CompileStructuralTag(json: string): unknown;
}
interface GrammarHandle {
  ToString(): string;
  delete(): void;
}
/** The embind Grammar class: its static constructors run synchronously. */
interface GrammarClass {
  FromEBNF(ebnf: string, rootRule: string): GrammarHandle;
  FromJSONSchema(
    schema: string,
    anyWhitespace: boolean,
    indent: number | undefined,
    separators: { first: string; second: string } | undefined,
    strict: boolean,
    maxWhitespace: number | undefined,
    printConverted: boolean,
  ): GrammarHandle;
}
type MatcherHandleClass = new (
  compiled: unknown,
  stopTokens: undefined,
  terminateWithoutStop: boolean,
  maxRollback: number,
) => {
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
    private readonly grammarClass: GrammarClass,
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
    // Likewise the embind Grammar class, whose static constructors are synchronous.
    const probeGrammar = (jsonObject.handle as { GetGrammar(): GrammarHandle }).GetGrammar();
    const grammarClass = probeGrammar.constructor as unknown as GrammarClass;
    probeGrammar.delete();
    if (typeof grammarClass.FromEBNF !== "function" || typeof grammarClass.FromJSONSchema !== "function") {
      throw new Error("web-xgrammar: cannot reach the Grammar binding");
    }
    return new Instance(xg, info, compiler, jsonObject, matcherHandle, grammarClass, vocabSize);
  }

  /** The compiled grammar for a checked constraint, from the LRU cache or compiled now. */
  compiled(c: CheckedConstraint): CompiledGrammar {
    if (c.type === "json_object") return this.jsonObject;
    const hit = this.cache.get(c.key);
    if (hit !== undefined) {
      this.cache.delete(c.key);
      this.cache.set(c.key, hit);
      return hit;
    }
    const grammar = new this.xg.CompiledGrammar(this.compile(c));
    this.cache.set(c.key, grammar);
    if (this.cache.size > GRAMMAR_CACHE_ENTRIES) {
      const [oldest, evicted] = this.cache.entries().next().value as [string, CompiledGrammar];
      this.cache.delete(oldest);
      // Matchers hold their own reference to the grammar inside the engine; this drops only ours.
      evicted.dispose();
    }
    return grammar;
  }

  /** Compiles synchronously through the embind handles; returns the CompiledGrammar handle. */
  private compile(c: Exclude<CheckedConstraint, { type: "json_object" }>): unknown {
    const compiler = this.compiler.handle as CompilerHandle;
    switch (c.type) {
      case "json_schema":
        return this.compileEbnf(this.schemaEbnf(c.schema));
      case "regex": {
        const form = enginePattern(c.pattern);
        return "ebnf" in form ? this.compileEbnf(form.ebnf) : compiler.CompileStructuralTag(structuralTag({ type: "regex", pattern: form.regex }));
      }
      case "choice":
        // EBNF rather than an `or` of const strings, which cannot hold an empty choice.
        return this.compileEbnf(choiceEbnf(c.choices));
      case "grammar":
        return this.compileEbnf(c.ebnf);
      case "structural_tag":
        return compiler.CompileStructuralTag(structuralTag(this.engineFormat(c.format)));
    }
  }

  /** Compiles EBNF whose root rule is `root` (written by kiln, so the engine's parser accepts it). */
  private compileEbnf(ebnf: string): unknown {
    const grammar = this.grammarClass.FromEBNF(ebnf, "root");
    try {
      return (this.compiler.handle as CompilerHandle).CompileGrammar(grammar);
    } finally {
      grammar.delete();
    }
  }

  /**
   * A checked structural-tag format as the engine must be given it. The engine compiles a
   * `json_schema` element with its defaults (any white space, unbounded), so each becomes a
   * `grammar` element holding the schema's EBNF built with kiln's JSON-schema settings, the same
   * as a `json_schema` constraint; regex patterns get kiln's rewriting (enginePattern), GBNF
   * grammars gbnf.ts's.
   */
  private engineFormat(node: unknown): unknown {
    if (Array.isArray(node)) return node.map((n) => this.engineFormat(n));
    if (typeof node !== "object" || node === null) return node;
    const format = node as Record<string, unknown>;
    if (format.type === "json_schema") return { type: "grammar", grammar: this.schemaEbnf(format.json_schema) };
    if (format.type === "regex") {
      const form = enginePattern(format.pattern as string);
      return "ebnf" in form ? { type: "grammar", grammar: form.ebnf } : { type: "regex", pattern: form.regex };
    }
    if (format.type === "grammar") return { type: "grammar", grammar: engineEbnf(parseGbnf(format.grammar as string)) };
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(format)) out[k] = k === "content" || k === "elements" || k === "tags" ? this.engineFormat(v) : v;
    return out;
  }

  /**
   * The EBNF of a schema with kiln's JSON-schema settings: every bounded integer's, some formats'
   * and every length-bounded string's rule written by kiln (int-range.ts, string-formats.ts,
   * string-lengths.ts) rather than by the engine, whose rules for them let invalid values through
   * or compile slowly; its patterns rewritten where the engine
   * would misread them (schema-patterns.ts); its strings' classes kept to what JSON text holds raw
   * (json-string-classes.ts).
   */
  private schemaEbnf(schema: unknown): string {
    const placed = placeRules(withEnginePatterns(schema), (node) => boundedIntegerRule(node) ?? stringFormatRule(node) ?? stringLengthRule(node));
    const grammar = this.grammarClass.FromJSONSchema(
      JSON.stringify(placed.schema),
      SCHEMA_FORMAT.anyWhitespace,
      undefined,
      SCHEMA_FORMAT.separators,
      SCHEMA_FORMAT.strict,
      undefined,
      false,
    );
    try {
      return boundedJsonEbnf(jsonStringClasses(fillRules(grammar.ToString(), placed)));
    } finally {
      grammar.delete();
    }
  }

  matcher(grammar: CompiledGrammar): GrammarMatcher {
    const handle = new this.matcherHandle(grammar.handle, undefined, false, -1);
    return new (this.xg.GrammarMatcher as unknown as MatcherClass)(handle, this.vocabSize);
  }
}

/** Per model, on the model's worker thread: builds matchers for constraints, compiling each distinct constraint once (LRU cache by content, 64 entries). */
export class ConstraintEngine {
  /**
   * Token ids the engine never allows, whatever the constraint: control tokens other than the stop
   * tokens (they print nothing) and ids past the vocabulary. Ascending. A null mask from
   * {@link TokenMatcher.nextMask} means everything but these.
   */
  readonly freeTextBans: Int32Array;
  private rebuilding: Promise<void> | undefined;
  /** The mask of free text: every id but {@link freeTextBans}. */
  private readonly freeMask: Int32Array;

  private constructor(
    private current: Instance,
    private readonly vocab: string[],
    private readonly logitsWidth: number,
    private readonly stopTokenIds: readonly number[],
  ) {
    this.freeMask = new Int32Array(Math.ceil(logitsWidth / 32));
    const bans: number[] = [];
    for (let id = 0; id < logitsWidth; id++) {
      if (vocab[id] !== "" || stopTokenIds.includes(id)) this.freeMask[id >>> 5] |= 1 << (id & 31);
      else bans.push(id);
    }
    this.freeTextBans = Int32Array.from(bans);
  }

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

  /** A fresh matcher for one sequence. Throws ConstraintError for a constraint the gate (checkConstraint) or the engine refuses. */
  matcher(spec: ConstraintSpec): TokenMatcher {
    const checked = checkedConstraint(spec);
    const instance = this.current;
    let matcher: GrammarMatcher;
    try {
      matcher = instance.matcher(instance.compiled(checked));
    } catch (e) {
      this.failed(instance);
      const what = checked.type === "json_schema" ? "schema" : "constraint";
      throw new ConstraintError(`the constrained-decoding engine refused this ${what}: ${engineMessage(e)}`, "");
    }
    // Only structural tags have free text; other constraints never produce the free mask.
    const free = checked.type === "structural_tag" ? this.freeMask : undefined;
    return new XgrammarMatcher(matcher, instance, this.logitsWidth, this.stopTokenIds, free, (i) => this.failed(i));
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
    /** The free-text mask, for constraints that can be in free text. */
    private readonly freeMask: Int32Array | undefined,
    private readonly onEngineError: (instance: Instance) => void,
  ) {}

  get terminated(): boolean {
    return this.done;
  }

  async nextMask(): Promise<Int32Array | null> {
    this.checkLive();
    if (this.done) {
      const mask = new Int32Array(Math.ceil(this.logitsWidth / 32));
      for (const id of this.stopTokenIds) mask[id >>> 5] |= 1 << (id & 31);
      return mask;
    }
    let mask: Int32Array;
    try {
      mask = await this.matcher.getNextTokenBitmask();
    } catch (e) {
      throw this.engineError(e);
    }
    return this.freeMask !== undefined && sameMask(mask, this.freeMask) ? null : mask;
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

/**
 * A schema's EBNF as the engine wrote it, made finishable by a small model: after each separator
 * (marked by {@link SCHEMA_FORMAT}) JSON's optional whitespace in llama.cpp's bounded amounts, and
 * the digits of the engine's unbounded integers and numbers bounded as llama.cpp bounds them
 * (json-object-grammar.ts). Bounds only narrow what is allowed, so the output stays valid.
 */
export function boundedJsonEbnf(ebnf: string): string {
  const out = ebnf
    .replaceAll(String.raw`",\ue000"`, `"," kiln_ws`)
    .replaceAll(String.raw`":\ue001"`, `":" kiln_ws`)
    .split("\n")
    .map((line) => {
      // A digit run the engine writes right-recursively: a fraction's or an exponent's digits.
      const run = /^(\w+) ::= \(\(\[0-9\] (\w+)\) \| \(\[0-9\]\)\)$/.exec(line);
      if (run && run[1] === run[2]) return `${run[1]} ::= [0-9]{1,16}`;
      // The integer part of the engine's integers and numbers.
      if (/^basic_(integer|number)\w* ::= /.test(line)) return line.replaceAll("[1-9] [0-9]*", "[1-9] [0-9]{0,15}");
      return line;
    })
    .join("\n");
  if (/\\ue00[01]/.test(out)) throw new Error("a separator marker was left in the schema's grammar");
  return out.replace(/\n?$/, "\n") + `kiln_ws ::= ${JSON_WS_EBNF}\n`;
}

/** A structural tag's JSON text for the engine, around a format. */
function structuralTag(format: unknown): string {
  return JSON.stringify({ type: "structural_tag", format });
}

/** EBNF whose root is exactly one of `choices`; every character outside printable ASCII is escaped. */
function choiceEbnf(choices: readonly string[]): string {
  const literal = (s: string): string => {
    let out = '"';
    for (const ch of s) {
      const cp = ch.codePointAt(0)!;
      if (ch === '"' || ch === "\\") out += "\\" + ch;
      else if (cp >= 0x20 && cp < 0x7f) out += ch;
      else if (cp <= 0xffff) out += "\\u" + cp.toString(16).padStart(4, "0");
      else out += "\\U" + cp.toString(16).padStart(8, "0");
    }
    return out + '"';
  };
  return "root ::= " + [...new Set(choices)].map(literal).join(" | ") + "\n";
}

function sameMask(a: Int32Array, b: Int32Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function engineMessage(e: unknown): string {
  const text = e instanceof Error ? e.message : String(e);
  return text.replace(/\. Build with -sASSERTIONS for more info\.?$/, "").trim() || "unknown engine error";
}
