/**
 * Words of a window's text tokens with their times (openai-whisper's `split_tokens_on_spaces` and
 * punctuation merging): a word starts at a token that begins with a space, at punctuation, or at
 * the first token; leading quotes and brackets join the next word, closing punctuation the previous.
 */
import type { Tokenizer } from "../../runtime/text/index.js";

const PREPEND = `"'“¿([{-`;
const APPEND = `"'.。,，!！?？:：”)]}、`;
const PUNCTUATION = `!"#$%&'()*+,-./:;<=>?@[\\]^_\`{|}~`;

export interface TimedWord {
  word: string;
  start: number;
  end: number;
  probability: number;
}

/**
 * `starts` has one entry per token plus the end of the last (seconds from the window's start);
 * `probabilities` one per token.
 */
export function wordsOfWindow(tokenizer: Tokenizer, tokens: readonly number[], starts: readonly number[], probabilities: readonly number[]): TimedWord[] {
  const groups: Array<{ text: string; from: number; to: number }> = [];
  let pending: number[] = [];
  let pendingFrom = 0;
  const flush = (to: number) => {
    const text = tokenizer.decode(pending);
    const trimmed = text.trim();
    const startsWord = text.startsWith(" ") || (trimmed.length > 0 && [...trimmed].every((c) => PUNCTUATION.includes(c))) || groups.length === 0;
    if (startsWord) groups.push({ text, from: pendingFrom, to });
    else {
      const last = groups[groups.length - 1];
      last.text += text;
      last.to = to;
    }
    pending = [];
  };
  for (let i = 0; i < tokens.length; i++) {
    if (pending.length === 0) pendingFrom = i;
    pending.push(tokens[i]);
    // Tokens that end inside a UTF-8 character wait for the rest of it.
    if (!tokenizer.decode(pending).includes("\ufffd") || i === tokens.length - 1) flush(i + 1);
  }
  const words = groups.map((g) => ({
    word: g.text,
    start: starts[g.from] ?? 0,
    end: starts[g.to] ?? starts[starts.length - 1] ?? 0,
    probability: mean(probabilities.slice(g.from, g.to)),
  }));
  return mergePunctuation(words);
}

function mergePunctuation(words: TimedWord[]): TimedWord[] {
  const out: TimedWord[] = [];
  for (let i = 0; i < words.length; i++) {
    const w = { ...words[i] };
    const bare = w.word.trim();
    if (out.length > 0 && bare.length > 0 && [...bare].every((c) => APPEND.includes(c)) && !w.word.startsWith(" ")) {
      out[out.length - 1].word += w.word;
      out[out.length - 1].end = w.end;
      continue;
    }
    const prev = out[out.length - 1];
    if (prev && [...prev.word.trim()].length > 0 && [...prev.word.trim()].every((c) => PREPEND.includes(c))) {
      out.pop();
      w.word = prev.word + w.word.replace(/^ /, "");
      w.start = prev.start;
    }
    out.push(w);
  }
  return out;
}

const mean = (xs: readonly number[]) => (xs.length === 0 ? 0 : xs.reduce((a, b) => a + b, 0) / xs.length);
