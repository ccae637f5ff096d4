/**
 * GBNF grammars (llama.cpp's dialect, which vLLM's `guided_grammar` and its xgrammar backend take
 * too), parsed in plain JS and written back as EBNF the engine is known to accept. The engine aborts
 * on a grammar it cannot parse (a WASM abort that can corrupt its instance) and prints the reason
 * where no client sees it, so a grammar reaches it only as kiln's own rewriting of one this parser
 * accepted; anything else is a ConstraintError naming the line and column.
 *
 * The dialect: `name ::= alternatives`, one rule per line (a rule goes on past a line end inside
 * parentheses, after `::=` and after `|`); string literals, character classes (`[a-z]`, `[^"\\]`),
 * `.` for any character, rule references, groups, `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}`, and `#`
 * comments. Escapes are `\n`, `\r`, `\t`, `\\`, `\"`, `\[`, `\]`, `\-`, `\^`, `\xHH`, `\uHHHH`
 * and `\UHHHHHHHH`. Rule names take letters, digits, `-` and `_`. Left recursion is fine (the
 * engine is an Earley parser), an empty alternative matches the empty string.
 */
import { ConstraintError } from "./errors.js";

/** Longest grammar text accepted, in characters. */
export const MAX_GRAMMAR_CHARS = 32 * 1024;
/** Most rules in one grammar. */
export const MAX_GRAMMAR_RULES = 512;
/** Largest count in `{m,n}` of what holds a rule or a repetition: the engine writes out one rule per repetition. */
export const MAX_GRAMMAR_REPEAT = 128;
/**
 * Largest count of a plain element (a literal, a class, `.`, or a group of those): past 128 the
 * engine repeats it without writing it out, in about 2.4 s for a class of most characters on
 * SmolLM2's vocabulary whatever the count.
 */
export const MAX_PLAIN_REPEAT = 10_000;
/** What a plain element repeated past 128 counts for in {@link MAX_GRAMMAR_SIZE}: about its compile time's worth. */
const LONG_REPEAT_SIZE = 200;
/**
 * Most elements of a grammar with its counts multiplied out (`[a-z]{1,64}` is 64; a plain element
 * repeated past 128 is 200). The engine compiles a grammar on the model's grammar thread before
 * its request starts, in about 1-13 ms per element that matches many tokens (SmolLM2's
 * vocabulary, 2 cores), holding the model's other constrained requests meanwhile, so this bounds
 * that to a few seconds.
 */
export const MAX_GRAMMAR_SIZE = 512;
/** One element of a sequence. Characters are Unicode code points. */
export type GrammarItem =
  | { kind: "literal"; chars: number[] }
  | { kind: "class"; negated: boolean; ranges: Array<[number, number]> }
  | { kind: "any" }
  | { kind: "ref"; name: string; at: number }
  | { kind: "group"; alternatives: GrammarItem[][] }
  | { kind: "repeat"; item: GrammarItem; min: number; max: number | null };

/** A parsed grammar: its rules in the order written, each a list of alternatives. */
export interface Grammar {
  rules: Map<string, GrammarItem[][]>;
}

const MAX_CODE_POINT = 0x10ffff;
const NAME_CHAR = /[A-Za-z0-9_-]/;
const SIMPLE_ESCAPES: Record<string, number> = { n: 10, r: 13, t: 9, "\\": 92, '"': 34, "[": 91, "]": 93, "-": 45, "^": 94 };

/** Parses GBNF text and checks it (rules defined once, every reference defined, `root` present, the limits); throws ConstraintError. */
export function parseGbnf(text: string): Grammar {
  if (typeof text !== "string") throw new ConstraintError("the grammar must be a string", "", "grammar");
  if (text.length > MAX_GRAMMAR_CHARS)
    throw new ConstraintError(`the grammar is ${text.length} characters long; at most ${MAX_GRAMMAR_CHARS} are accepted`, "", "grammar");
  return new GbnfParser(text).grammar();
}

/** The grammar as EBNF for the engine: `root` first, every other rule renamed `rule-<n>` (names the engine's own generated `<name>_<n>` rules cannot take). */
export function engineEbnf(grammar: Grammar): string {
  const names = new Map<string, string>();
  let next = 0;
  for (const name of grammar.rules.keys()) names.set(name, name === "root" ? "root" : `rule-${next++}`);
  const item = (e: GrammarItem): string => {
    switch (e.kind) {
      case "literal":
        return `"${e.chars.map((c) => escaped(c, '"\\')).join("")}"`;
      case "class":
        return classEbnf(e.negated, e.ranges);
      case "any":
        // A negated class: the engine matches those as UTF-8 characters.
        return "[^\\u0000]";
      case "ref":
        return names.get(e.name)!;
      case "group":
        return `(${alternatives(e.alternatives)})`;
      case "repeat": {
        const inner =
          e.item.kind === "group" || e.item.kind === "literal" || e.item.kind === "class" || e.item.kind === "any" || e.item.kind === "ref"
            ? item(e.item)
            : `(${item(e.item)})`;
        if (e.min === 0 && e.max === null) return `${inner}*`;
        if (e.min === 1 && e.max === null) return `${inner}+`;
        if (e.min === 0 && e.max === 1) return `${inner}?`;
        return `${inner}{${e.min}${e.max === e.min ? "" : `,${e.max ?? ""}`}}`;
      }
    }
  };
  const sequence = (s: GrammarItem[]): string => (s.length === 0 ? '""' : s.map(item).join(" "));
  const alternatives = (alts: GrammarItem[][]): string => alts.map(sequence).join(" | ");
  const ordered = [...grammar.rules.entries()].sort(([a], [b]) => (a === "root" ? -1 : b === "root" ? 1 : 0));
  return ordered.map(([name, alts]) => `${names.get(name)} ::= ${alternatives(alts)}`).join("\n");
}

/** A code point inside an EBNF string or class: printable ASCII as itself (`special` ones escaped), the rest as \u or \U escapes. */
function escaped(c: number, special: string): string {
  const ch = String.fromCodePoint(c);
  if (c >= 0x20 && c < 0x7f) return special.includes(ch) ? `\\${ch}` : ch;
  return c <= 0xffff ? `\\u${c.toString(16).padStart(4, "0")}` : `\\U${c.toString(16).padStart(8, "0")}`;
}

function classChar(c: number): string {
  return escaped(c, "\\]-^[");
}

/**
 * A character class as the engine matches it. The engine reads a class member above U+007F as one
 * byte, not as a UTF-8 character (`[é]` would allow the lone byte 0xE9), and ignores such members
 * of a negated class. So a class that holds none is written as it is (the engine matches a negated
 * ASCII class against whole UTF-8 characters), and any other as the ASCII members it allows beside
 * the UTF-8 byte sequences of the non-ASCII characters it allows, one byte class per byte.
 */
function classEbnf(negated: boolean, ranges: ReadonlyArray<[number, number]>): string {
  const byteClass = (parts: ReadonlyArray<[number, number]>, not = false) =>
    `[${not ? "^" : ""}${parts.map(([lo, hi]) => (lo === hi ? classChar(lo) : `${classChar(lo)}-${classChar(hi)}`)).join("")}]`;
  if (ranges.every(([, hi]) => hi < 0x80)) return byteClass(ranges, negated);
  const allowed = negated ? complement(ranges) : ranges.filter(([lo, hi]) => !(lo === 0 && hi === 0));
  const ascii = allowed.filter(([lo]) => lo < 0x80).map(([lo, hi]): [number, number] => [lo, Math.min(hi, 0x7f)]);
  const sequences: Array<Array<[number, number]>> = [];
  for (const [lo, hi] of allowed) if (hi >= 0x80) utf8Sequences(Math.max(lo, 0x80), hi, sequences);
  // A class of one member above U+007F is read as that character, UTF-8 encoded, not as a byte: written twice, it stays a byte.
  const oneByte = ([lo, hi]: [number, number]) => (lo === hi ? `[${classChar(lo)}${classChar(lo)}]` : byteClass([[lo, hi]]));
  const parts = [...(ascii.length > 0 ? [[byteClass(ascii)]] : []), ...sequences.map((seq) => seq.map(oneByte))];
  // One class alone stands as it is; anything longer is grouped, so that a count after it applies to the whole character.
  return parts.length === 1 && parts[0].length === 1 ? parts[0][0] : `(${parts.map((p) => p.join(" ")).join(" | ")})`;
}

/** The code points outside `ranges`, NUL and the surrogates left out, as ascending ranges. */
export function complement(ranges: ReadonlyArray<[number, number]>): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  let next = 1;
  for (const [lo, hi] of [...ranges].sort((a, b) => a[0] - b[0])) {
    if (lo > next) out.push([next, lo - 1]);
    next = Math.max(next, hi + 1);
  }
  if (next <= MAX_CODE_POINT) out.push([next, MAX_CODE_POINT]);
  return out;
}

/**
 * Appends to `out` the UTF-8 encodings of the code points lo..hi (above U+007F; surrogates
 * skipped) as sequences of byte ranges, each sequence's bytes independent of one another: the
 * range is split where the encoded length changes, and where a continuation byte would not run
 * over all of 0x80..0xBF (as Go's and Rust's regex engines compile Unicode classes).
 */
export function utf8Sequences(lo: number, hi: number, out: Array<Array<[number, number]>>): void {
  if (lo > hi) return;
  if (lo <= 0xdfff && hi >= 0xd800) {
    utf8Sequences(lo, 0xd7ff, out);
    utf8Sequences(0xe000, hi, out);
    return;
  }
  for (const max of [0x7f, 0x7ff, 0xffff]) {
    if (lo <= max && hi > max) {
      utf8Sequences(lo, max, out);
      utf8Sequences(max + 1, hi, out);
      return;
    }
  }
  const length = utf8Bytes(lo).length;
  for (let i = 1; i < length; i++) {
    const low = (1 << (6 * i)) - 1;
    if (Math.floor(lo / (low + 1)) === Math.floor(hi / (low + 1))) continue;
    if ((lo & low) !== 0) {
      utf8Sequences(lo, lo | low, out);
      utf8Sequences((lo | low) + 1, hi, out);
      return;
    }
    if ((hi & low) !== low) {
      utf8Sequences(lo, (hi & ~low) - 1, out);
      utf8Sequences(hi & ~low, hi, out);
      return;
    }
  }
  const [a, b] = [utf8Bytes(lo), utf8Bytes(hi)];
  out.push(a.map((byte, i): [number, number] => [byte, b[i]]));
}

function utf8Bytes(c: number): number[] {
  return [...new TextEncoder().encode(String.fromCodePoint(c))];
}

/** Elements of `item` with its counts multiplied out (a reference counts once: the rule is compiled once). */
/** A literal, a class, `.`, or a group of those: no rule, no repetition inside. */
function plain(item: GrammarItem): boolean {
  if (item.kind === "group") return item.alternatives.every((seq) => seq.every(plain));
  return item.kind === "literal" || item.kind === "class" || item.kind === "any";
}

function expandedSize(item: GrammarItem): number {
  switch (item.kind) {
    case "group":
      return item.alternatives.reduce((n, seq) => n + seq.reduce((m, e) => m + expandedSize(e), 0), 0);
    case "repeat": {
      const count = Math.max(1, item.max ?? item.min);
      return count > MAX_GRAMMAR_REPEAT ? LONG_REPEAT_SIZE : expandedSize(item.item) * count;
    }
    default:
      return 1;
  }
}

/**
 * The rules that derive some finite text: those with an alternative whose every element can end
 * (a literal, class or `.`, a repetition that may be empty, a group with such an alternative, or a
 * rule already found to end), found by repeating until nothing is added. A rule outside the set
 * only ever calls itself again (`root ::= "a" root`): the engine would sample it until the tokens
 * run out.
 */
export function endingRules(rules: ReadonlyMap<string, GrammarItem[][]>): Set<string> {
  const ending = new Set<string>();
  const ends = (item: GrammarItem): boolean => {
    switch (item.kind) {
      case "ref":
        return ending.has(item.name);
      case "group":
        return item.alternatives.some((alt) => alt.every(ends));
      case "repeat":
        return item.min === 0 || ends(item.item);
      default:
        return true;
    }
  };
  for (let grew = true; grew; ) {
    grew = false;
    for (const [name, alternatives] of rules) {
      if (!ending.has(name) && alternatives.some((alt) => alt.every(ends))) {
        ending.add(name);
        grew = true;
      }
    }
  }
  return ending;
}

class GbnfParser {
  private pos = 0;
  private readonly rules = new Map<string, GrammarItem[][]>();
  /** Where each rule was defined, for the duplicate's message. */
  private readonly definedAt = new Map<string, number>();
  private refs: Array<{ name: string; at: number }> = [];

  constructor(private readonly text: string) {}

  grammar(): Grammar {
    if (this.text.includes("\0")) this.fail("the grammar holds a NUL character", this.text.indexOf("\0"));
    this.space(true);
    while (this.pos < this.text.length) {
      this.rule();
      this.space(true);
    }
    if (this.rules.size === 0) this.fail("the grammar defines no rule", 0);
    if (!this.rules.has("root")) this.fail('the grammar has no "root" rule, where the output starts', 0);
    for (const ref of this.refs) if (!this.rules.has(ref.name)) this.fail(`rule "${ref.name}" is used but never defined`, ref.at);
    const ending = endingRules(this.rules);
    if (!ending.has("root")) {
      const endless = [...this.rules.keys()].filter((name) => !ending.has(name));
      this.fail(
        `rule "root" derives no text that ends: each of its alternatives goes on into a rule that never ends (${endless.map((n) => `"${n}"`).join(", ")}); give one of them an alternative without itself`,
        this.definedAt.get("root")!,
      );
    }
    const size = [...this.rules.values()].reduce((n, alts) => n + expandedSize({ kind: "group", alternatives: alts }), 0);
    if (size > MAX_GRAMMAR_SIZE) {
      throw new ConstraintError(
        `the grammar expands to ${size} elements with its counts multiplied out; at most ${MAX_GRAMMAR_SIZE} are accepted`,
        "",
        "grammar",
      );
    }
    return { rules: this.rules };
  }

  private rule(): void {
    const start = this.pos;
    const name = this.name();
    if (name === "") this.fail("expected a rule name", start);
    if (this.rules.has(name)) this.fail(`rule "${name}" is defined twice (first at ${this.where(this.definedAt.get(name)!)})`, start);
    if (this.rules.size >= MAX_GRAMMAR_RULES) this.fail(`the grammar has more than ${MAX_GRAMMAR_RULES} rules`, start);
    this.space(false);
    if (!this.text.startsWith("::=", this.pos)) this.fail('expected "::=" after the rule name', this.pos);
    this.pos += 3;
    this.space(true);
    this.definedAt.set(name, start);
    this.rules.set(name, this.alternatives(false));
    if (this.pos < this.text.length) {
      if (this.text[this.pos] === "\r") this.pos++;
      if (this.text[this.pos] !== "\n") this.fail(`expected the end of the line after rule "${name}", found ${this.describeHere()}`, this.pos);
      this.pos++;
    }
  }

  private alternatives(nested: boolean): GrammarItem[][] {
    const alts = [this.sequence(nested)];
    while (this.text[this.pos] === "|") {
      this.pos++;
      this.space(true);
      alts.push(this.sequence(nested));
    }
    return alts;
  }

  private sequence(nested: boolean): GrammarItem[] {
    const items: GrammarItem[] = [];
    for (;;) {
      const c = this.text[this.pos];
      const start = this.pos;
      if (c === '"') {
        this.pos++;
        items.push({ kind: "literal", chars: this.literal() });
      } else if (c === "[") {
        this.pos++;
        items.push(this.charClass(start));
      } else if (c === ".") {
        this.pos++;
        items.push({ kind: "any" });
      } else if (c === "(") {
        this.pos++;
        this.space(true);
        const alternatives = this.alternatives(true);
        if (this.text[this.pos] !== ")") this.fail(`expected ")" to close the group opened at ${this.where(start)}, found ${this.describeHere()}`, this.pos);
        this.pos++;
        items.push({ kind: "group", alternatives });
      } else if (c === "*" || c === "+" || c === "?" || c === "{") {
        const last = items.pop();
        if (last === undefined) this.fail(`"${c}" must follow an element it repeats`, start);
        this.pos++;
        const [min, max] = c === "*" ? [0, null] : c === "+" ? [1, null] : c === "?" ? [0, 1] : this.counts(start);
        const most = Math.max(min, max ?? 0);
        if (most > MAX_PLAIN_REPEAT) this.fail(`counts above ${MAX_PLAIN_REPEAT} are not accepted`, start);
        if (most > MAX_GRAMMAR_REPEAT && !plain(last!)) {
          this.fail(`counts above ${MAX_GRAMMAR_REPEAT} are accepted only on a literal, a class, "." or a group of those`, start);
        }
        items.push({ kind: "repeat", item: last!, min, max });
      } else if (c !== undefined && NAME_CHAR.test(c)) {
        const name = this.name();
        items.push({ kind: "ref", name, at: start });
        this.refs.push({ name, at: start });
      } else {
        return items;
      }
      this.space(nested);
    }
  }

  private literal(): number[] {
    const start = this.pos - 1;
    const chars: number[] = [];
    for (;;) {
      if (this.pos >= this.text.length) this.fail("the string literal is not closed", start);
      const cp = this.text.codePointAt(this.pos)!;
      if (cp === 0x22) {
        this.pos++;
        return chars;
      }
      chars.push(this.char());
    }
  }

  private charClass(start: number): GrammarItem {
    let negated = false;
    if (this.text[this.pos] === "^") {
      negated = true;
      this.pos++;
    }
    const ranges: Array<[number, number]> = [];
    while (this.text[this.pos] !== "]") {
      if (this.pos >= this.text.length) this.fail('the character class is not closed with "]"', start);
      const at = this.pos;
      const lo = this.char(true);
      let hi = lo;
      if (this.text[this.pos] === "-" && this.text[this.pos + 1] !== "]" && this.pos + 1 < this.text.length) {
        this.pos++;
        hi = this.char(true);
        if (hi < lo) this.fail(`the range ${String.fromCodePoint(lo)}-${String.fromCodePoint(hi)} goes backwards`, at);
      }
      ranges.push([lo, hi]);
    }
    this.pos++;
    // NUL may be named (excluded, as JSON's grammars do), but never written.
    if (!negated && ranges.every(([lo, hi]) => lo === 0 && hi === 0)) this.fail("the character class matches no character", start);
    return ranges.length === 0 ? { kind: "any" } : { kind: "class", negated, ranges };
  }

  /** One character of a literal or class, an escape included; its code point (NUL only in a class). */
  private char(inClass = false): number {
    const at = this.pos;
    const cp = this.text.codePointAt(this.pos)!;
    if (cp !== 0x5c) {
      if (cp >= 0xd800 && cp <= 0xdfff) this.fail("a lone surrogate is not a character", at);
      this.pos += cp > 0xffff ? 2 : 1;
      return cp;
    }
    const kind = this.text[this.pos + 1];
    if (kind === undefined) this.fail("the grammar ends inside an escape", at);
    if (Object.prototype.hasOwnProperty.call(SIMPLE_ESCAPES, kind)) {
      this.pos += 2;
      return SIMPLE_ESCAPES[kind];
    }
    const digits = kind === "x" ? 2 : kind === "u" ? 4 : kind === "U" ? 8 : 0;
    if (digits === 0) this.fail(`unknown escape "\\${kind}"`, at);
    const hex = this.text.slice(this.pos + 2, this.pos + 2 + digits);
    if (!new RegExp(`^[0-9A-Fa-f]{${digits}}$`).test(hex)) this.fail(`"\\${kind}" takes ${digits} hexadecimal digits`, at);
    const value = parseInt(hex, 16);
    if (value === 0 && !inClass) this.fail("a string cannot hold a NUL character", at);
    if (value > MAX_CODE_POINT || (value >= 0xd800 && value <= 0xdfff)) this.fail(`"\\${kind}${hex}" is not a Unicode character`, at);
    this.pos += 2 + digits;
    return value;
  }

  /** `{m}`, `{m,}` or `{m,n}`, after the "{". */
  private counts(start: number): [number, number | null] {
    const number = (): number | null => {
      const m = /^[0-9]+/.exec(this.text.slice(this.pos, this.pos + 12));
      if (!m) return null;
      this.pos += m[0].length;
      return Number(m[0]);
    };
    this.space(true);
    const min = number();
    if (min === null) this.fail('"{" takes a count: {m}, {m,} or {m,n}', start);
    this.space(true);
    let max: number | null = min;
    if (this.text[this.pos] === ",") {
      this.pos++;
      this.space(true);
      max = number();
      this.space(true);
    }
    if (this.text[this.pos] !== "}") this.fail('expected "}" to close the count', this.pos);
    this.pos++;
    if (max !== null && max < min!) this.fail(`the count {${min},${max}} has its maximum below its minimum`, start);
    return [min!, max];
  }

  private name(): string {
    const start = this.pos;
    while (this.pos < this.text.length && NAME_CHAR.test(this.text[this.pos])) this.pos++;
    return this.text.slice(start, this.pos);
  }

  /** Skips blanks and comments, and line ends where `newlines` allows them. */
  private space(newlines: boolean): void {
    while (this.pos < this.text.length) {
      const c = this.text[this.pos];
      if (c === " " || c === "\t") this.pos++;
      else if (c === "#") while (this.pos < this.text.length && this.text[this.pos] !== "\n" && this.text[this.pos] !== "\r") this.pos++;
      else if (newlines && (c === "\n" || c === "\r")) this.pos++;
      else return;
    }
  }

  private describeHere(): string {
    if (this.pos >= this.text.length) return "the end of the grammar";
    const c = this.text[this.pos];
    return c === "\n" || c === "\r" ? "the end of the line" : JSON.stringify(String.fromCodePoint(this.text.codePointAt(this.pos)!));
  }

  /** "line L, column C" of a position (both from 1). */
  private where(at: number): string {
    const before = this.text.slice(0, at);
    const line = before.split("\n").length;
    return `line ${line}, column ${at - before.lastIndexOf("\n")}`;
  }

  private fail(message: string, at: number): never {
    throw new ConstraintError(`${this.where(at)}: ${message}`, "", "grammar");
  }
}
