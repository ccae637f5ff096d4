import type { TokenizerSpec } from "../artifact/index.js";
import { byteLevelToBytes } from "./byte-level.js";
import { encodeWord, MergeTable } from "./bpe.js";
import { PreTokenizer } from "./pre-tokenizer.js";
import { SpecialTokenMatcher } from "./special-tokens.js";
import { StreamDecoder } from "./stream-decoder.js";
import {
  ATTR_BYTE,
  ATTR_CONTROL,
  ATTR_NORMAL,
  ATTR_UNKNOWN,
  ATTR_USER_DEFINED,
  vocabAttributes,
} from "./token-attrs.js";

export interface EncodeOptions {
  /** Add BOS/EOS as the model asks (spec.addBos / spec.addEos), like llama_tokenize's add_special. Default false. */
  addSpecial?: boolean;
  /** Turn control-token texts such as "<|im_start|>" into their ids. Default false: they stay text. */
  parseSpecial?: boolean;
  /**
   * Text that must stay text whatever `parseSpecial` says: each `open + index + close` in the input
   * stands for `texts[index]`. It is put back after special tokens are split out and before
   * pre-tokenization, so it joins its neighbours exactly as ordinary text would and never becomes a
   * control token. See {@link Tokenizer.literalTexts}.
   */
  literals?: Literals;
}

/** Stand-ins for literal text (see {@link EncodeOptions.literals}); `open` and `close` are single characters. */
export interface Literals {
  open: string;
  close: string;
  texts: readonly string[];
}

export interface DecodeOptions {
  /** Emit the text of control tokens (llama.cpp's `special`). Default false: they decode to "". */
  renderSpecial?: boolean;
}

export class TokenizerError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TokenizerError";
  }
}

/** Words seen before are looked up instead of merged again; cleared when it grows past this. */
const WORD_CACHE_LIMIT = 100_000;
const utf8 = new TextEncoder();

/**
 * llama.cpp-compatible byte-level BPE tokenizer (tokenizer.ggml.model "gpt2"): the same special-token
 * splitting, pre-tokenizer, merges, BOS/EOS rules and token-to-piece decoding as llama-vocab.cpp, so a
 * prompt gets the ids llama.cpp would feed the model.
 */
export class Tokenizer {
  readonly vocabSize: number;
  readonly bosId: number | null;
  readonly eosId: number | null;
  readonly eotId: number | null;
  readonly addBos: boolean;
  readonly addEos: boolean;
  readonly pre: string;

  private readonly texts: string[];
  private readonly attrs: Uint8Array;
  private readonly eog: Set<number>;
  private readonly tokenToId: Map<string, number>;
  private readonly merges: MergeTable;
  private readonly preTokenizer: PreTokenizer;
  private readonly specials: SpecialTokenMatcher;
  private readonly wordCache = new Map<string, number[]>();
  private parsedTexts: readonly string[] | undefined;
  private readonly pieceCache: [Array<Uint8Array | undefined>, Array<Uint8Array | undefined>];

  private constructor(spec: TokenizerSpec) {
    if (spec.model !== "gpt2") {
      throw new TokenizerError(`tokenizer model "${spec.model}" is not supported (only byte-level BPE, "gpt2")`);
    }
    const vocab = vocabAttributes(spec);
    this.texts = vocab.texts;
    this.attrs = vocab.attrs;
    this.eog = vocab.eogIds;
    this.eotId = vocab.eotId;
    this.vocabSize = vocab.texts.length;
    this.bosId = spec.bosId;
    this.eosId = spec.eosId;
    this.addBos = spec.addBos;
    this.addEos = spec.addEos;
    this.pre = spec.pre;
    this.tokenToId = new Map();
    this.texts.forEach((t, id) => this.tokenToId.set(t, id));
    this.merges = new MergeTable(this.vocabSize, this.tokenToId, spec.merges);
    this.preTokenizer = new PreTokenizer(spec.pre);
    this.specials = new SpecialTokenMatcher(this.texts, this.attrs);
    this.pieceCache = [new Array(this.vocabSize), new Array(this.vocabSize)];
  }

  static fromSpec(spec: TokenizerSpec): Tokenizer {
    return new Tokenizer(spec);
  }

  encode(text: string, options: EncodeOptions = {}): number[] {
    const out: number[] = [];
    if (options.addSpecial && this.addBos) out.push(this.requireId(this.bosId, "BOS"));
    if (text !== "") {
      const restore = options.literals ? literalRestorer(options.literals) : (fragment: string) => fragment;
      for (const fragment of this.specials.partition(wellFormed(text), options.parseSpecial ?? false)) {
        if (typeof fragment === "number") out.push(fragment);
        else for (const word of this.preTokenizer.split(restore(fragment))) this.encodeWord(word, out);
      }
    }
    if (options.addSpecial && this.addEos) out.push(this.requireId(this.eosId, "EOS"));
    return out;
  }

  /** Text of the ids, as llama.cpp's pieces concatenated (what llama-server streams and returns). */
  decode(ids: Iterable<number>, options: DecodeOptions = {}): string {
    const stream = this.createStreamDecoder(options);
    let text = "";
    for (const id of ids) text += stream.push(id);
    return text + stream.flush();
  }

  createStreamDecoder(options: DecodeOptions = {}): StreamDecoder {
    return new StreamDecoder((id) => this.tokenBytes(id, options));
  }

  /** The vocabulary entry as stored in the GGUF (byte-level form for normal tokens). */
  tokenText(id: number): string {
    this.checkId(id);
    return this.texts[id];
  }

  /** The bytes a token contributes to output (llama.cpp's token_to_piece); may end mid-character. */
  tokenBytes(id: number, options: DecodeOptions = {}): Uint8Array {
    this.checkId(id);
    const special = options.renderSpecial ? 1 : 0;
    const cache = this.pieceCache[special];
    return (cache[id] ??= this.computePiece(id, special === 1));
  }

  /** Whether generating this id ends the turn (EOS, EOT and llama.cpp's end-of-generation set). */
  isEog(id: number): boolean {
    return this.eog.has(id);
  }

  get eogIds(): number[] {
    return [...this.eog].sort((a, b) => a - b);
  }

  isControl(id: number): boolean {
    return (this.attrs[id] & ATTR_CONTROL) !== 0;
  }

  /**
   * Texts that `parseSpecial` turns into token ids and that otherwise stay text: those of control and
   * unknown tokens (user-defined tokens are split out either way). Longest first.
   */
  get literalTexts(): readonly string[] {
    if (this.parsedTexts === undefined) {
      const texts = new Set<string>();
      for (let id = 0; id < this.vocabSize; id++) if (this.attrs[id] & (ATTR_CONTROL | ATTR_UNKNOWN) && this.texts[id] !== "") texts.add(this.texts[id]);
      this.parsedTexts = [...texts].sort((a, b) => b.length - a.length || (a < b ? -1 : 1));
    }
    return this.parsedTexts;
  }

  private encodeWord(word: string, out: number[]): void {
    let ids = this.wordCache.get(word);
    if (ids === undefined) {
      ids = [];
      const whole = this.preTokenizer.kind.ignoreMerges ? this.tokenToId.get(word) : undefined;
      if (whole !== undefined) ids.push(whole);
      else encodeWord(word, this.merges, this.tokenToId, ids);
      if (this.wordCache.size >= WORD_CACHE_LIMIT) this.wordCache.clear();
      this.wordCache.set(word, ids);
    }
    for (const id of ids) out.push(id);
  }

  private computePiece(id: number, special: boolean): Uint8Array {
    const attr = this.attrs[id];
    const text = this.texts[id];
    if (attr & (ATTR_UNKNOWN | ATTR_CONTROL)) return special ? utf8.encode(text) : new Uint8Array(0);
    if (attr & ATTR_USER_DEFINED) return utf8.encode(text);
    if (attr & ATTR_NORMAL) return byteLevelToBytes(text);
    if (attr & ATTR_BYTE) return Uint8Array.of(parseInt(text.slice(3, 5), 16)); // "<0xAB>"
    return new Uint8Array(0); // unused and undefined tokens print nothing
  }

  private requireId(id: number | null, name: string): number {
    if (id === null) throw new TokenizerError(`the model asks for ${name} but has no ${name} token`);
    return id;
  }

  private checkId(id: number): void {
    if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) {
      throw new TokenizerError(`token id ${id} is outside the vocabulary (0..${this.vocabSize - 1})`);
    }
  }
}

/** Puts literal texts back in place of their stand-ins; a stand-in with no such index stays as it is. */
function literalRestorer({ open, close, texts }: Literals): (fragment: string) => string {
  const standIn = new RegExp(`${escapeRegExp(open)}(\\d+)${escapeRegExp(close)}`, "g");
  return (fragment) =>
    fragment.includes(open) ? fragment.replace(standIn, (whole, index: string) => (Number(index) < texts.length ? wellFormed(texts[Number(index)]) : whole)) : fragment;
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** Lone surrogates become U+FFFD, which is what llama.cpp receives from Node's UTF-8 conversion. */
function wellFormed(text: string): string {
  return text.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, "\ufffd");
}
