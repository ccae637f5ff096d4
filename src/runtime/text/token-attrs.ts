import type { TokenizerSpec } from "../artifact/index.js";

/** llama.cpp's llama_token_attr bits. */
export const ATTR_UNDEFINED = 0;
export const ATTR_UNKNOWN = 1 << 0;
export const ATTR_UNUSED = 1 << 1;
export const ATTR_NORMAL = 1 << 2;
export const ATTR_CONTROL = 1 << 3;
export const ATTR_USER_DEFINED = 1 << 4;
export const ATTR_BYTE = 1 << 5;
/** Whitespace before the token is dropped when text is split around it. */
export const ATTR_LSTRIP = 1 << 7;
/** Whitespace after the token is dropped when text is split around it. */
export const ATTR_RSTRIP = 1 << 8;

/** GGUF token type (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte) -> attribute. */
const ATTR_BY_TYPE: Record<number, number> = {
  1: ATTR_NORMAL,
  2: ATTR_UNKNOWN,
  3: ATTR_CONTROL,
  4: ATTR_USER_DEFINED,
  5: ATTR_UNUSED,
  6: ATTR_BYTE,
};

// Token texts llama.cpp recognises by name when the GGUF does not give the id (llama_vocab::impl::load).
const EOT_TEXTS = [
  "<|eot_id|>",
  "<|im_end|>",
  "<|end|>",
  "<end_of_turn>",
  "<|endoftext|>",
  "<|end_of_text|>",
  "<EOT>",
  "_<EOT>",
  "[EOT]",
  "<｜end▁of▁sentence｜>",
  "<end_of_utterance>",
];
const EOM_TEXTS = ["<|eom_id|>"];
const FIM_TEXTS = [
  ["<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>"],
  ["<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>"],
  ["<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>"],
];
// These three also end generation in llama.cpp.
const FIM_EOG_TEXTS = [
  ["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"],
  ["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"],
  ["<|file_sep|>"],
];
const EOG_TEXTS = new Set([
  "<|eot_id|>",
  "<|im_end|>",
  "<|end|>",
  "<|return|>",
  "<|call|>",
  "<|flush|>",
  "<|calls|>",
  "<end_of_turn>",
  "<|endoftext|>",
  "</s>",
  "<|eom_id|>",
  "<EOT>",
  "_<EOT>",
  "[EOT]",
  "[EOS]",
  "<|end_of_text|>",
  "<end_of_utterance>",
  "<eos>",
  "<turn|>",
  "<|tool_response>",
  "<｜end▁of▁sentence｜>",
  "[e~[",
]);
// gpt-oss: llama.cpp always renders these, whatever their type says.
const ALWAYS_RENDERED = new Set(["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"]);

export interface VocabAttributes {
  /** Token texts as llama.cpp stores them (empty ones renamed "[EMPTY_<id>]"). */
  texts: string[];
  attrs: Uint16Array;
  eogIds: Set<number>;
  eotId: number | null;
  /** The fill-in-the-middle markers, when the vocabulary has all three; null otherwise. */
  fim: FimTokens | null;
}

/** A vocabulary's fill-in-the-middle markers: the prompt is `prefix <prefix text> suffix <suffix text> middle`. */
export interface FimTokens {
  prefix: number;
  suffix: number;
  middle: number;
  /** The repository-name marker of repository-level prompts (Qwen2.5-Coder's `<|repo_name|>`), or null. */
  repo: number | null;
  /** The file separator of repository-level prompts (`<|file_sep|>`), or null. */
  fileSeparator: number | null;
}

/**
 * Token attributes and end-of-generation ids after llama.cpp's load-time fix-ups: tokens that look
 * like end-of-turn or fill-in-middle markers are forced to CONTROL even when the GGUF typed them
 * NORMAL, which changes both how text containing them is split and whether they decode to text.
 * Where llama.cpp walks an unordered map we go by ascending id, which only matters for vocabularies
 * with two different texts for the same role.
 */
export function vocabAttributes(spec: TokenizerSpec): VocabAttributes {
  const texts = spec.tokens.map((t, id) => (t === "" ? `[EMPTY_${id}]` : t));
  const attrs = new Uint16Array(texts.length);
  const hasTypes = spec.tokenTypes.length >= texts.length;
  for (let id = 0; id < texts.length; id++) {
    attrs[id] = hasTypes ? (ATTR_BY_TYPE[spec.tokenTypes[id]] ?? ATTR_UNDEFINED) : ATTR_NORMAL;
  }
  const byText = new Map<string, number>();
  texts.forEach((t, id) => byText.set(t, id));
  const forceControl = (id: number) => (attrs[id] |= ATTR_CONTROL);
  const firstOf = (candidates: readonly string[]): number | null => {
    let found: number | null = null;
    for (const t of candidates) {
      const id = byText.get(t);
      if (id !== undefined && (found === null || id < found)) found = id;
    }
    return found;
  };

  let eotId = validId(spec.eotId, texts.length);
  if (eotId === null) {
    eotId = firstOf(EOT_TEXTS);
    if (eotId !== null) forceControl(eotId);
  }
  const eomId = firstOf(EOM_TEXTS);
  if (eomId !== null) forceControl(eomId);
  // The GGUF's own ids come first; a vocabulary without them is searched by text, as llama.cpp does.
  const fimIds = FIM_TEXTS.map((list, i) => {
    const id = validId(spec.fimIds?.[i] ?? null, texts.length) ?? firstOf(list);
    if (id !== null) forceControl(id);
    return id;
  });
  const [prefix, suffix, middle] = fimIds;
  const [, repo, fileSeparator] = FIM_EOG_TEXTS.map(firstOf);
  const fim = prefix !== null && suffix !== null && middle !== null ? { prefix, suffix, middle, repo, fileSeparator } : null;

  const eogIds = new Set<number>();
  for (const list of FIM_EOG_TEXTS) {
    const id = firstOf(list);
    if (id === null) continue;
    forceControl(id);
    eogIds.add(id);
  }
  texts.forEach((t, id) => {
    if (!EOG_TEXTS.has(t)) return;
    eogIds.add(id);
    forceControl(id);
  });
  texts.forEach((t, id) => {
    if (ALWAYS_RENDERED.has(t)) attrs[id] = ATTR_USER_DEFINED;
  });
  for (const id of [validId(spec.eosId, texts.length), eotId, eomId]) if (id !== null) eogIds.add(id);

  dropAmbiguousEogs(texts, attrs, eogIds);
  stripAttributesByName(spec, texts, attrs);
  return { texts, attrs, eogIds, eotId, fim };
}

/**
 * llama.cpp's two special cases: with gpt-oss/solar-open call markers "<|end|>" does not end
 * generation, and with gemma4's "<|tool_response>" "</s>" does not.
 */
function dropAmbiguousEogs(texts: string[], attrs: Uint16Array, eogIds: Set<number>): void {
  const eogText = new Map<string, number>();
  for (const id of eogIds) eogText.set(texts[id], id);
  const end = eogText.get("<|end|>");
  const hasCall = eogText.has("<|call|>") || eogText.has("<|calls|>");
  if (end !== undefined && hasCall && (eogText.has("<|return|>") || eogText.has("<|flush|>"))) {
    eogIds.delete(end);
    attrs[end] = ATTR_USER_DEFINED;
  }
  const closing = eogText.get("</s>");
  if (closing !== undefined && eogText.has("<|tool_response>")) {
    eogIds.delete(closing);
    attrs[closing] = ATTR_NORMAL;
  }
}

/**
 * llama.cpp's per-model token attributes (the end of llama_vocab::impl::load): a model whose
 * `general.name` says Phi-3 has every special token (control, user-defined, unknown) swallow the
 * whitespace after it, "</s>" too, but not "<unk>", "<s>" or "<|endoftext|>". So "<|user|>\n" in a
 * Phi-3 prompt tokenizes as if the newline were not there.
 */
function stripAttributesByName(spec: TokenizerSpec, texts: string[], attrs: Uint16Array): void {
  const name = (spec.modelName ?? "").toLowerCase();
  if (!name.includes("phi-3") && !name.includes("phi3")) return;
  const special = ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN;
  for (let id = 0; id < texts.length; id++) if (attrs[id] & special) attrs[id] |= ATTR_RSTRIP;
  const byText = new Map<string, number>();
  texts.forEach((t, id) => byText.set(t, id));
  const set = (text: string, on: boolean) => {
    const id = byText.get(text);
    if (id !== undefined) attrs[id] = on ? attrs[id] | ATTR_RSTRIP : attrs[id] & ~ATTR_RSTRIP;
  };
  set("</s>", true);
  for (const text of ["<unk>", "<s>", "<|endoftext|>"]) set(text, false);
}

function validId(id: number | null, size: number): number | null {
  return id !== null && id >= 0 && id < size ? id : null;
}
