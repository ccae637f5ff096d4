import { ATTR_CONTROL, ATTR_LSTRIP, ATTR_RSTRIP, ATTR_UNKNOWN, ATTR_USER_DEFINED } from "./token-attrs.js";

/** A piece of input: raw text still to be BPE-encoded, or an already-decided special token id. */
export type Fragment = string | number;

/**
 * Splits text around special-token texts before BPE, like llama.cpp's tokenizer_st_partition.
 * Longer token texts are matched first everywhere, then shorter ones inside what is left. With
 * parseSpecial off, control and unknown tokens are left as text, but user-defined tokens are still
 * split out (llama.cpp follows HF tokenizers there: added tokens always win over BPE).
 */
export class SpecialTokenMatcher {
  /** Ids of control, user-defined and unknown tokens, longest UTF-8 text first. */
  private readonly ids: number[];

  constructor(
    private readonly texts: readonly string[],
    private readonly attrs: Uint16Array,
  ) {
    const special = ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN;
    const byteLength = (id: number) => Buffer.byteLength(texts[id], "utf8");
    this.ids = [];
    for (let id = 0; id < texts.length; id++) if (attrs[id] & special) this.ids.push(id);
    // llama.cpp's std::sort leaves equal lengths in unspecified order; ascending id keeps us deterministic.
    this.ids.sort((a, b) => byteLength(b) - byteLength(a) || a - b);
  }

  partition(text: string, parseSpecial: boolean): Fragment[] {
    let fragments: Fragment[] = [text];
    for (const id of this.ids) {
      if (!parseSpecial && this.attrs[id] & (ATTR_CONTROL | ATTR_UNKNOWN)) continue;
      const needle = this.texts[id];
      if (!text.includes(needle)) continue; // cheap pre-check: fragments are pieces of text
      fragments = splitAround(fragments, needle, id, this.attrs[id]);
    }
    return fragments;
  }
}

/** C's isspace in the "C" locale, which llama.cpp strips with. */
const C_SPACE = new Set([" ", "\t", "\n", "\v", "\f", "\r"]);

/**
 * Each text fragment split at every occurrence of `needle`; a token with LSTRIP/RSTRIP also eats the
 * whitespace right before/after it, and text left empty by that is dropped.
 */
function splitAround(fragments: Fragment[], needle: string, id: number, attr: number): Fragment[] {
  const out: Fragment[] = [];
  for (const fragment of fragments) {
    if (typeof fragment !== "string") {
      out.push(fragment);
      continue;
    }
    let from = 0;
    for (let at = fragment.indexOf(needle); at !== -1; at = fragment.indexOf(needle, from)) {
      let leftEnd = at;
      if (attr & ATTR_LSTRIP) while (leftEnd > from && C_SPACE.has(fragment[leftEnd - 1])) leftEnd--;
      if (leftEnd > from) out.push(fragment.slice(from, leftEnd));
      out.push(id);
      from = at + needle.length;
      if (attr & ATTR_RSTRIP) while (from < fragment.length && C_SPACE.has(fragment[from])) from++;
    }
    if (from < fragment.length) out.push(fragment.slice(from));
  }
  return out;
}
