import { codepointsToByteLevel } from "./byte-level.js";
import { CUSTOM_SPLITTERS, type CustomSplitter } from "./split-custom.js";
import { RegexSplitter, SplitText } from "./split-regex.js";

/**
 * The pre-tokenizer llama.cpp picks from `tokenizer.ggml.pre` (llama-vocab.cpp, llama_vocab::impl::load
 * and the llm_tokenizer_bpe constructor). Regex strings are copied verbatim from llama.cpp, in its
 * adapted forms (e.g. (?i:...) spelled out), because llama.cpp recognises some of them by exact text.
 */
export interface PreTokenizerKind {
  /** llama.cpp's LLAMA_VOCAB_PRE_TYPE_* name, for messages. */
  type: string;
  regexes: readonly string[];
  /** Use a whole pre-token as one token when the vocabulary has it, skipping merges. */
  ignoreMerges?: boolean;
  /** llama.cpp's default for add_bos when the GGUF does not say. */
  addBosDefault?: boolean;
}

const GPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const LLAMA3 =
  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2 =
  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const DEEPSEEK3 = [
  "\\p{N}{1,3}",
  "[一-龥぀-ゟ゠-ヿ]+",
  "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
];
const GPT4O =
  "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const BLOOM = " ?[^(\\s|.,!?…。，、।۔،)]+";

const KINDS: Record<string, PreTokenizerKind> = {
  DEFAULT: {
    type: "DEFAULT",
    regexes: ["[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2, "\\p{N}+", "[0-9][0-9][0-9]"],
  },
  LLAMA3: { type: "LLAMA3", regexes: [LLAMA3], ignoreMerges: true, addBosDefault: true },
  JAIS2: {
    type: "JAIS2",
    regexes: [
      "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}",
    ],
  },
  DBRX: { type: "DBRX", regexes: [LLAMA3] },
  DEEPSEEK_LLM: {
    type: "DEEPSEEK_LLM",
    regexes: [
      "[\r\n]",
      "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
      "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
      "\\s+$",
      "[一-龥ࠀ-一가-퟿]+",
      "\\p{N}+",
    ],
  },
  DEEPSEEK3_LLM: { type: "DEEPSEEK3_LLM", regexes: DEEPSEEK3 },
  DEEPSEEK_CODER: {
    type: "DEEPSEEK_CODER",
    regexes: ["[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}"],
  },
  FALCON: {
    type: "FALCON",
    regexes: ["[\\p{P}\\$\\+<=>\\^~\\|`]+", GPT2, "[0-9][0-9][0-9]"],
  },
  STARCODER: { type: "STARCODER", regexes: ["\\p{N}", GPT2] },
  GPT2: { type: "GPT2", regexes: [GPT2] },
  QWEN2: { type: "QWEN2", regexes: [QWEN2] },
  QWEN35: {
    type: "QWEN35",
    regexes: [
      "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ],
  },
  BLOOM: { type: "BLOOM", regexes: [BLOOM] },
  CHATGLM4: { type: "CHATGLM4", regexes: [LLAMA3] },
  VIKING: { type: "VIKING", regexes: [BLOOM, "\\p{N}"] },
  TEKKEN: {
    type: "TEKKEN",
    regexes: [
      "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ],
    ignoreMerges: true,
    addBosDefault: true,
  },
  CHAMELEON: {
    type: "CHAMELEON",
    regexes: ["<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}", "[\\p{P}!-/:-@\\[-`{-~]", GPT2],
    addBosDefault: true,
  },
  GPT4O: { type: "GPT4O", regexes: [GPT4O] },
  GRANITE_EMB_MULTI: {
    type: "GRANITE_EMB_MULTI",
    regexes: [
      "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ],
    ignoreMerges: true,
  },
  SUPERBPE: { type: "SUPERBPE", regexes: ["\\p{N}+", "(?=(\\d{3})+(?!\\d))"] },
  BAILINGMOE: {
    type: "BAILINGMOE",
    regexes: ["'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"],
  },
  SEED_CODER: {
    type: "SEED_CODER",
    regexes: [
      "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ],
  },
  UFAKZEKA: {
    type: "UFAKZEKA",
    regexes: ["[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"],
  },
  LAGUNA: { type: "LAGUNA", regexes: ["[^\\n]+|[\\n]+", QWEN2] },
  EXAONE_MOE: {
    type: "EXAONE_MOE",
    regexes: [
      "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
    ],
  },
  SPARK2_5: {
    type: "SPARK2_5",
    regexes: [
      "\\p{N}{1,3}",
      "[一-龥぀-ゟ゠-ヿ]+",
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+",
      "\\p{N}",
    ],
  },
  YOUTU: {
    type: "YOUTU",
    regexes: [
      "[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+",
      "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ],
    ignoreMerges: true,
  },
  MINICPM5: {
    type: "MINICPM5",
    regexes: [
      "\\p{N}{1,3}",
      "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ],
    ignoreMerges: true,
  },
};

/** `tokenizer.ggml.pre` value -> kind, as in llama_vocab::impl::load. */
const KIND_BY_PRE_NAME: Record<string, keyof typeof KINDS> = {
  "": "DEFAULT",
  default: "DEFAULT",
  minicpm5: "MINICPM5",
  ...names("LLAMA3", "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"),
  "deepseek-llm": "DEEPSEEK_LLM",
  "deepseek-coder": "DEEPSEEK_CODER",
  ...names("DEEPSEEK3_LLM", "deepseek-v3", "hunyuan-dense", "hy_v4", "joyai-llm"),
  falcon: "FALCON",
  ...names("GPT2", "mpt", "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0"),
  ...names("GPT2", "mellum", "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe", "olmo", "jais", "exaone4"),
  ...names("GPT2", "trillion", "granite-docling"),
  "jais-2": "JAIS2",
  ...names("STARCODER", "starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"),
  ...names("QWEN2", "qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "stablelm2", "megrez", "hunyuan", "solar-open"),
  qwen35: "QWEN35",
  ...names("DBRX", "dbrx", "smaug-bpe"),
  ...names("BLOOM", "poro-chat", "bloom", "gpt3-finnish"),
  ...names("CHATGLM4", "glm4", "chatglm-bpe"),
  viking: "VIKING",
  tekken: "TEKKEN",
  chameleon: "CHAMELEON",
  ...names("GPT4O", "gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"),
  "granite-embed-multi-97m": "GRANITE_EMB_MULTI",
  superbpe: "SUPERBPE",
  ...names("BAILINGMOE", "bailingmoe", "bailingmoe2", "llada-moe"),
  "seed-coder": "SEED_CODER",
  spark2_5: "SPARK2_5",
  youtu: "YOUTU",
  ufakzeka: "UFAKZEKA",
  "grok-2": "QWEN2",
  laguna: "LAGUNA",
  "exaone-moe": "EXAONE_MOE",
};

function names(kind: keyof typeof KINDS, ...preNames: string[]): Record<string, keyof typeof KINDS> {
  return Object.fromEntries(preNames.map((name) => [name, kind]));
}

/** Pre-tokenizers llama.cpp implements with custom code kiln has not ported (Han, digit grouping, SPM-style). */
const UNPORTED = new Set(["kimi-k2", "afmoe", "tiny_aya", "cohere2moe", "gemma4", "granite-embed-multi-311m", "sarvam-moe", "whitespace"]);

export class UnsupportedPreTokenizerError extends Error {
  constructor(pre: string, why: string) {
    super(`pre-tokenizer "${pre}" is not supported: ${why}`);
    this.name = "UnsupportedPreTokenizerError";
  }
}

export function preTokenizerKind(pre: string): PreTokenizerKind {
  if (UNPORTED.has(pre)) throw new UnsupportedPreTokenizerError(pre, "llama.cpp uses custom code kiln has not ported");
  const kind = KIND_BY_PRE_NAME[pre];
  // llama.cpp refuses unknown names too, rather than guessing a regex.
  if (kind === undefined) throw new UnsupportedPreTokenizerError(pre, "llama.cpp does not know this name");
  return KINDS[kind];
}

type Splitter = (cps: Uint32Array, offsets: number[], text: SplitText) => number[];

/** Splits text into the byte-level-encoded words BPE works on, like llama.cpp's unicode_regex_split. */
export class PreTokenizer {
  readonly kind: PreTokenizerKind;
  private readonly splitters: Splitter[];

  constructor(pre: string) {
    this.kind = preTokenizerKind(pre);
    this.splitters = this.kind.regexes.map((source): Splitter => {
      const custom: CustomSplitter | undefined = CUSTOM_SPLITTERS.get(source);
      if (custom) return (cps, offsets) => custom(cps, offsets);
      const regex = new RegexSplitter(source);
      return (cps, offsets, text) => regex.split(cps, offsets, text);
    });
  }

  /** Words of `text`, each already mapped through the GPT-2 byte encoding. */
  split(text: string): string[] {
    const cps = toCodepoints(text);
    const splitText = new SplitText(cps);
    let offsets = [cps.length];
    for (const splitter of this.splitters) offsets = splitter(cps, offsets, splitText);
    const words: string[] = [];
    let start = 0;
    for (const length of offsets) {
      words.push(codepointsToByteLevel(cps, start, start + length));
      start += length;
    }
    return words;
  }
}

function toCodepoints(text: string): Uint32Array {
  const cps = new Uint32Array(text.length);
  let n = 0;
  for (let i = 0; i < text.length; i++) {
    const cp = text.codePointAt(i)!;
    cps[n++] = cp;
    if (cp > 0xffff) i++;
  }
  return cps.subarray(0, n);
}
