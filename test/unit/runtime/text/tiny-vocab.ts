import type { TokenizerSpec } from "../../../../src/runtime/artifact/index.js";
import { BYTE_TO_CHAR, CHAR_TO_BYTE } from "../../../../src/runtime/text/byte-level.js";

/** The byte-level (GPT-2 encoded) form of plain text, as vocabularies store it: " a" -> "Ġa". */
export function byteLevel(text: string): string {
  return [...Buffer.from(text, "utf8")].map((b) => BYTE_TO_CHAR[b]).join("");
}

/** Plain text of a byte-level string, for readable assertions. */
export function plain(word: string): string {
  return Buffer.from([...word].map((c) => CHAR_TO_BYTE.get(c.codePointAt(0)!)!)).toString("utf8");
}

export interface TinyVocab {
  /** Normal tokens, as plain text. */
  normal: string[];
  /** Merges as [left, right] plain-text pairs, highest priority first. */
  merges: Array<[string, string]>;
  /** Extra tokens with an explicit GGUF type (3 control, 4 user-defined, 6 byte...), text as stored. */
  extra?: Array<{ text: string; type: number }>;
  pre?: string;
  bosId?: number | null;
  eosId?: number | null;
  addBos?: boolean;
  addEos?: boolean;
}

/** A hand-made byte-level BPE spec: extra tokens first (ids 0..), then normal tokens. */
export function tinySpec(v: TinyVocab): TokenizerSpec {
  const extra = v.extra ?? [];
  return {
    model: "gpt2",
    pre: v.pre ?? "gpt-2",
    tokens: [...extra.map((e) => e.text), ...v.normal.map(byteLevel)],
    tokenTypes: [...extra.map((e) => e.type), ...v.normal.map(() => 1)],
    merges: v.merges.map(([l, r]) => `${byteLevel(l)} ${byteLevel(r)}`),
    bosId: v.bosId ?? null,
    eosId: v.eosId ?? null,
    eotId: null,
    padId: null,
    unkId: null,
    addBos: v.addBos ?? false,
    addEos: v.addEos ?? false,
    addSpacePrefix: false,
  };
}
