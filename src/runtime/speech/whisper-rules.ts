/**
 * Whisper's decoding rules, applied to one row of logits beside sampling (as openai-whisper's
 * logit filters do): suppressed tokens, a blank start, and the timestamp grammar (timestamps come in
 * pairs and never decrease, the first one is at most `maxInitialTimestampIndex`, and a timestamp is
 * forced when timestamps are jointly likelier than any text token).
 */
import type { WhisperTokens } from "../artifact/index.js";
import { Xoshiro128ss } from "../sampling/index.js";
import type { DecodeRowResult, WhisperSampling } from "../speech-worker/protocol.js";

/** Token ids a Whisper model never samples, whatever the position: the model's own list plus its control tokens. */
export function alwaysSuppressed(tokens: WhisperTokens): number[] {
  const control = [tokens.transcribe, tokens.translate, tokens.startOfTranscript, tokens.startOfPrev, tokens.startOfLm, tokens.noSpeech];
  return [...new Set([...tokens.suppress, ...control.filter((t): t is number => t !== null && t >= 0)])];
}

/**
 * Applies the rules to `logits` in place (disallowed tokens become -Infinity) and returns the
 * log-sum-exp of what is left, the normaliser of the log-probabilities the choice reports.
 */
export function applyWhisperRules(logits: Float32Array, rule: WhisperSampling, tokens: WhisperTokens, suppressed: readonly number[]): number {
  filterByWhisperRules(logits, rule, tokens, suppressed);
  return logSumExp(logits, 0, logits.length);
}

/** Applies the rules to `logits` in place (disallowed tokens become -Infinity). */
export function filterByWhisperRules(logits: Float32Array, rule: WhisperSampling, tokens: WhisperTokens, suppressed: readonly number[]): void {
  if (maskByWhisperRules(logits, rule, tokens, suppressed)) forceTimestamps(logits, tokens.timestampBegin);
}

/**
 * The rules that depend only on the tokens so far: disallowed tokens of `logits` become -Infinity
 * (on a row of zeros, that makes the additive mask the decoder graph takes). Returns whether the
 * timestamp rule ({@link forceTimestamps}) applies after them.
 */
export function maskByWhisperRules(logits: Float32Array, rule: WhisperSampling, tokens: WhisperTokens, suppressed: readonly number[]): boolean {
  const tsBegin = tokens.timestampBegin;
  for (const t of suppressed) logits[t] = -Infinity;
  if (rule.sampled === 0) for (const t of tokens.suppressAtBegin) logits[t] = -Infinity;
  if (!rule.timestamps) {
    logits.fill(-Infinity, tsBegin);
    return false;
  }
  logits[tokens.noTimestamps] = -Infinity;
  if (rule.sampled > 0 && rule.lastWasTimestamp) {
    // After a pair's closing timestamp text must follow; after a lone timestamp, another or the end.
    if (rule.penultimateWasTimestamp) logits.fill(-Infinity, tsBegin);
    else logits.fill(-Infinity, 0, tokens.endOfText);
  }
  if (rule.lastTimestamp >= 0) {
    const floor = rule.lastWasTimestamp && !rule.penultimateWasTimestamp ? rule.lastTimestamp : rule.lastTimestamp + 1;
    logits.fill(-Infinity, tsBegin, Math.min(floor, logits.length));
  }
  if (rule.sampled === 0) {
    logits.fill(-Infinity, 0, tsBegin);
    if (rule.maxInitialTimestampIndex >= 0) logits.fill(-Infinity, tsBegin + rule.maxInitialTimestampIndex + 1);
  }
  return true;
}

/**
 * Timestamps are forced when their total probability beats the likeliest text token's
 * (openai-whisper compares the two log-probabilities; the normaliser cancels out).
 */
export function forceTimestamps(logits: Float32Array, tsBegin: number): void {
  let bestText = -Infinity;
  for (let i = 0; i < tsBegin; i++) if (logits[i] > bestText) bestText = logits[i];
  if (logSumExp(logits, tsBegin, logits.length) > bestText) logits.fill(-Infinity, 0, tsBegin);
}

function maxAndLogSumExp(x: Float32Array, from: number, to: number): { max: number; logSumExp: number } {
  let max = -Infinity;
  for (let i = from; i < to; i++) if (x[i] > max) max = x[i];
  if (max === -Infinity) return { max, logSumExp: -Infinity };
  let sum = 0;
  for (let i = from; i < to; i++) sum += Math.exp(x[i] - max);
  return { max, logSumExp: max + Math.log(sum) };
}

function logSumExp(x: Float32Array, from: number, to: number): number {
  return maxAndLogSumExp(x, from, to).logSumExp;
}

/** Picks the next token from rule-filtered logits: argmax at temperature 0, else a seeded draw from softmax(logits / T). */
export function chooseToken(logits: Float32Array, rule: WhisperSampling, logZ = logSumExp(logits, 0, logits.length)): { token: number; logprob: number } {
  let token = 0;
  if (rule.temperature <= 0) {
    token = likeliestId(logits);
  } else {
    const inv = 1 / rule.temperature;
    let max = -Infinity;
    for (let i = 0; i < logits.length; i++) if (logits[i] > max) max = logits[i];
    let total = 0;
    for (let i = 0; i < logits.length; i++) total += Math.exp((logits[i] - max) * inv);
    let draw = Xoshiro128ss.fromSeed(rule.seed, rule.sampled).nextFloat() * total;
    token = -1;
    for (let i = 0; i < logits.length; i++) {
      const p = Math.exp((logits[i] - max) * inv);
      if (p === 0) continue;
      token = i;
      draw -= p;
      if (draw <= 0) break;
    }
  }
  return { token, logprob: logits[token] - logZ };
}

/**
 * The `n` likeliest tokens of rule-filtered logits with their log-probabilities, likeliest first; on
 * equal logits the lower id comes first (the order beam search breaks ties in).
 */
export function likeliestTokens(logits: Float32Array, n: number, logZ = logSumExp(logits, 0, logits.length)): { tokens: number[]; logprobs: number[] } {
  const tokens = likeliestIds(logits, n);
  return { tokens, logprobs: tokens.map((t) => logits[t] - logZ) };
}

/** The ids of the `n` highest logits, highest first; on equal logits the lower id first. */
export function likeliestIds(logits: Float32Array, n: number): number[] {
  const count = Math.min(n, logits.length);
  const tokens: number[] = [];
  // Insertion into a short sorted list: n is a few beams, the vocabulary tens of thousands.
  for (let i = 0; i < logits.length; i++) {
    const x = logits[i];
    if (tokens.length === count && !(x > logits[tokens[count - 1]])) continue;
    let at = tokens.length === count ? count - 1 : tokens.length;
    while (at > 0 && x > logits[tokens[at - 1]]) at--;
    if (tokens.length === count) tokens.pop();
    tokens.splice(at, 0, i);
  }
  return tokens;
}

/** The id of the highest logit (the lowest such id on a tie): greedy decoding's choice. */
export function likeliestId(logits: Float32Array): number {
  let token = 0;
  for (let i = 1; i < logits.length; i++) if (logits[i] > logits[token]) token = i;
  return token;
}

/** Probability of the no-speech token in the raw logits after <|startoftranscript|>. */
export function noSpeechProbability(logits: Float32Array, tokens: WhisperTokens): number {
  return Math.exp(logits[tokens.noSpeech] - logSumExp(logits, 0, logits.length));
}

/** The likeliest language among the model's language tokens, with its probability among them. */
export function likeliestLanguage(logits: Float32Array, tokens: WhisperTokens): { code: string; probability: number } | undefined {
  const entries = Object.entries(tokens.languages);
  if (entries.length === 0) return undefined;
  let max = -Infinity;
  for (const [, id] of entries) max = Math.max(max, logits[id]);
  let total = 0;
  let best = entries[0];
  for (const entry of entries) {
    total += Math.exp(logits[entry[1]] - max);
    if (logits[entry[1]] > logits[best[1]]) best = entry;
  }
  return { code: best[0], probability: Math.exp(logits[best[1]] - max) / total };
}

/** Everything a decode row asks of its logits row: language, no-speech probability, then the rules and the choice. */
export function readRow(
  row: Float32Array,
  want: { sample: WhisperSampling | null; candidates?: number; noSpeech?: boolean; detectLanguage?: boolean },
  tokens: WhisperTokens,
  suppressed: readonly number[],
): DecodeRowResult {
  const result: DecodeRowResult = {};
  if (want.noSpeech) result.noSpeechProb = noSpeechProbability(row, tokens);
  if (want.detectLanguage) result.language = likeliestLanguage(row, tokens);
  if (want.sample) {
    const logits = row.slice();
    const logZ = applyWhisperRules(logits, want.sample, tokens, suppressed);
    if (want.candidates) result.candidates = likeliestTokens(logits, want.candidates, logZ);
    else Object.assign(result, chooseToken(logits, want.sample, logZ));
  }
  return result;
}
