import type { TokenizerSpec } from "../artifact/index.js";
import { byteLevelToBytes } from "./byte-level.js";
import { encodeWord, MergeTable } from "./bpe.js";
import { PreTokenizer, preTokenizerKind } from "./pre-tokenizer.js";
import { SpecialTokenMatcher } from "./special-tokens.js";
import { SPACE_MARKER, SpmVocab } from "./spm.js";
import { StreamDecoder } from "./stream-decoder.js";
import { ATTR_BYTE, ATTR_CONTROL, ATTR_NORMAL, ATTR_UNKNOWN, ATTR_USER_DEFINED, type FimTokens, vocabAttributes } from "./token-attrs.js";

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

export interface DetokenizeOptions {
  /** Drop the BOS the model adds at the start and the EOS it adds at the end (llama.cpp's `remove_special`). Default false. */
  removeSpecial?: boolean;
  /** Emit the text of control tokens (llama.cpp's `unparse_special`). Default false. */
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

/** Tokenizer models kiln implements: `tokenizer.ggml.model` values. */
const MODELS = ["gpt2", "llama"] as const;
type TokenizerModel = (typeof MODELS)[number];

/**
 * llama.cpp-compatible tokenizer for byte-level BPE vocabularies (tokenizer.ggml.model "gpt2") and
 * SentencePiece-style ones ("llama", with scores, byte fallback and the U+2581 space marker): the
 * same special-token splitting, pre-tokenizer or space escaping, merges, BOS/EOS rules and
 * token-to-piece decoding as llama-vocab.cpp, so a prompt gets the ids llama.cpp would feed the model.
 */
export class Tokenizer {
  readonly vocabSize: number;
  readonly bosId: number | null;
  readonly eosId: number | null;
  readonly eotId: number | null;
  /** The fill-in-the-middle markers, or null for a vocabulary without all three. */
  readonly fim: FimTokens | null;
  readonly addBos: boolean;
  readonly addEos: boolean;
  readonly pre: string;
  readonly model: TokenizerModel;
  /** SentencePiece: a space is put before text that starts the input or follows a special token. */
  readonly addSpacePrefix: boolean;

  private readonly texts: string[];
  private readonly attrs: Uint16Array;
  private readonly eog: Set<number>;
  private readonly tokenToId: Map<string, number>;
  /** Byte-level BPE only. */
  private readonly merges: MergeTable | undefined;
  private readonly preTokenizer: PreTokenizer | undefined;
  /** SentencePiece only. */
  private readonly spm: SpmVocab | undefined;
  private readonly specials: SpecialTokenMatcher;
  private readonly wordCache = new Map<string, number[]>();
  private parsedTexts: readonly string[] | undefined;
  private longestEntry: number | undefined;
  private readonly pieceCache: [Array<Uint8Array | undefined>, Array<Uint8Array | undefined>];

  private constructor(spec: TokenizerSpec) {
    const unsupported = unsupportedTokenizer(spec.model, spec.pre);
    if (unsupported !== null) throw new TokenizerError(unsupported);
    this.model = spec.model as TokenizerModel;
    const vocab = vocabAttributes(spec);
    this.texts = vocab.texts;
    this.attrs = vocab.attrs;
    this.eog = vocab.eogIds;
    this.eotId = vocab.eotId;
    this.fim = vocab.fim;
    this.vocabSize = vocab.texts.length;
    this.bosId = spec.bosId;
    this.eosId = spec.eosId;
    this.addBos = spec.addBos;
    this.addEos = spec.addEos;
    this.pre = spec.pre;
    this.addSpacePrefix = this.model === "llama" && spec.addSpacePrefix;
    this.tokenToId = new Map();
    this.texts.forEach((t, id) => this.tokenToId.set(t, id));
    if (this.model === "llama") {
      // llama.cpp ignores tokenizer.ggml.pre for SentencePiece vocabularies.
      this.spm = new SpmVocab(this.tokenToId, spec.scores ?? [], validId(spec.unkId, this.vocabSize));
    } else {
      this.merges = new MergeTable(this.vocabSize, this.tokenToId, spec.merges);
      this.preTokenizer = new PreTokenizer(spec.pre);
    }
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
      let afterSpecial = true; // the start of the input counts as following a special token
      for (const fragment of this.specials.partition(wellFormed(text), options.parseSpecial ?? false)) {
        if (typeof fragment === "number") out.push(fragment);
        else if (this.spm) this.spm.encode(this.spmText(restore(fragment), afterSpecial), out);
        else for (const word of this.preTokenizer!.split(restore(fragment))) this.encodeWord(word, out);
        afterSpecial = typeof fragment === "number";
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

  /**
   * Text of the ids as llama.cpp's llama_detokenize gives it: like {@link decode}, but a SentencePiece
   * vocabulary that adds a space prefix has the first token's leading space removed (unless the ids
   * start with the BOS that `removeSpecial` drops), so `detokenize(encode(text))` is `text` again.
   * llama.cpp's `clean_spaces` pass (" ," to ",", for a few BPE pre-tokenizers) is not applied.
   */
  detokenize(ids: readonly number[], options: DetokenizeOptions = {}): string {
    let list = ids;
    let removeSpace = this.addSpacePrefix;
    if (options.removeSpecial && this.addBos && list.length > 0 && list[0] === this.bosId) {
      removeSpace = false;
      list = list.slice(1);
    }
    if (options.removeSpecial && this.addEos && list.length > 0 && list[list.length - 1] === this.eosId) list = list.slice(0, -1);
    const stream = this.createStreamDecoder({ renderSpecial: options.renderSpecial });
    let text = "";
    list.forEach((id, i) => {
      let piece = this.tokenBytes(id, { renderSpecial: options.renderSpecial });
      // llama.cpp strips at most one leading space, of the first token only.
      if (i === 0 && removeSpace && piece[0] === 0x20) piece = piece.subarray(1);
      text += stream.pushBytes(piece);
    });
    return text + stream.flush();
  }

  createStreamDecoder(options: DecodeOptions = {}): StreamDecoder {
    return new StreamDecoder((id) => this.tokenBytes(id, options));
  }

  /** The vocabulary entry as stored in the GGUF (byte-level or U+2581-marked form for normal tokens). */
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

  /**
   * Fewest tokens a text of `chars` UTF-16 units can encode to: no token covers more of the input
   * than its vocabulary entry is long (a byte-level entry has a character per byte, a SentencePiece
   * one its text). Bounds a prompt's length before the work of tokenizing it. Bytes the vocabulary
   * cannot spell are dropped as llama.cpp drops them, so a text made of those encodes shorter.
   */
  fewestTokens(chars: number): number {
    if (this.longestEntry === undefined) this.longestEntry = this.texts.reduce((n, t) => Math.max(n, t.length), 1);
    return Math.ceil(chars / this.longestEntry);
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
      const whole = this.preTokenizer!.kind.ignoreMerges ? this.tokenToId.get(word) : undefined;
      if (whole !== undefined) ids.push(whole);
      else encodeWord(word, this.merges!, this.tokenToId, ids);
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
    if (attr & ATTR_NORMAL) return this.spm ? utf8.encode(text.replaceAll(SPACE_MARKER, " ")) : byteLevelToBytes(text);
    if (attr & ATTR_BYTE) return Uint8Array.of(parseInt(text.slice(3, 5), 16)); // "<0xAB>"
    return new Uint8Array(0); // unused and undefined tokens print nothing
  }

  /** A SentencePiece fragment as llama.cpp feeds it to the merger: maybe a leading space, then spaces as U+2581. */
  private spmText(fragment: string, afterSpecial: boolean): string {
    return ((this.addSpacePrefix && afterSpecial ? " " : "") + fragment).replaceAll(" ", SPACE_MARKER);
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

/**
 * Why kiln cannot tokenize for this `tokenizer.ggml.model` and `tokenizer.ggml.pre`, or null when it
 * can: for telling before a compile whether a model's tokenizer will load.
 */
export function unsupportedTokenizer(model: string, pre: string): string | null {
  if (!(MODELS as readonly string[]).includes(model)) {
    return `tokenizer model "${model}" is not supported (only byte-level BPE "gpt2" and SentencePiece "llama")`;
  }
  if (model === "gpt2") {
    try {
      preTokenizerKind(pre);
    } catch (error) {
      return (error as Error).message;
    }
  }
  return null;
}

function validId(id: number | null, size: number): number | null {
  return id !== null && id >= 0 && id < size ? id : null;
}

/** Puts literal texts back in place of their stand-ins; a stand-in with no such index stays as it is. */
function literalRestorer({ open, close, texts }: Literals): (fragment: string) => string {
  const standIn = new RegExp(`${escapeRegExp(open)}(\\d+)${escapeRegExp(close)}`, "g");
  return (fragment) =>
    fragment.includes(open)
      ? fragment.replace(standIn, (whole, index: string) => (Number(index) < texts.length ? wellFormed(texts[Number(index)]) : whole))
      : fragment;
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** Lone surrogates become U+FFFD, which is what llama.cpp receives from Node's UTF-8 conversion. */
function wellFormed(text: string): string {
  return text.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, "\ufffd");
}
