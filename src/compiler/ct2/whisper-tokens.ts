/**
 * Whisper's tokenizer as kiln's runtime reads it (a TokenizerSpec), and its special token ids, both
 * from the model's own Hugging Face tokenizer.json (faster-whisper's layout), never from constants.
 */
import { readFileSync } from "node:fs";
import { TIME_PRECISION, type TokenizerSpec, type WhisperTokens } from "../../runtime/artifact/index.js";
import { Ct2FormatError, type Ct2Config } from "./reader.js";

interface HfTokenizer {
  model: { type: string; vocab: Record<string, number>; merges: Array<string | [string, string]> };
  added_tokens?: Array<{ id: number; content: string; special?: boolean }>;
}

/** Whisper's vocabulary size from which it is multilingual (whisper/tokenizer.py: `n_vocab >= 51865`). */
const MULTILINGUAL_VOCAB = 51865;
/** Token types as llama.cpp numbers them (manifest.ts): 1 normal, 3 control, 5 unused. */
const NORMAL = 1;
const CONTROL = 3;
const UNUSED = 5;

export function readHfTokenizer(path: string): HfTokenizer {
  let parsed: HfTokenizer;
  try {
    parsed = JSON.parse(readFileSync(path, "utf8")) as HfTokenizer;
  } catch (err) {
    throw new Ct2FormatError(path, `tokenizer.json cannot be read as JSON (${err instanceof Error ? err.message : String(err)})`);
  }
  if (parsed?.model?.type !== "BPE" || typeof parsed.model.vocab !== "object")
    throw new Ct2FormatError(path, "tokenizer.json has no BPE model (Whisper uses byte-level BPE)");
  return parsed;
}

/** Vocabulary and added tokens by id, padded to the embedding table's row count. */
export function whisperTokenizerSpec(tok: HfTokenizer, vocab: number): TokenizerSpec {
  const tokens: string[] = new Array(vocab).fill("");
  const tokenTypes: number[] = new Array(vocab).fill(UNUSED);
  for (const [text, id] of Object.entries(tok.model.vocab)) {
    if (id < vocab) [tokens[id], tokenTypes[id]] = [text, NORMAL];
  }
  for (const added of tok.added_tokens ?? []) {
    if (added.id < vocab) [tokens[added.id], tokenTypes[added.id]] = [added.content, CONTROL];
  }
  nameTimestamps(tokens, tokenTypes);
  const eos = tokens.indexOf("<|endoftext|>");
  return {
    model: "gpt2",
    // The name kiln's pre-tokenizer table (llama.cpp's) gives the GPT-2 split regex.
    pre: "gpt-2",
    tokens,
    tokenTypes,
    merges: tok.model.merges.map((m) => (Array.isArray(m) ? m.join(" ") : m)),
    bosId: null,
    eosId: eos >= 0 ? eos : null,
    eotId: null,
    padId: null,
    unkId: null,
    addBos: false,
    addEos: false,
    addSpacePrefix: false,
  };
}

/**
 * Older tokenizer.json files list no timestamp tokens: the rows after <|notimestamps|> are `<|0.00|>`,
 * `<|0.02|>`, ... (whisper/tokenizer.py), so unnamed ones are given those names as control tokens.
 */
function nameTimestamps(tokens: string[], tokenTypes: number[]): void {
  const first = tokens.indexOf("<|notimestamps|>") + 1;
  if (first === 0) return;
  for (let id = first; id < tokens.length; id++) {
    if (tokens[id] !== "") continue;
    tokens[id] = `<|${((id - first) * TIME_PRECISION).toFixed(2)}|>`;
    tokenTypes[id] = CONTROL;
  }
}

/** Special token ids by their text, and the suppression lists of config.json. */
export function whisperTokens(spec: TokenizerSpec, config: Ct2Config, path: string): WhisperTokens {
  const ids = new Map<string, number>();
  spec.tokens.forEach((t, id) => {
    if (spec.tokenTypes[id] === CONTROL && !ids.has(t)) ids.set(t, id);
  });
  const optional = (text: string) => ids.get(text) ?? null;
  const required = (...texts: string[]) => {
    for (const t of texts) if (ids.has(t)) return ids.get(t)!;
    throw new Ct2FormatError(path, `tokenizer.json has no ${texts.join(" or ")} token`);
  };
  const multilingual = spec.tokens.length >= MULTILINGUAL_VOCAB;
  return {
    endOfText: required("<|endoftext|>"),
    startOfTranscript: required("<|startoftranscript|>"),
    startOfPrev: required("<|startofprev|>"),
    startOfLm: optional("<|startoflm|>"),
    noTimestamps: required("<|notimestamps|>"),
    noSpeech: required("<|nospeech|>", "<|nocaptions|>"),
    timestampBegin: required("<|0.00|>"),
    transcribe: optional("<|transcribe|>"),
    translate: optional("<|translate|>"),
    languages: multilingual ? languageIds(ids) : {},
    suppress: config.suppress_ids ?? [],
    suppressAtBegin: config.suppress_ids_begin ?? [],
  };
}

/** `<|xx|>` (and `<|haw|>`, `<|yue|>`) tokens: lower-case letter codes only, so task tokens are left out. */
function languageIds(ids: Map<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  const tasks = new Set(["transcribe", "translate", "startoftranscript", "startofprev", "startoflm", "nospeech", "nocaptions", "notimestamps", "endoftext"]);
  for (const [text, id] of ids) {
    const m = /^<\|([a-z]{2,3})\|>$/.exec(text);
    if (m && !tasks.has(m[1])) out[m[1]] = id;
  }
  return out;
}
