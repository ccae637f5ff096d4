/**
 * The regular-expression dialect kiln enforces, checked in plain JS before a pattern reaches the
 * engine. web-xgrammar 0.1.27 turns a pattern into a grammar with its own parser, which aborts the
 * WASM instance on many inputs a JS or Python regex accepts (`a|`, `(?<n1>x)`, `{,3}`, `[]`, ...)
 * and silently mis-reads others (an anchor mid-pattern is dropped, `\0` matches nothing, `[\^]`
 * matches anything, character classes with non-ASCII members or ranges, `.` among them, do not
 * match those characters, `\s` adds a no-break space it writes as a lone byte, and `\S` refuses "["
 * too). Found by trying each construct on the engine; each is refused here, naming the construct
 * and where it is, except `.`, `\s` and `\S`, which {@link engineRegex} rewrites into forms the
 * engine gets right, and non-ASCII class members, which a schema's pattern has written out as
 * alternatives ({@link schemaEnginePattern}). A schema's pattern matches a string the engine writes
 * as JSON text, so there a character JSON holds only escaped (a control character, `"`, `\`) is
 * matched as its escape.
 *
 * What is accepted: literals (any Unicode); `.` (any character but a newline, as in Python);
 * classes (`[a-z_]`, `[^"\n]`, with `\d \w \s` inside; non-ASCII members and ranges, `[à-ÿ]`,
 * in a schema's pattern when not negated and of at most {@link MAX_WRITTEN_OUT} such characters;
 * in a constraint's own pattern any, and `\D \W \S` inside); `\d \D \w \W \s \S`
 * outside classes; the escapes `\n \r \t \f \v \a`, `\b` in a class, `\xHH \uHHHH \u{H...}
 * \UHHHHHHHH \cX` and escaped punctuation; groups `(...)`, `(?:...)` and `(?<name>...)` (letters
 * only); alternation; quantifiers `* + ? {n} {n,} {n,m}` (lazy forms too, which mean the same here);
 * and `^`/`$` at the pattern's ends (the whole output must match anyway). `\s` is ASCII white space.
 */

import { complement, engineEbnf, type GrammarItem } from "./gbnf.js";

/** Largest count in a `{n,m}` repetition: compile time grows with it (`[^\n]{1,64}` ≈ 2.6 s, `{1,256}` ≈ 7.7 s). */
export const MAX_REPEAT_BOUND = 64;
/**
 * Largest count of a long repetition, in a constraint's own pattern: a repetition past
 * {@link MAX_REPEAT_BOUND} of a character, a class or a group with nothing repeated inside it, in
 * no repeated group. kiln hands such a pattern to the engine as a grammar, whose compile time stays
 * flat past 128 (`[^\n]{1,3000}` in about 2.4 s, `(ab|c){1,3000}` in 16 ms on SmolLM2's vocabulary).
 */
export const MAX_LONG_REPEAT_BOUND = 10_000;
/** Most long repetitions in one pattern: each can cost seconds of compiling. */
export const MAX_LONG_REPEATS = 4;
/** Largest product of the counts of nested repetitions (`(a{8}){8}` is 64). */
export const MAX_REPEAT_PRODUCT = 256;

/** Why the engine cannot enforce `pattern`, naming the construct and its index, or undefined when it can. */
export function regexProblem(pattern: string): string | undefined {
  return attempt(() => new RegexScan(pattern, true).run());
}

/**
 * Like {@link regexProblem}, for a pattern the engine converts without kiln's rewriting (a JSON
 * schema's `pattern`): `\S` outside a class is refused too, as the engine would mis-enforce it.
 */
export function schemaPatternProblem(pattern: string): string | undefined {
  return attempt(() => new RegexScan(pattern, false).run());
}

/**
 * How the engine must be given a pattern {@link regexProblem} accepts: as a regex
 * ({@link engineRegex}), or, for a pattern with a class the engine's regex converter would read as
 * bytes (a non-ASCII member, or `\D \W \S` inside a class), as kiln's own EBNF for it, written by
 * gbnf.ts, which encodes such classes as whole UTF-8 characters.
 */
export function enginePattern(pattern: string): { regex: string } | { ebnf: string } {
  const scan = new RegexScan(pattern, true);
  scan.run();
  if (!scan.wideClasses && scan.longRepeats === 0) return { regex: engineRegex(pattern) };
  return { ebnf: engineEbnf({ rules: new Map([["root", scan.alternatives]]) }) };
}

/**
 * The pattern as the engine must be given it, for a pattern {@link regexProblem} accepts: `.`
 * becomes `[^\n]` (any character but a newline, as in Python; the engine's own `.` cannot produce
 * non-ASCII characters), and `\s` (in or outside a class) and `\S` outside a class are written
 * as classes of ASCII white space.
 */
export function engineRegex(pattern: string): string {
  const scan = new RegexScan(pattern, true);
  scan.run();
  return rewritten(pattern, scan.rewrites);
}

/**
 * A schema's `pattern`, one {@link schemaPatternProblem} accepts, as the engine's JSON-schema
 * compiler must be given it, matching the string's JSON text: each class with non-ASCII members
 * written out (`[a-zé]` as `(?:[a-z]|é)`); each character a JSON string holds only escaped, as a
 * literal, in a class or in `\s`, matched as its escape (`"` as `\\"`, a newline as `\\n`).
 */
export function schemaEnginePattern(pattern: string): string {
  const scan = new RegexScan(pattern, false);
  scan.run();
  return rewritten(pattern, scan.rewrites);
}

/** What a schema pattern matches, as length bounds can be weighed against it. */
export interface PatternShape {
  /** Fewest characters a match has. */
  min: number;
  /** Most characters a match has; null when unbounded. */
  max: number | null;
  /** For a pattern that is one class repeated (`^[a-z]+$`, `\\w{2,}`): the class, as JSON text holds it raw, and its counts. */
  repeated?: { item: Extract<GrammarItem, { kind: "class" }>; min: number; max: number | null };
}

/** The {@link PatternShape} of a pattern {@link schemaPatternProblem} accepts. */
export function schemaPatternShape(pattern: string): PatternShape {
  const scan = new RegexScan(pattern, false);
  scan.run();
  const [min, max] = lengthsOf(scan.alternatives);
  const only = scan.alternatives.length === 1 && scan.alternatives[0].length === 1 ? scan.alternatives[0][0] : undefined;
  const repeat = only?.kind === "repeat" ? only : only?.kind === "class" ? { item: only, min: 1, max: 1 } : undefined;
  // One character repeated (`^x+$`) is the class of that character.
  const one = repeat?.item.kind === "literal" && repeat.item.chars.length === 1 ? repeat.item.chars[0] : undefined;
  const cls =
    one !== undefined ? { kind: "class" as const, negated: false, ranges: [[one, one]] as Ranges } : repeat?.item.kind === "class" ? repeat.item : undefined;
  if (repeat === undefined || cls === undefined) return { min, max };
  // Characters JSON holds only escaped cannot be one character of the text: a negated class leaves them out too, a positive one loses them.
  const item = cls.negated ? { ...cls, ranges: [...cls.ranges, ...NOT_RAW_IN_JSON] } : { ...cls, ranges: without(cls.ranges, NOT_RAW_IN_JSON) };
  if (item.ranges.length === 0) return { min, max };
  return { min, max, repeated: { item, min: repeat.min, max: repeat.max } };
}

/** The least and most characters of alternatives (null: unbounded). */
function lengthsOf(alternatives: GrammarItem[][]): [number, number | null] {
  let min = Infinity;
  let max: number | null = 0;
  for (const seq of alternatives) {
    let lo = 0;
    let hi: number | null = 0;
    for (const item of seq) {
      const [a, b] = lengthOf(item);
      lo += a;
      hi = hi === null || b === null ? null : hi + b;
    }
    min = Math.min(min, lo);
    max = max === null || hi === null ? null : Math.max(max, hi);
  }
  return [min === Infinity ? 0 : min, max];
}

function lengthOf(item: GrammarItem): [number, number | null] {
  switch (item.kind) {
    case "literal":
      return [item.chars.length, item.chars.length];
    case "group":
      return lengthsOf(item.alternatives);
    case "repeat": {
      const [a, b] = lengthOf(item.item);
      return [a * item.min, item.max === null || b === null ? null : b * item.max];
    }
    default:
      return [1, 1];
  }
}

function rewritten(pattern: string, rewrites: ReadonlyArray<[number, number, string]>): string {
  let out = "";
  let from = 0;
  for (const [start, end, text] of rewrites) {
    out += pattern.slice(from, start) + text;
    from = end;
  }
  return out + pattern.slice(from);
}

/** Most non-ASCII characters of one class a schema's pattern has written out as alternatives (`[À-ÿ]` is 64). */
export const MAX_WRITTEN_OUT = 256;

/**
 * A class's ASCII members as the engine reads them: printable ones as themselves (`] \ ^ - [`
 * escaped), others as \xHH, those last, since the engine reads every hex digit after `\x` (`\x2da`
 * would be one character).
 */
function asciiClassText(ranges: Ranges): string {
  const one = (cp: number): string => {
    const ch = String.fromCharCode(cp);
    if (cp < 0x20 || cp >= 0x7f) return `\\x${cp.toString(16).padStart(2, "0")}`;
    return "]\\^-[".includes(ch) ? "\\" + ch : ch;
  };
  const plain: string[] = [];
  const hex: string[] = [];
  for (const [lo, hi] of ranges) {
    const text = lo === hi ? one(lo) : `${one(lo)}-${one(hi)}`;
    (/\\x[0-9a-f]{2}$/.test(text) ? hex : plain).push(text);
  }
  return plain.join("") + hex.join("");
}

/** What a JSON string cannot hold unescaped: control characters, the quote and the backslash. */
const NOT_RAW_IN_JSON: Ranges = [
  [0x00, 0x1f],
  [0x22, 0x22],
  [0x5c, 0x5c],
];

/** Whether `ranges` and `other` share a code point. */
function overlaps(ranges: Ranges, other: Ranges): boolean {
  return ranges.some(([lo, hi]) => other.some(([olo, ohi]) => lo <= ohi && olo <= hi));
}

/** `ranges` less `cut`. */
function without(ranges: Ranges, cut: Ranges): Ranges {
  let out = ranges.map(([lo, hi]): [number, number] => [lo, hi]);
  for (const [clo, chi] of cut) {
    out = out.flatMap(([lo, hi]): Ranges => {
      if (hi < clo || lo > chi) return [[lo, hi]];
      const kept: Ranges = [];
      if (lo < clo) kept.push([lo, clo - 1]);
      if (hi > chi) kept.push([chi + 1, hi]);
      return kept;
    });
  }
  return out;
}

/**
 * A character as a schema pattern must match it in JSON text, where the engine writes the string:
 * itself, or, for one a JSON string holds only escaped, its escape (`"` as `\"`, a newline as `\n`),
 * as a regex group.
 */
function jsonTextOf(cp: number): string | undefined {
  if (!NOT_RAW_IN_JSON.some(([lo, hi]) => cp >= lo && cp <= hi)) return undefined;
  const short: Record<number, string> = { 0x22: '"', 0x5c: "\\\\", 8: "b", 9: "t", 10: "n", 12: "f", 13: "r" };
  return `(?:\\\\${short[cp] ?? "u" + cp.toString(16).padStart(4, "0")})`;
}

/**
 * A schema pattern's class of ASCII members as alternatives of JSON text: the members a JSON string
 * holds raw as one class, and each other member as its escape (`["a]` as `[a]|(?:\\")`).
 */
function jsonClassParts(ranges: Ranges): string[] {
  const raw = without(ranges, NOT_RAW_IN_JSON);
  const parts = raw.length > 0 ? [`[${asciiClassText(raw)}]`] : [];
  for (const [lo, hi] of ranges) for (let cp = lo; cp <= hi; cp++) if (jsonTextOf(cp) !== undefined) parts.push(jsonTextOf(cp)!);
  return parts;
}

/** White space (`\s`, ASCII) in a schema pattern, as JSON text writes it: a space or an escape. */
const JSON_TEXT_SPACE = String.raw`(?: |\\[tnrf]|\\u000b)`;
/** `\s` as the engine must be given it in a constraint's own pattern: ASCII white space only (the engine's own adds a no-break space it writes as a lone byte). */
const ASCII_SPACE_MEMBERS = String.raw`\t\n\x0b\f\r `;

class RegexFault extends Error {}

function attempt(run: () => void): string | undefined {
  try {
    run();
    return undefined;
  } catch (e) {
    if (e instanceof RegexFault) return e.message;
    throw e;
  }
}

type Item =
  | { kind: "anchor"; char: "^" | "$"; at: number }
  | { kind: "atom"; at: number; quantified: boolean; repeats?: boolean; count: number; group?: Item[][]; node: GrammarItem };

type Ranges = Array<[number, number]>;

/** What `\d`, `\w` and `\s` match (ASCII, as kiln's regexes read them); the capitals match the rest. */
const CLASS_ESCAPES: Record<string, Ranges> = {
  d: [[48, 57]],
  w: [
    [48, 57],
    [65, 90],
    [95, 95],
    [97, 122],
  ],
  s: [
    [9, 13],
    [32, 32],
  ],
};

function classEscapeItem(c: string): GrammarItem {
  const lower = c.toLowerCase();
  return { kind: "class", negated: c !== lower, ranges: CLASS_ESCAPES[lower] };
}

/** The grammar of alternatives of scanned items (anchors match nothing: the whole output must match anyway). */
function grammarOf(alt: Item[][]): GrammarItem[][] {
  return alt.map((seq) => seq.flatMap((it) => (it.kind === "atom" ? [it.node] : [])));
}

const HEX = /^[0-9A-Fa-f]$/;
const QUANTIFIERS = "*+?{";

class RegexScan {
  private i = 0;
  /** Replacements [start, end, text], in order. */
  readonly rewrites: Array<[number, number, string]> = [];
  /** The pattern has a class the engine's regex converter reads as bytes (see {@link enginePattern}). */
  wideClasses = false;
  /** Long repetitions (past {@link MAX_REPEAT_BOUND}), which the engine's regex converter would unroll. */
  longRepeats = 0;
  /** The class being scanned has a non-ASCII member (a schema's pattern writes it out). */
  private classWide = false;
  /** The pattern as grammar alternatives, once scanned. */
  alternatives: GrammarItem[][] = [];

  constructor(
    private readonly src: string,
    private readonly rewriting: boolean,
  ) {}

  run(): void {
    const src = this.src;
    if (src.length === 0) throw new RegexFault("the pattern is empty");
    const surrogate = /\p{Cs}/u.exec(src);
    if (surrogate) this.fail(surrogate.index, "a lone surrogate (not valid Unicode)");
    const nul = src.indexOf("\0");
    if (nul >= 0) this.fail(nul, "a NUL character, which the engine cannot match");
    const alt = this.alternation(false);
    if (this.i < src.length) this.fail(this.i, "an unmatched ')'");
    this.anchors(alt, true, true);
    this.products(alt, 1);
    this.alternatives = grammarOf(alt);
  }

  private fail(at: number, what: string, hint = ""): never {
    throw new RegexFault(`${what} at index ${at} is not supported${hint ? `; ${hint}` : ""}`);
  }

  private alternation(inGroup: boolean): Item[][] {
    const seqs: Item[][] = [];
    const starts: number[] = [];
    for (;;) {
      starts.push(this.i);
      seqs.push(this.sequence());
      if (this.src[this.i] !== "|") break;
      this.i++;
    }
    if (seqs.length > 1) {
      seqs.forEach((seq, k) => {
        if (seq.some((it) => it.kind === "atom")) return;
        // The engine takes an empty last alternative of a group, `(a|)`, and no other.
        if (inGroup && k === seqs.length - 1 && seq.length === 0) return;
        this.fail(starts[k], "an empty alternative", "write (?:a)? for an optional a");
      });
    }
    return seqs;
  }

  private sequence(): Item[] {
    const src = this.src;
    const items: Item[] = [];
    while (this.i < src.length) {
      const at = this.i;
      const c = src[at];
      if (c === "|" || c === ")") break;
      if (QUANTIFIERS.includes(c)) {
        this.quantifier(items.at(-1));
        continue;
      }
      if (c === "^" || c === "$") {
        items.push({ kind: "anchor", char: c, at });
        this.i++;
        continue;
      }
      let node: GrammarItem;
      let group: Item[][] | undefined;
      if (c === "(") {
        group = this.group();
        node = { kind: "group", alternatives: grammarOf(group) };
      } else if (c === "[") node = this.charClass();
      else if (c === "\\") node = this.escape();
      else if (c === ".") {
        if (this.rewriting) this.rewrites.push([at, at + 1, "[^\\n]"]);
        this.i++;
        node = { kind: "class", negated: true, ranges: [[10, 10]] };
      } else {
        node = { kind: "literal", chars: [src.codePointAt(at)!] };
        this.i += codePointLength(src, at);
        this.jsonLiteral(at, src.codePointAt(at)!);
      }
      items.push({ kind: "atom", at, quantified: false, count: 1, node, ...(group ? { group } : {}) });
    }
    return items;
  }

  private quantifier(prev: Item | undefined): void {
    const src = this.src;
    const at = this.i;
    const c = src[at];
    if (c === "{" && !/^\{[0-9]+(,[0-9]*)?\}/.test(src.slice(at))) {
      this.fail(at, "a '{' that does not start a repetition {n}, {n,} or {n,m}", "escape a literal brace as \\{");
    }
    if (prev === undefined || prev.kind === "anchor") this.fail(at, `a quantifier '${c}' with nothing to repeat`);
    if (prev.quantified) this.fail(at, `a second quantifier '${c}' in a row`, "wrap the first in a group: (?:a+)*");
    prev.quantified = true;
    let [min, max]: [number, number | null] = c === "*" ? [0, null] : c === "+" ? [1, null] : [0, 1];
    if (c === "{") {
      const m = /^\{([0-9]+)(,([0-9]*))?\}/.exec(src.slice(at))!;
      const lo = Number(m[1]);
      const hi = m[2] === undefined ? lo : m[3] === "" ? lo : Number(m[3]);
      if (hi < lo) this.fail(at, `a repetition ${m[0]} whose bounds are out of order`);
      const most = Math.max(lo, hi);
      if (most > MAX_REPEAT_BOUND) {
        if (!this.rewriting) this.fail(at, `a repetition count over ${MAX_REPEAT_BOUND} (${m[0]})`, "compile time grows steeply with it");
        if (most > MAX_LONG_REPEAT_BOUND) this.fail(at, `a repetition count over ${MAX_LONG_REPEAT_BOUND} (${m[0]})`);
        if (prev.group && repeatsInside(prev.group)) {
          this.fail(at, `a repetition count over ${MAX_REPEAT_BOUND} (${m[0]}) of a group with a repetition inside`, "compile time grows steeply with it");
        }
        if (++this.longRepeats > MAX_LONG_REPEATS) this.fail(at, `more than ${MAX_LONG_REPEATS} repetitions with counts over ${MAX_REPEAT_BOUND}`);
      }
      prev.count = Math.max(lo, hi, 1);
      [min, max] = [lo, m[2] !== undefined && m[3] === "" ? null : hi];
      this.i += m[0].length;
    } else {
      this.i++;
    }
    prev.node = { kind: "repeat", item: prev.node, min, max };
    prev.repeats = max === null || max > 1;
    if (src[this.i] === "?") this.i++; // lazy: the same set of outputs
  }

  private group(): Item[][] {
    const src = this.src;
    const at = this.i;
    this.i++;
    if (src[this.i] === "?") {
      const rest = src.slice(this.i + 1);
      if (rest.startsWith(":")) {
        this.i += 2;
      } else if (rest.startsWith("=") || rest.startsWith("!")) {
        this.fail(at, `a lookahead (?${rest[0]}...)`);
      } else if (rest.startsWith("<=") || rest.startsWith("<!")) {
        this.fail(at, `a lookbehind (?${rest.slice(0, 2)}...)`);
      } else if (rest.startsWith("<")) {
        const m = /^<([^>]*)>/.exec(rest);
        if (!m || !/^[A-Za-z]+$/.test(m[1])) this.fail(at, "a group name other than letters A-Z, a-z", "name it with letters only, or use (?:...)");
        this.i += 1 + m![0].length;
      } else if (rest.startsWith("P")) {
        this.fail(at, "a Python-style group (?P...)", "write (?<name>...)");
      } else if (rest.startsWith("#")) {
        this.fail(at, "a comment group (?#...)");
      } else {
        this.fail(at, "an inline flag or group modifier (?...)", "flags such as i, m, s, x cannot be set");
      }
    }
    const alt = this.alternation(true);
    if (src[this.i] !== ")") this.fail(at, "an unclosed group '('");
    this.i++;
    return alt;
  }

  /**
   * `[...]`. The engine's regex converter reads a class member above U+007F as a byte, so a class
   * with one (or with `\D \W \S`, which span them) is refused in a schema's pattern, and in a
   * constraint's own pattern sends the whole pattern through kiln's grammar ({@link enginePattern}).
   */
  private charClass(): GrammarItem {
    const src = this.src;
    const at = this.i;
    this.i++;
    if (src[this.i] === "]") this.fail(at, "an empty character class []");
    const negated = src[this.i] === "^";
    if (negated) this.i++;
    // After `[` (or `[^`), the engine reads an escaped ^ as negation.
    else if (src.startsWith("\\^", this.i))
      this.fail(this.i, "an escaped '^' first in a class (the engine reads it as negation)", "put it later in the class: [a^]");
    const ranges: Ranges = [];
    while (this.i < src.length && src[this.i] !== "]") {
      const start = this.i;
      if (src.startsWith("[:", start) || src.startsWith("[=", start) || src.startsWith("[.", start)) {
        this.fail(start, "a POSIX class [:...:] inside a class");
      }
      const member = src[start] === "\\" ? this.classEscape() : this.classLiteral();
      if (src[this.i] === "-" && this.i + 1 < src.length && src[this.i + 1] !== "]") {
        // A range: both ends single characters, in order.
        this.i++;
        const endAt = this.i;
        const end = src[endAt] === "\\" ? this.classEscape() : this.classLiteral();
        if (typeof member !== "number" || typeof end !== "number") this.fail(start, "a range with a class escape such as [\\d-z]", "escape the '-': [\\d\\-z]");
        if (member > end) this.fail(start, `a range out of order (${src.slice(start, this.i)})`);
        ranges.push([member, end]);
      } else if (typeof member === "number") ranges.push([member, member]);
      else ranges.push(...member);
    }
    if (this.i >= src.length) this.fail(at, "an unclosed character class '['");
    this.i++;
    if (this.classWide) {
      this.classWide = false;
      this.rewrites.push([at, this.i, this.writtenOut(at, negated, ranges)]);
    } else if (!this.rewriting && !negated && overlaps(ranges, NOT_RAW_IN_JSON)) {
      this.rewrites.push([at, this.i, `(?:${jsonClassParts(ranges).join("|")})`]);
    }
    return { kind: "class", negated, ranges };
  }

  /**
   * A class member above U+007F: in a constraint's own pattern the whole pattern goes through kiln's
   * grammar; in a schema's, the class is written out as alternatives when it closes ({@link writtenOut}).
   */
  private wide(): void {
    if (this.rewriting) this.wideClasses = true;
    else this.classWide = true;
  }

  /** `\D \W \S` inside a class (spanning every non-ASCII character): refused in a schema's pattern, sent through kiln's grammar in a constraint's. */
  private wideEscape(at: number, what: string, hint: string): void {
    if (!this.rewriting) this.fail(at, what, hint);
    this.wideClasses = true;
  }

  /**
   * A schema pattern's class with non-ASCII members, as the engine reads them right: its ASCII
   * members as a class (those JSON holds only escaped as their escapes), and each non-ASCII
   * character as an alternative, `[a-zé]` as `(?:[a-z]|é)`.
   * A negated one, or one of more than {@link MAX_WRITTEN_OUT} non-ASCII characters, is refused.
   */
  private writtenOut(at: number, negated: boolean, ranges: Ranges): string {
    const hint = "list the characters it allows as alternatives: (?:é|è)";
    if (negated) this.fail(at, "a negated character class with non-ASCII members", hint);
    const wide = ranges.filter(([, hi]) => hi > 0x7f).map(([lo, hi]): [number, number] => [Math.max(lo, 0x80), hi]);
    const count = wide.reduce((n, [lo, hi]) => n + hi - lo + 1, 0);
    if (count > MAX_WRITTEN_OUT) this.fail(at, `a character class of ${count} non-ASCII characters (at most ${MAX_WRITTEN_OUT} are written out)`, hint);
    const parts = jsonClassParts(ranges.filter(([lo]) => lo <= 0x7f).map(([lo, hi]): [number, number] => [lo, Math.min(hi, 0x7f)]));
    const seen = new Set<number>();
    for (const [lo, hi] of wide) for (let cp = lo; cp <= hi; cp++) if (!seen.has(cp)) seen.add(cp) && parts.push(String.fromCodePoint(cp));
    return `(?:${parts.join("|")})`;
  }

  private classLiteral(): number {
    const cp = this.src.codePointAt(this.i)!;
    if (cp > 0x7f) this.wide();
    this.i += codePointLength(this.src, this.i);
    return cp;
  }

  /** An escape inside a class: a code point, or the ranges of \d \w \s (and of \D \W \S where allowed). */
  private classEscape(): number | Ranges {
    const src = this.src;
    const at = this.i;
    const c = src[at + 1];
    if (c === undefined) this.fail(at, "a trailing backslash");
    if (c === "d" || c === "w" || c === "s") {
      if (c === "s" && this.rewriting) this.rewrites.push([at, at + 2, ASCII_SPACE_MEMBERS]);
      this.i += 2;
      return CLASS_ESCAPES[c];
    }
    if (c === "D" || c === "W" || c === "S") {
      this.wideEscape(at, `\\${c} inside a character class (it spans non-ASCII characters)`, `use a negated class such as [^0-9] for \\D`);
      this.i += 2;
      return complement(CLASS_ESCAPES[c.toLowerCase()]);
    }
    if (c === "b") {
      this.i += 2;
      return 8;
    }
    const cp = this.charEscape();
    if (cp > 0x7f) this.wide();
    return cp;
  }

  /** An escape outside a class. */
  private escape(): GrammarItem {
    const src = this.src;
    const at = this.i;
    const c = src[at + 1];
    if (c === undefined) this.fail(at, "a trailing backslash");
    if (c === "s") {
      // The engine's \s adds a no-break space, which it writes as a lone byte; in a schema's string, only a space is raw JSON text.
      this.rewrites.push([at, at + 2, this.rewriting ? `[${ASCII_SPACE_MEMBERS}]` : JSON_TEXT_SPACE]);
      this.i += 2;
      return classEscapeItem(c);
    }
    if ("dDwW".includes(c)) {
      this.i += 2;
      return classEscapeItem(c);
    }
    if (c === "S") {
      // The engine's \S also refuses "[" and lets no-break space through.
      if (!this.rewriting) this.fail(at, "\\S outside a character class (the engine also refuses '[' for it)", "write [^\\s]");
      this.rewrites.push([at, at + 2, `[^${ASCII_SPACE_MEMBERS}]`]);
      this.i += 2;
      return classEscapeItem(c);
    }
    if (c === "b" || c === "B") this.fail(at, `a word boundary \\${c}`);
    if (c >= "1" && c <= "9") this.fail(at, `a backreference \\${c}`);
    if (c === "k") this.fail(at, "a named backreference \\k<...>");
    const cp = this.charEscape();
    this.jsonLiteral(at, cp);
    return { kind: "literal", chars: [cp] };
  }

  /** In a schema's pattern, a literal character (at `at`, up to here) a JSON string holds only escaped is matched as its escape. */
  private jsonLiteral(at: number, cp: number): void {
    if (this.rewriting) return;
    const text = jsonTextOf(cp);
    if (text !== undefined) this.rewrites.push([at, this.i, text]);
  }

  /** An escape that stands for one character (both in and outside classes); returns its code point. */
  private charEscape(): number {
    const src = this.src;
    const at = this.i;
    const c = src[at + 1];
    const simple: Record<string, number> = { n: 10, r: 13, t: 9, f: 12, v: 11, a: 7 };
    let cp: number;
    if (c in simple) {
      cp = simple[c];
      this.i += 2;
    } else if (c === "x") {
      const hex = src.slice(at + 2, at + 4);
      if (!/^[0-9A-Fa-f]{2}$/.test(hex)) this.fail(at, "a \\x escape without two hex digits");
      // The engine reads every hex digit that follows: \x41B would be U+041B, not "AB".
      if (HEX.test(src[at + 4] ?? ""))
        this.fail(at, `a \\x escape followed by a hex digit (${src.slice(at, at + 5)})`, "write \\u00HH, or end it with a group: (?:\\x41)B");
      cp = parseInt(hex, 16);
      this.i += 4;
    } else if (c === "u" && src[at + 2] === "{") {
      const m = /^\{([0-9A-Fa-f]{1,6})\}/.exec(src.slice(at + 2));
      if (!m || parseInt(m[1], 16) > 0x10ffff) this.fail(at, "a malformed \\u{...} escape");
      cp = parseInt(m![1], 16);
      this.i += 2 + m![0].length;
    } else if (c === "u" || c === "U") {
      const n = c === "u" ? 4 : 8;
      const hex = src.slice(at + 2, at + 2 + n);
      if (hex.length !== n || !/^[0-9A-Fa-f]+$/.test(hex) || parseInt(hex, 16) > 0x10ffff) this.fail(at, `a \\${c} escape without ${n} hex digits`);
      cp = parseInt(hex, 16);
      this.i += 2 + n;
    } else if (c === "c") {
      if (!/^[A-Za-z]$/.test(src[at + 2] ?? "")) this.fail(at, "a \\c escape without a letter");
      cp = src.charCodeAt(at + 2) % 32;
      this.i += 3;
    } else if (c === "p" || c === "P") {
      this.fail(at, `a Unicode property escape \\${c}{...}`);
    } else if (c === "0") {
      this.fail(at, "\\0 (NUL), which the engine cannot match");
    } else if (/^[A-Za-z0-9]$/.test(c) || c.charCodeAt(0) > 0x7f) {
      this.fail(at, `an unknown escape \\${c}`);
    } else {
      cp = c.charCodeAt(0); // escaped ASCII punctuation: the character itself
      this.i += 2;
    }
    if (cp! === 0) this.fail(at, "a NUL character, which the engine cannot match");
    if (cp! >= 0xd800 && cp! <= 0xdfff) this.fail(at, "an escape for a surrogate code point", "write the character, or \\u{1F600} for one beyond U+FFFF");
    return cp!;
  }

  /** `^` only where nothing can precede it, `$` only where nothing can follow. */
  private anchors(alt: Item[][], startOk: boolean, endOk: boolean): void {
    for (const seq of alt) {
      seq.forEach((item, k) => {
        const before = seq.slice(0, k).every((it) => it.kind === "anchor" && it.char === "^");
        const after = seq.slice(k + 1).every((it) => it.kind === "anchor" && it.char === "$");
        if (item.kind === "anchor") {
          const ok = item.char === "^" ? startOk && before : endOk && after;
          if (!ok) {
            this.fail(item.at, `an anchor '${item.char}' inside the pattern`, "the whole output must match, so ^ and $ may stand only at its ends");
          }
        } else if (item.group) {
          this.anchors(item.group, startOk && before && !item.quantified, endOk && after && !item.quantified);
        }
      });
    }
  }

  /**
   * Nested repetition counts multiply the grammar the engine builds. A long repetition (which
   * holds nothing repeated) stands alone: inside a repeated group it is refused.
   */
  private products(alt: Item[][], outer: number, repeated = false): void {
    for (const seq of alt) {
      for (const item of seq) {
        if (item.kind !== "atom") continue;
        const long = item.count > MAX_REPEAT_BOUND;
        if (long && repeated) this.fail(item.at, `a repetition count over ${MAX_REPEAT_BOUND} inside a repeated group`, "compile time grows steeply with it");
        const product = outer * item.count;
        if (!long && product > MAX_REPEAT_PRODUCT) this.fail(item.at, `nested repetitions whose counts multiply past ${MAX_REPEAT_PRODUCT}`);
        if (item.group) this.products(item.group, long ? 1 : product, repeated || item.repeats === true);
      }
    }
  }
}

/** Whether a group holds a repetition (a quantified atom) at any depth. */
function repeatsInside(alt: Item[][]): boolean {
  return alt.some((seq) => seq.some((item) => item.kind === "atom" && (item.quantified || (item.group !== undefined && repeatsInside(item.group)))));
}

function codePointLength(s: string, i: number): number {
  return s.codePointAt(i)! > 0xffff ? 2 : 1;
}
