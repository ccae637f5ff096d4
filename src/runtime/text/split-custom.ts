import { codepointFlagTable, CPT_LETTER, CPT_MARK, CPT_NUMBER, CPT_WHITESPACE } from "./unicode-flags.js";

/**
 * Line-by-line ports of llama.cpp's hand-written splitters (unicode.cpp, unicode_regex_split_custom_*).
 * llama.cpp uses these instead of a regex engine for the common patterns, and they differ from a
 * textbook regex in small ways (e.g. which code points count as letters or whitespace, and how a run
 * of spaces before a word is cut), so kiln copies the code rather than the regex.
 *
 * Every splitter takes the text as code points plus the current chunk lengths, and returns the new
 * chunk lengths; a chunk is never merged with its neighbours.
 */
export type CustomSplitter = (cps: Uint32Array, offsets: number[]) => number[];

const CR = 0x0d;
const LF = 0x0a;
const SPACE = 0x20;
const APOSTROPHE = 0x27;
const OUT_OF_RANGE = 0xffffffff;

/** Reads one chunk; positions outside it read as "nothing here", like llama.cpp's OUT_OF_RANGE. */
class ChunkReader {
  private readonly table = codepointFlagTable();
  ini = 0;
  end = 0;

  constructor(private readonly cps: Uint32Array) {}

  cpt(pos: number): number {
    return pos >= this.ini && pos < this.end ? this.cps[pos] : OUT_OF_RANGE;
  }

  flags(pos: number): number {
    return pos >= this.ini && pos < this.end ? this.table[this.cps[pos]] : 0;
  }
}

function same(cp: number): number {
  return cp;
}

/** ASCII lower-casing is all `unicode_tolower` changes for the letters the contraction rule checks. */
function lower(cp: number): number {
  return cp >= 0x41 && cp <= 0x5a ? cp + 0x20 : cp;
}

/** Length of a contraction ('s 't 're 've 'm 'll 'd) starting at pos, or 0. */
function contractionLength(r: ChunkReader, pos: number, caseInsensitive: boolean): number {
  if (r.cpt(pos) !== APOSTROPHE || pos + 1 >= r.end) return 0;
  const fold = caseInsensitive ? lower : same;
  const next = fold(r.cpt(pos + 1));
  if (next === 0x73 || next === 0x74 || next === 0x6d || next === 0x64) return 2; // s t m d
  if (pos + 2 < r.end) {
    const nextNext = fold(r.cpt(pos + 2));
    if ((next === 0x72 && nextNext === 0x65) || (next === 0x76 && nextNext === 0x65) || (next === 0x6c && nextNext === 0x6c)) {
      return 3; // re ve ll
    }
  }
  return 0;
}

/** Runs `step` over each chunk; `step` returns the end of the word starting at pos. */
function splitChunks(cps: Uint32Array, offsets: number[], step: (r: ChunkReader, pos: number) => number): number[] {
  const out: number[] = [];
  const r = new ChunkReader(cps);
  let start = 0;
  for (const offset of offsets) {
    r.ini = start;
    r.end = start + offset;
    start = r.end;
    let pos = r.ini;
    while (pos < r.end) {
      const wordEnd = step(r, pos);
      if (wordEnd > pos) out.push(wordEnd - pos);
      pos = wordEnd;
    }
  }
  return out;
}

/**
 * The whitespace alternatives every port ends with: \s*[\r\n]+ (llama3 family only), \s+(?!\S) (a run
 * before a word leaves its last space to the word), \s+, and finally a lone code point no rule matched.
 */
function whitespaceEnd(r: ChunkReader, pos: number, withNewlineRule: boolean): number {
  let count = 0;
  let lastNewlineEnd = 0;
  while (r.flags(pos + count) & CPT_WHITESPACE) {
    const c = r.cpt(pos + count);
    if (c === CR || c === LF) lastNewlineEnd = pos + count + 1;
    count++;
  }
  if (withNewlineRule && lastNewlineEnd > 0) return lastNewlineEnd;
  if (count > 1 && r.cpt(pos + count) !== OUT_OF_RANGE) return pos + count - 1;
  if (count > 0) return pos + count;
  return pos + 1; // no rule matched: the code point is a word by itself
}

/** Marks the ' ?[^\s\p{L}\p{N}]+' alternative in splitGpt2. */
const OTHER = -1;

/** [^\s\p{L}\p{N}] for a code point inside the chunk (flags 0 means outside it). */
function isOther(flags: number): boolean {
  return !(flags & (CPT_WHITESPACE | CPT_LETTER | CPT_NUMBER)) && flags !== 0;
}

/** GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
export const splitGpt2: CustomSplitter = (cps, offsets) =>
  splitChunks(cps, offsets, (r, pos) => {
    const contraction = contractionLength(r, pos, false);
    if (contraction) return pos + contraction;

    const cpt = r.cpt(pos);
    let flags2 = cpt === SPACE ? r.flags(pos + 1) : r.flags(pos);
    // ' ?\p{L}+', then ' ?\p{N}+', then ' ?[^\s\p{L}\p{N}]+'
    const kind = flags2 & CPT_LETTER ? CPT_LETTER : flags2 & CPT_NUMBER ? CPT_NUMBER : isOther(flags2) ? OTHER : 0;
    if (kind !== 0) {
      if (cpt === SPACE) pos++;
      while (kind === OTHER ? isOther(flags2) : flags2 & kind) flags2 = r.flags(++pos);
      return pos;
    }
    return whitespaceEnd(r, pos, false);
  });

interface Llama3Options {
  /** Digits per number chunk: 3 for llama3, 1 for qwen2. */
  digitsPerChunk: number;
  /** qwen35 lets combining marks join letter runs. */
  marksAreLetters: boolean;
}

function llama3Family(options: Llama3Options): CustomSplitter {
  const letterLike = options.marksAreLetters ? CPT_LETTER | CPT_MARK : CPT_LETTER;
  return (cps, offsets) =>
    splitChunks(cps, offsets, (r, pos) => {
      const contraction = contractionLength(r, pos, true);
      if (contraction) return pos + contraction;

      const cpt = r.cpt(pos);
      const flags = r.flags(pos);

      // [^\r\n\p{L}\p{N}]?\p{L}+
      if (!(cpt === CR || cpt === LF || flags & CPT_NUMBER)) {
        if (flags & letterLike || r.flags(pos + 1) & letterLike) {
          pos++;
          while (r.flags(pos) & letterLike) pos++;
          return pos;
        }
      }

      // \p{N}{1,n}
      if (flags & CPT_NUMBER) {
        const ini2 = pos;
        while (r.flags(pos) & CPT_NUMBER && pos - ini2 < options.digitsPerChunk) pos++;
        return pos;
      }

      // ' ?[^\s\p{L}\p{N}]+[\r\n]*' (the first test reads the current code point's flags, as llama.cpp does)
      const blocked = CPT_WHITESPACE | letterLike | CPT_NUMBER;
      let flags2 = cpt === SPACE ? r.flags(pos + 1) : flags;
      if (!(flags2 & blocked) && flags !== 0) {
        if (cpt === SPACE) pos++;
        while (!(flags2 & blocked) && flags2 !== 0) flags2 = r.flags(++pos);
        let cpt2 = r.cpt(pos);
        while (cpt2 === CR || cpt2 === LF) cpt2 = r.cpt(++pos);
        return pos;
      }

      return whitespaceEnd(r, pos, true);
    });
}

/**
 * llama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * llama.cpp emits a 3-digit run as soon as it is complete, so "12345" -> "123" "45" like the regex.
 */
export const splitLlama3 = llama3Family({ digitsPerChunk: 3, marksAreLetters: false });
/** qwen2: as llama3 but \p{N} one digit at a time. */
export const splitQwen2 = llama3Family({ digitsPerChunk: 1, marksAreLetters: false });
/** qwen35: as qwen2 but [\p{L}\p{M}]+ for words. */
export const splitQwen35 = llama3Family({ digitsPerChunk: 1, marksAreLetters: true });

/** [^\n]+|[\n]+ */
export const splitNewlines: CustomSplitter = (cps, offsets) =>
  splitChunks(cps, offsets, (r, pos) => {
    const isNewline = cps[pos] === LF;
    while (pos < r.end && (cps[pos] === LF) === isNewline) pos++;
    return pos;
  });

/** The regex strings llama.cpp recognises and replaces with a hand-written splitter. */
export const CUSTOM_SPLITTERS: ReadonlyMap<string, CustomSplitter> = new Map([
  ["'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)", splitGpt2],
  ["(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", splitLlama3],
  [
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    splitLlama3,
  ],
  [
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    splitQwen2,
  ],
  [
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    splitQwen35,
  ],
  ["[^\\n]+|[\\n]+", splitNewlines],
]);
