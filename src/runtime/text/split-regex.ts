import { codepointFlagTable, CPT_CATEGORY_MASK, CPT_LETTER, CPT_MARK, CPT_NUMBER, CPT_PUNCTUATION, CPT_SYMBOL, CPT_WHITESPACE } from "./unicode-flags.js";

/**
 * llama.cpp's general-purpose fallback for pre-tokenizer regexes it has no hand-written splitter for
 * (unicode.cpp, unicode_regex_split): C++ std::regex (ECMAScript grammar) over a rewritten text.
 *
 * When the regex uses \p{..} categories, llama.cpp "collapses" the text to one byte per code point:
 * ASCII stays, other whitespace becomes \v, and every other code point becomes a stand-in byte for its
 * category (0xD1 number, 0xD2 letter, 0xD3 punctuation, 0xD4 mark, 0xD5 symbol, 0xD0 anything else);
 * each \p{X} in the regex becomes a class of that stand-in plus the ASCII members. So \p{Lu} matches
 * every letter, and the Unicode data is llama.cpp's, not JavaScript's; we reproduce that exactly by
 * running a JavaScript regex over the same collapsed text.
 */
export class RegexSplitter {
  private readonly regex: RegExp;
  private readonly collapsed: boolean;

  constructor(source: string) {
    this.collapsed = UNICODE_CATEGORIES.some((cat) => source.includes(cat.name));
    try {
      this.regex = this.collapsed ? new RegExp(collapseRegex(source), "g") : new RegExp(asciiWhitespaceRegex(source), "gu");
    } catch (error) {
      throw new Error(`pre-tokenizer regex not supported: ${JSON.stringify(source)} (${(error as Error).message})`);
    }
  }

  /** New chunk lengths: each chunk is cut into matches and the gaps between them. */
  split(cps: Uint32Array, offsets: number[], text: SplitText): number[] {
    const haystack = this.collapsed ? text.collapsed() : text.wide();
    const out: number[] = [];
    let start = 0;
    for (const offset of offsets) {
      const from = haystack.unitOf(start);
      const chunk = haystack.value.slice(from, haystack.unitOf(start + offset));
      let previousEnd = 0; // in code points, relative to the chunk
      this.regex.lastIndex = 0;
      for (let m = this.regex.exec(chunk); m !== null; m = this.regex.exec(chunk)) {
        const matchStart = haystack.cpOf(from + m.index) - start;
        const matchEnd = haystack.cpOf(from + m.index + m[0].length) - start;
        if (m[0].length === 0) {
          // like std::regex_iterator, step past an empty match (a whole code point, never half a pair)
          this.regex.lastIndex = m.index + ((chunk.codePointAt(m.index) ?? 0) > 0xffff ? 2 : 1);
        }
        if (matchStart > previousEnd) out.push(matchStart - previousEnd);
        if (matchEnd > matchStart) out.push(matchEnd - matchStart);
        previousEnd = Math.max(previousEnd, matchEnd);
      }
      if (previousEnd < offset) out.push(offset - previousEnd);
      start += offset;
    }
    return out;
  }
}

const UNICODE_CATEGORIES = [
  { name: "\\p{N}", flag: CPT_NUMBER },
  { name: "\\p{L}", flag: CPT_LETTER },
  { name: "\\p{P}", flag: CPT_PUNCTUATION },
  { name: "\\p{M}", flag: CPT_MARK },
  { name: "\\p{S}", flag: CPT_SYMBOL },
  { name: "\\p{Lu}", flag: CPT_LETTER },
  { name: "\\p{Ll}", flag: CPT_LETTER },
  { name: "\\p{Lt}", flag: CPT_LETTER },
  { name: "\\p{Lm}", flag: CPT_LETTER },
  { name: "\\p{Lo}", flag: CPT_LETTER },
];

const STAND_IN = new Map<number, string>([
  [CPT_NUMBER, "\u00d1"],
  [CPT_LETTER, "\u00d2"],
  [CPT_PUNCTUATION, "\u00d3"],
  [CPT_MARK, "\u00d4"],
  [CPT_SYMBOL, "\u00d5"],
]);
const OTHER_STAND_IN = "\u00d0";
const WHITESPACE_STAND_IN = "\u000b";

/** The ASCII members of each category, as llama.cpp spells them inside the collapsed class. */
const ASCII_MEMBERS = new Map<number, string>([
  [CPT_NUMBER, "0-9"],
  [CPT_LETTER, "A-Za-z"],
  [CPT_PUNCTUATION, "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}"],
  [CPT_MARK, ""],
  [CPT_SYMBOL, "\\$\\+<->^`\\|\\~"],
]);

/** Port of llama.cpp's regex rewrite, including its simple tracking of whether we are inside [...]. */
function collapseRegex(source: string): string {
  let out = "";
  let inside = false;
  for (let i = 0; i < source.length; i++) {
    if (source[i] === "[" && (i === 0 || source[i - 1] !== "\\")) {
      out += "[";
      inside = true;
      continue;
    }
    if (inside && source[i] === "]" && source[i - 1] !== "\\") {
      out += "]";
      inside = false;
      continue;
    }
    if (source[i] === "\\" && i + 3 < source.length && source[i + 1] === "p" && source[i + 2] === "{") {
      const closing = source.indexOf("}", i + 3);
      if (closing !== -1 && closing <= i + 10) {
        const category = UNICODE_CATEGORIES.find((cat) => cat.name === source.slice(i, closing + 1));
        if (category) {
          const members = STAND_IN.get(category.flag)! + ASCII_MEMBERS.get(category.flag)!;
          out += inside ? members : `[${members}]`;
          i = closing;
          continue;
        }
      }
    }
    out += source[i];
  }
  return out;
}

/** std::wregex's \s only knows ASCII whitespace (llama.cpp maps other whitespace to \v first). */
function asciiWhitespaceRegex(source: string): string {
  let out = "";
  let inside = false;
  for (let i = 0; i < source.length; i++) {
    const c = source[i];
    if (c === "\\" && i + 1 < source.length) {
      const next = source[i + 1];
      if (next === "s") out += inside ? "\\t\\n\\v\\f\\r " : "[\\t\\n\\v\\f\\r ]";
      else if (next === "S" && !inside) out += "[^\\t\\n\\v\\f\\r ]";
      else out += c + next;
      i++;
      continue;
    }
    if (c === "[") inside = true;
    else if (c === "]") inside = false;
    out += c;
  }
  return out;
}

/** A text form that regexes run over, with maps between UTF-16 units and code point indexes. */
export interface Haystack {
  value: string;
  unitOf(cp: number): number;
  cpOf(unit: number): number;
}

/** Lazily built haystacks for one input, shared by all regexes of a pre-tokenizer. */
export class SplitText {
  private collapsedText: Haystack | null = null;
  private wideText: Haystack | null = null;

  constructor(private readonly cps: Uint32Array) {}

  /** One UTF-16 unit per code point, so both maps are the identity. */
  collapsed(): Haystack {
    if (this.collapsedText) return this.collapsedText;
    const table = codepointFlagTable();
    const parts: string[] = new Array(this.cps.length);
    for (let i = 0; i < this.cps.length; i++) {
      const cp = this.cps[i];
      if (cp < 0x80) {
        parts[i] = String.fromCharCode(cp);
      } else {
        const flags = table[cp];
        parts[i] = flags & CPT_WHITESPACE ? WHITESPACE_STAND_IN : (STAND_IN.get(flags & CPT_CATEGORY_MASK) ?? OTHER_STAND_IN);
      }
    }
    const identity = (n: number) => n;
    this.collapsedText = { value: parts.join(""), unitOf: identity, cpOf: identity };
    return this.collapsedText;
  }

  /** The real text, with non-ASCII whitespace replaced by \v as llama.cpp does for std::wregex. */
  wide(): Haystack {
    if (this.wideText) return this.wideText;
    const table = codepointFlagTable();
    const unitOfCp = new Uint32Array(this.cps.length + 1);
    let value = "";
    for (let i = 0; i < this.cps.length; i++) {
      const cp = this.cps[i];
      unitOfCp[i] = value.length;
      value += cp > 0x7f && table[cp] & CPT_WHITESPACE ? WHITESPACE_STAND_IN : String.fromCodePoint(cp);
    }
    unitOfCp[this.cps.length] = value.length;
    const cpOfUnit = new Uint32Array(value.length + 1);
    for (let i = 0, unit = 0; i <= this.cps.length; i++) {
      for (; unit <= unitOfCp[i] && unit <= value.length; unit++) cpOfUnit[unit] = i;
    }
    this.wideText = { value, unitOf: (cp) => unitOfCp[cp], cpOf: (unit) => cpOfUnit[unit] };
    return this.wideText;
  }
}
