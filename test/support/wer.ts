/**
 * Word error rate for comparing transcripts: word-level Levenshtein distance over the reference's
 * word count, after the same light English normalization of both sides (a simplified version of
 * Whisper's EnglishTextNormalizer: case, punctuation, numbers as digits, a few spellings).
 */

const NUMBER_WORDS: Record<string, string> = {
  zero: "0",
  one: "1",
  two: "2",
  three: "3",
  four: "4",
  five: "5",
  six: "6",
  seven: "7",
  eight: "8",
  nine: "9",
  ten: "10",
  eleven: "11",
  twelve: "12",
  thirteen: "13",
  fourteen: "14",
  fifteen: "15",
  sixteen: "16",
  seventeen: "17",
  eighteen: "18",
  nineteen: "19",
  twenty: "20",
  thirty: "30",
  forty: "40",
  fifty: "50",
  sixty: "60",
  seventy: "70",
  eighty: "80",
  ninety: "90",
};
const TENS = new Set(["20", "30", "40", "50", "60", "70", "80", "90"]);

/** Spelling variants that Whisper and speech synthesis disagree on without being wrong. */
const SPELLINGS: Record<string, string> = { okay: "ok", "o'clock": "oclock", grey: "gray", mr: "mister", mrs: "missus", dr: "doctor" };

/** Lowercase, drop punctuation (keeping apostrophes inside words), numbers as digits, one space between words. */
export function normalizeText(text: string): string[] {
  const words = text
    .toLowerCase()
    .replace(/[\u2018\u2019]/g, "'")
    .replace(/(\d),(\d)/g, "$1$2")
    .replace(/-/g, " ")
    .replace(/[^\p{L}\p{N}'\s]/gu, " ")
    .split(/\s+/)
    .map((w) => w.replace(/^'+|'+$/g, ""))
    .filter((w) => w.length > 0)
    .map((w) => SPELLINGS[w] ?? NUMBER_WORDS[w] ?? w);
  return joinTensAndUnits(words).map((w) => SPELLINGS[w] ?? w);
}

/** "20 5" (from "twenty five") -> "25", so spelled and written numbers compare equal. */
function joinTensAndUnits(words: string[]): string[] {
  const out: string[] = [];
  for (const word of words) {
    const previous = out[out.length - 1];
    if (previous !== undefined && TENS.has(previous) && /^[1-9]$/.test(word)) out[out.length - 1] = String(Number(previous) + Number(word));
    else out.push(word);
  }
  return out;
}

/** Edit distance between two word sequences (substitutions, insertions, deletions all cost 1). */
export function wordEditDistance(reference: string[], hypothesis: string[]): number {
  let previous = Array.from({ length: hypothesis.length + 1 }, (_, j) => j);
  for (let i = 1; i <= reference.length; i++) {
    const current = [i];
    for (let j = 1; j <= hypothesis.length; j++) {
      const substitution = previous[j - 1] + (reference[i - 1] === hypothesis[j - 1] ? 0 : 1);
      current.push(Math.min(substitution, previous[j] + 1, current[j - 1] + 1));
    }
    previous = current;
  }
  return previous[hypothesis.length];
}

/**
 * Word error rate of `hypothesis` against `reference`, both normalized: edits / reference words.
 * An empty reference gives 0 for an empty hypothesis and 1 otherwise.
 */
export function wordErrorRate(reference: string, hypothesis: string): number {
  const ref = normalizeText(reference);
  const hyp = normalizeText(hypothesis);
  if (ref.length === 0) return hyp.length === 0 ? 0 : 1;
  return wordEditDistance(ref, hyp) / ref.length;
}
