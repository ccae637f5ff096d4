import { UNICODE_RANGES_ENCODED } from "./unicode-flags-data.js";

/**
 * Code point classification exactly as llama.cpp's unicode.cpp does it.
 * The bit values mirror llama.cpp's `unicode_cpt_flags` so ported code reads the same.
 */
export const CPT_UNDEFINED = 0x0001;
export const CPT_NUMBER = 0x0002; // \p{N}
export const CPT_LETTER = 0x0004; // \p{L}
export const CPT_SEPARATOR = 0x0008; // \p{Z}
export const CPT_MARK = 0x0010; // \p{M}
export const CPT_PUNCTUATION = 0x0020; // \p{P}
export const CPT_SYMBOL = 0x0040; // \p{S}
export const CPT_CONTROL = 0x0080; // \p{C}
export const CPT_CATEGORY_MASK = 0x00ff;
export const CPT_WHITESPACE = 0x0100; // llama.cpp's own \s set, not JavaScript's

export const MAX_CODEPOINTS = 0x110000;

const CATEGORY_BY_LETTER: Record<string, number> = {
  X: 0,
  U: CPT_UNDEFINED,
  N: CPT_NUMBER,
  L: CPT_LETTER,
  Z: CPT_SEPARATOR,
  M: CPT_MARK,
  P: CPT_PUNCTUATION,
  S: CPT_SYMBOL,
  C: CPT_CONTROL,
};

// llama.cpp's `unicode_set_whitespace`. Unlike JavaScript's \s it includes U+0085 and excludes U+FEFF.
const WHITESPACE_CODEPOINTS = [
  0x0009, 0x000a, 0x000b, 0x000c, 0x000d, 0x0020, 0x0085, 0x00a0, 0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009,
  0x200a, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000,
];

let flagTable: Uint16Array | null = null;

/** A flat 2.2 MB table, built on first use: one lookup per code point keeps pre-tokenization fast. */
function buildFlagTable(): Uint16Array {
  const table = new Uint16Array(MAX_CODEPOINTS);
  const entries = [...UNICODE_RANGES_ENCODED.matchAll(/([0-9a-z]+)([A-Z])/g)];
  let start = 0;
  for (let i = 0; i < entries.length; i++) {
    start += parseInt(entries[i][1], 36);
    const end = i + 1 < entries.length ? start + parseInt(entries[i + 1][1], 36) : MAX_CODEPOINTS;
    table.fill(CATEGORY_BY_LETTER[entries[i][2]], start, Math.min(end, MAX_CODEPOINTS));
  }
  for (const cp of WHITESPACE_CODEPOINTS) table[cp] |= CPT_WHITESPACE;
  return table;
}

/** llama.cpp's flags for a code point; 0 for values outside Unicode (llama.cpp's "out of range"). */
export function codepointFlags(cp: number): number {
  if (cp < 0 || cp >= MAX_CODEPOINTS) return 0;
  flagTable ??= buildFlagTable();
  return flagTable[cp];
}

/** The table itself, for hot loops that classify many code points. */
export function codepointFlagTable(): Uint16Array {
  flagTable ??= buildFlagTable();
  return flagTable;
}
