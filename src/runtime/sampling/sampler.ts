import { resolveSamplingParams, type ResolvedSamplingParams, type SamplingParams } from "./params.js";
import * as fe from "./fast-exp.js";
import { randomSeed, Xoshiro128ss } from "./prng.js";
import { type CandidateRow, denseCandidates, type LogitAdjustments, restoreDense } from "./candidates.js";

/** A token and its log probability. */
export interface TokenIdLogprob {
  token: number;
  logprob: number;
}

/** What {@link SequenceSampler.sample} picked. */
export interface SampleResult {
  token: number;
  /** Raw log probability of `token` (only when logprobs was asked for). */
  logprob?: number;
  /**
   * The top_logprobs most likely tokens by raw log probability, descending, lowest id first on
   * ties (only when logprobs was asked for; empty when top_logprobs is 0).
   */
  top?: TokenIdLogprob[];
}

export interface SequenceSamplerOptions {
  /**
   * Sub-stream of the seed: sequences sharing a seed (the n choices of one request) should use
   * different streams (e.g. the choice index) to get different yet reproducible samples. Default 0.
   */
  stream?: number;
  /**
   * The prompt's token ids, for repetition_penalty (each distinct id penalized once, like a
   * generated token). Read only when the penalty is on; without them only generated tokens count.
   * Default none.
   */
  promptIds?: ArrayLike<number>;
  /** The model's end tokens, kept from being sampled as `min_tokens` and `ignore_eos` ask. Default none. */
  endIds?: readonly number[];
}

/**
 * Candidates are the tokens whose temperature-scaled logit is within this of the maximum: each
 * dropped token has relative weight < e^-40 ≈ 4e-18, so even a 256k vocabulary loses < 1e-12 of
 * the probability mass, far below what float32 logits resolve.
 */
const CUTOFF = 40;
/** Ranges this small are finished by insertion sort in the selection routines. */
const SMALL = 16;
// Module-local copies: TS loaders that emit CommonJS (tsx, vitest) turn every use of an import
// into a property read through a getter, which costs several times the loop bodies below.
const fastExp = fe.fastExp;
const EXP_TABLE = fe.EXP_TABLE;
const EXP_STEP = fe.EXP_STEP;
const EXP_INV_STEP = fe.EXP_INV_STEP;
const EXP_MIN_ARG = fe.EXP_MIN_ARG;

/**
 * top_k and top_p locate their boundary with a histogram of the candidates' scaled logits x, in
 * the bins of the exp table (ln2/64 ≈ 0.011 wide), then select exactly inside the one boundary
 * bin only.
 */
const BINS = EXP_TABLE.length;
const LAST_BIN = BINS - 1;

// Scratch shared by every sampler of this thread (sampling is synchronous, so never re-entered):
// one sequence's sample() call at a time uses it, and it grows to the largest vocabulary seen.
let candIds = new Int32Array(0);
let candVals = new Float64Array(0);
let candBins = new Uint16Array(0);
let edgeIds = new Int32Array(0);
let edgeVals = new Float64Array(0);
const binCount = new Int32Array(BINS);
const binWeight = new Float64Array(BINS);

function scratch(n: number): void {
  if (candIds.length < n) {
    candIds = new Int32Array(n);
    candVals = new Float64Array(n);
    candBins = new Uint16Array(n);
    edgeIds = new Int32Array(n);
    edgeVals = new Float64Array(n);
  }
}

/**
 * Samples the tokens of one sequence. Construct one per sequence (per choice), then call
 * {@link sample} once per model step with that sequence's row of logits.
 *
 * Per call, in this order:
 * 1. logit_bias is added;
 * 2. repetition_penalty (HF transformers' and vLLM's): for each distinct token of the prompt (when
 *    given, {@link SequenceSamplerOptions.promptIds}) or generated so far,
 *    `logit[t] = logit[t] > 0 ? logit[t] / p : logit[t] * p`;
 * 3. presence and frequency penalties are subtracted, for the tokens generated so far
 *    (`logit[t] -= presence * (count[t] > 0) + frequency * count[t]`);
 * 4. temperature 0: greedy, the argmax (lowest id on ties) is returned;
 * 5. logits are divided by the temperature;
 * 6. top_k keeps the k highest;
 * 7. softmax;
 * 8. top_p keeps the smallest set of most probable tokens with cumulative probability >= top_p
 *    (at least one);
 * 9. min_p drops tokens with p < min_p * p_max;
 * 10. the survivors are renormalized and one is drawn with the sequence's seeded generator.
 *
 * Logprobs (when asked for) are the log-softmax of the raw logits, before any of the above.
 *
 * Nothing vocabulary-sized is sorted or allocated per call: only tokens within {@link CUTOFF} of
 * the maximum scaled logit become candidates; top_k and top_p find their boundary with a
 * histogram of the candidates and then select exactly (quickselect) within the boundary bin
 * only; exps use a table-based exp (relative error < 1e-13); scratch buffers are shared by all
 * samplers of the thread.
 */
export class SequenceSampler {
  readonly params: ResolvedSamplingParams;
  /** The seed in use: the one asked for, or the random one drawn for this sequence. */
  readonly seed: number;
  private readonly rng: Xoshiro128ss;
  // Generated tokens: each distinct token once in penIds, its count in penCounts, its index there
  // in penIndex (arrays, so the penalty loop runs over arrays rather than a Map).
  private readonly penIndex = new Map<number, number>();
  private readonly penIds: number[] = [];
  private readonly penCounts: number[] = [];
  private total = 0;
  // Distinct tokens of the prompt and the output, for repetition_penalty (kept only when it is on).
  private readonly repSeen = new Set<number>();
  private readonly repIds: number[] = [];
  // Original values of the logits modified by bias and penalties, restored before returning.
  private modIds: number[] = [];
  private modVals: number[] = [];
  private readonly topIds: Int32Array;
  private readonly topVals: Float64Array;
  private readonly endIds: readonly number[];
  /** The last generated tokens, as many as the longest bad word's prefix (only with `bad_words_ids`). */
  private readonly recent: number[] = [];
  private readonly recentKept: number;

  /** Throws {@link SamplingParamsError} when `params` are invalid. */
  constructor(params: SamplingParams = {}, options: SequenceSamplerOptions = {}) {
    this.params = resolveSamplingParams(params);
    this.seed = this.params.seed ?? randomSeed();
    this.rng = Xoshiro128ss.fromSeed(this.seed, options.stream ?? 0);
    this.topIds = new Int32Array(this.params.topLogprobs);
    this.topVals = new Float64Array(this.params.topLogprobs);
    this.endIds = options.endIds ?? [];
    this.recentKept = this.params.badWords.reduce((n, w) => Math.max(n, w.prefix.length), 0);
    const prompt = options.promptIds;
    if (this.params.repetitionPenalty !== 1 && prompt) for (let i = 0; i < prompt.length; i++) this.rememberSeen(prompt[i]);
  }

  private rememberSeen(token: number): void {
    if (this.repSeen.has(token)) return;
    this.repSeen.add(token);
    this.repIds.push(token);
  }

  /**
   * Records a token as generated, for the penalties. {@link sample} already records what it
   * returns: call this only for tokens that enter the sequence without being sampled here.
   */
  accept(token: number): void {
    const i = this.penIndex.get(token);
    if (i === undefined) {
      this.penIndex.set(token, this.penIds.length);
      this.penIds.push(token);
      this.penCounts.push(1);
    } else {
      this.penCounts[i]++;
    }
    this.total++;
    if (this.params.repetitionPenalty !== 1) this.rememberSeen(token);
    if (this.recentKept > 0) {
      this.recent.push(token);
      if (this.recent.length > this.recentKept) this.recent.shift();
    }
  }

  /** The tokens the next sample may not be: end tokens before `min_tokens` (or with `ignore_eos`), `stop_token_ids` before `min_tokens`, bad words' last tokens. */
  private bannedNow(): number[] {
    const out: number[] = [];
    if (this.endBanned) out.push(...this.endIds);
    if (this.stopBanned) out.push(...this.params.stopIds);
    if (this.params.badWords.length > 0) out.push(...this.badWordEnds());
    return out;
  }

  /** Tokens that would complete a bad word now: the last of each whose other tokens end the output. */
  private badWordEnds(): number[] {
    const out: number[] = [];
    const { recent } = this;
    for (const { prefix, last } of this.params.badWords) {
      if (prefix.length > recent.length) continue;
      let matches = true;
      for (let i = 0, at = recent.length - prefix.length; i < prefix.length && matches; i++) matches = recent[at + i] === prefix[i];
      if (matches) out.push(last);
    }
    return out;
  }

  /** How many times `token` has been generated so far. */
  countOf(token: number): number {
    const i = this.penIndex.get(token);
    return i === undefined ? 0 : this.penCounts[i];
  }

  /** Number of tokens generated so far (sampled or accepted). */
  get generated(): number {
    return this.total;
  }

  /** Whether the next token may not be an end token (`min_tokens` not reached, or `ignore_eos`). */
  private get endBanned(): boolean {
    return this.total < this.params.endTokensFrom;
  }

  /** Whether the next token may not be one of the request's `stop_token_ids` (`min_tokens` not reached). */
  private get stopBanned(): boolean {
    return this.total < this.params.stopTokensFrom && this.params.stopIds.length > 0;
  }

  /**
   * Picks the next token from one row of logits (vocabulary size) and records it as generated.
   * The row is used as scratch: the few entries touched by bias and penalties are modified
   * during the call and restored before it returns, so afterwards it holds its original values.
   */
  sample(logits: Float32Array): SampleResult {
    const vocab = logits.length;
    if (vocab === 0) throw new RangeError("cannot sample from an empty row of logits");
    const p = this.params;

    let lse = 0;
    let nTop = 0;
    if (p.logprobs) {
      lse = rawLogSumExp(logits);
      nTop = rawTop(logits, this.topIds, this.topVals);
    }

    // 1-3: bias and penalties, remembering the original values.
    let nMod = 0;
    const { modIds, modVals } = this;
    const { biasIds, biasValues } = p;
    for (let i = 0; i < biasIds.length; i++) {
      const id = biasIds[i];
      if (id >= vocab) break; // ascending
      modIds[nMod] = id;
      modVals[nMod++] = logits[id];
      logits[id] += biasValues[i];
    }
    for (const id of this.bannedNow()) {
      if (id >= vocab) continue;
      modIds[nMod] = id;
      modVals[nMod++] = logits[id];
      logits[id] = -Infinity;
    }
    const repetition = p.repetitionPenalty;
    if (repetition !== 1) {
      const { repIds } = this;
      for (let i = 0; i < repIds.length; i++) {
        const id = repIds[i];
        if (id < 0 || id >= vocab) continue;
        const v = logits[id];
        modIds[nMod] = id;
        modVals[nMod++] = v;
        logits[id] = v > 0 ? v / repetition : v * repetition;
      }
    }
    const presence = p.presencePenalty;
    const frequency = p.frequencyPenalty;
    if (presence !== 0 || frequency !== 0) {
      const { penIds, penCounts } = this;
      for (let i = 0; i < penIds.length; i++) {
        const id = penIds[i];
        if (id < 0 || id >= vocab) continue;
        modIds[nMod] = id;
        modVals[nMod++] = logits[id];
        logits[id] -= presence + frequency * penCounts[i];
      }
    }

    const token = p.temperature === 0 ? argmax(logits) : this.draw(logits);

    for (let i = nMod - 1; i >= 0; i--) logits[modIds[i]] = modVals[i];
    this.accept(token);

    if (!p.logprobs) return { token };
    const top: TokenIdLogprob[] = new Array(nTop);
    for (let i = 0; i < nTop; i++) top[i] = { token: this.topIds[i], logprob: this.topVals[i] - lse };
    return { token, logprob: logits[token] - lse, top };
  }

  /**
   * Steps 1-3 as sparse entries for a device that applies them before its top candidates (see
   * {@link sampleCandidates}): bias, repetition and presence/frequency merged per token id.
   */
  logitAdjustments(vocab: number): LogitAdjustments {
    const out: LogitAdjustments = { ids: [], bias: [], repetition: [], subtract: [] };
    const at = new Map<number, number>();
    const entry = (id: number): number => {
      let i = at.get(id);
      if (i === undefined) {
        at.set(id, (i = out.ids.length));
        out.ids.push(id);
        out.bias.push(0);
        out.repetition.push(1);
        out.subtract.push(0);
      }
      return i;
    };
    const p = this.params;
    for (let i = 0; i < p.biasIds.length && p.biasIds[i] < vocab; i++) out.bias[entry(p.biasIds[i])] += p.biasValues[i];
    for (const id of this.bannedNow()) if (id < vocab) out.bias[entry(id)] = -Infinity;
    if (p.repetitionPenalty !== 1) for (const id of this.repIds) if (id >= 0 && id < vocab) out.repetition[entry(id)] = p.repetitionPenalty;
    if (p.presencePenalty !== 0 || p.frequencyPenalty !== 0) {
      for (let i = 0; i < this.penIds.length; i++) {
        const id = this.penIds[i];
        if (id >= 0 && id < vocab) out.subtract[entry(id)] = p.presencePenalty + p.frequencyPenalty * this.penCounts[i];
      }
    }
    return out;
  }

  /**
   * {@link sample} from a device's candidates for one row, whose adjusted logits already carry this
   * sequence's {@link logitAdjustments} and constraint mask: steps 4-10 over the candidates only
   * (the probability mass beyond them is left out), log probabilities against the row's
   * log-normalizer. Records the token as generated.
   */
  sampleCandidates(row: CandidateRow, vocab: number): SampleResult {
    if (row.ids.length === 0) throw new RangeError("cannot sample from no candidates (every token masked)");
    const p = this.params;
    let token: number;
    if (p.temperature === 0) {
      token = row.ids[0];
    } else {
      const logits = denseCandidates(row, vocab);
      try {
        token = this.draw(logits);
      } finally {
        restoreDense(row);
      }
    }
    this.accept(token);
    if (!p.logprobs) return { token };
    let raw = -Infinity;
    for (let i = 0; i < row.ids.length; i++) if (row.ids[i] === token) raw = row.raw[i];
    const top: TokenIdLogprob[] = [];
    for (let i = 0; i < row.topIds.length && top.length < p.topLogprobs; i++) {
      if (row.topLogits[i] === -Infinity) break; // a masked token: as the CPU path, no number for it
      top.push({ token: row.topIds[i], logprob: row.topLogits[i] - row.logNormalizer });
    }
    return { token, logprob: raw - row.logNormalizer, top };
  }

  /** Steps 5-10 on a row with bias and penalties applied; temperature > 0. */
  private draw(logits: Float32Array): number {
    const vocab = logits.length;
    const { temperature, topK, topP, minP } = this.params;
    const nucleus = topP < 1;

    // With top_p off, min_p's threshold is known up front and can narrow the candidates (the
    // exact test below still decides; the margin keeps rounding from dropping a borderline token).
    let cut = CUTOFF;
    if (!nucleus && minP > 0) cut = Math.min(cut, -Math.log(minP) * (1 + 1e-9) + 1e-9);

    scratch(vocab);
    const ids = candIds;
    const vals = candVals;
    const bins = candBins;
    let n = collectCandidates(logits, cut * temperature, ids, vals);
    const max = out.max;
    if (!(max > -Infinity && max < Infinity)) return argmax(logits); // all -inf/NaN, or an +inf

    // vals hold logits; x = (logit - offset) * invT is the scaled logit relative to the maximum.
    let offset = max;
    let invT = 1 / temperature;

    // top_k on x (same order as the probabilities), before the exps.
    if (topK > 0 && topK < n) {
      n = selectTopK(ids, vals, bins, n, offset, invT, topK);
      offset = 0; // vals now hold x
      invT = 1;
    }

    if (!nucleus && minP === 0) {
      const z = weigh(vals, n, offset, invT);
      return this.pick(ids, vals, n, z);
    }
    n = weighAndFilter(ids, vals, bins, n, offset, invT, minP, nucleus);
    if (!nucleus) return this.pick(ids, vals, n, out.zKept);

    // top_p: the nucleus is everything in the histogram bins before the boundary bin, plus the
    // exact nucleus of the boundary bin's tokens; drawn from without compacting.
    const target = topP * out.z;
    let above = 0; // weight in bins before the boundary bin
    let edge = 0;
    while (edge < BINS && above + binWeight[edge] < target) above += binWeight[edge++];
    // Else the survivors of min_p fall short of top_p (or just by rounding): keep them all.
    if (edge === BINS) return this.pick(ids, vals, n, out.zKept);

    const q = gatherBin(ids, vals, bins, n, edge, edgeIds, edgeVals);
    const m = selectNucleus(edgeVals, edgeIds, q, target - above);
    if (m === 0) return this.pick(ids, vals, n, out.zKept); // cannot happen: the bin holds weight
    let edgeWeight = 0;
    for (let i = 0; i < m; i++) edgeWeight += edgeVals[i];
    const r = this.rng.nextFloat() * (above + edgeWeight);
    if (r < above) {
      const token = pickBelowBin(ids, vals, bins, n, edge, r);
      if (token >= 0) return token;
    }
    return this.pick(edgeIds, edgeVals, m, edgeWeight, Math.max(r - above, 0));
  }

  /**
   * Draws from ids[0, n) with weights vals[0, n) summing to z (pass `r` to use a given point in
   * [0, z) instead of a fresh random one).
   */
  private pick(ids: Int32Array, vals: Float64Array, n: number, z: number, r = this.rng.nextFloat() * z): number {
    let acc = 0;
    for (let i = 0; i < n; i++) {
      acc += vals[i];
      if (r < acc) return ids[i];
    }
    // Only reachable by rounding (z summed in another order): the last token with weight.
    for (let i = n - 1; i > 0; i--) if (vals[i] > 0) return ids[i];
    return ids[0];
  }
}

/** log(sum(exp(raw logits))), ignoring terms below max - CUTOFF (relative size < 1e-12). */
export function rawLogSumExp(logits: Float32Array): number {
  const vocab = logits.length;
  let max = -Infinity;
  for (let i = 0; i < vocab; i++) if (logits[i] > max) max = logits[i];
  if (!(max > -Infinity && max < Infinity)) return max;
  const threshold = max - CUTOFF;
  let sum = 0;
  for (let i = 0; i < vocab; i++) {
    const v = logits[i];
    if (v >= threshold) sum += fastExp(v - max);
  }
  return max + Math.log(sum);
}

/** Fills ids/vals with the ids.length highest raw logits, descending, lowest id first on ties, leaving out masked (-inf) ones; returns how many. */
export function rawTop(logits: Float32Array, ids: Int32Array, vals: Float64Array): number {
  const k = ids.length;
  if (k === 0) return 0;
  let n = 0;
  let floor = -Infinity; // the lowest kept value once full
  for (let i = 0; i < logits.length; i++) {
    const v = logits[i];
    // NaN never enters, nor a token a constraint masked out (-inf): its logprob would be no number; ties keep the lower id.
    if (v !== v || v === -Infinity || (n === k && v <= floor)) continue;
    let j = n < k ? n++ : k - 1;
    while (j > 0 && vals[j - 1] < v) {
      vals[j] = vals[j - 1];
      ids[j] = ids[j - 1];
      j--;
    }
    vals[j] = v;
    ids[j] = i;
    if (n === k) floor = vals[k - 1];
  }
  return n;
}

// The steps of SequenceSampler.draw, as small functions V8 optimizes well. Results beyond the
// return value go through `out`.
const out = { max: 0, z: 0, zKept: 0 };

/**
 * One pass over the row: the maximum (to out.max), and every token within cutT of the maximum so
 * far into ids/vals (logits); returns how many. That is a superset of the candidates (within cutT
 * of the final maximum); the extra ones are dropped by top_k or weigh next to nothing (< e^-40
 * relative, 0 below e^-48).
 */
function collectCandidates(logits: Float32Array, cutT: number, ids: Int32Array, vals: Float64Array): number {
  let max = -Infinity;
  let threshold = -Infinity;
  let n = 0;
  for (let i = 0; i < logits.length; i++) {
    const v = logits[i];
    if (v >= threshold) {
      if (v > max) {
        max = v;
        threshold = v - cutT;
      }
      ids[n] = i;
      vals[n++] = v;
    }
  }
  out.max = max;
  return n;
}

/** Histogram bin of x <= 0: the exp table index of x (clamped). */
function binOf(x: number): number {
  return x >= -EXP_MIN_ARG ? (-x * EXP_INV_STEP + 0.5) | 0 : LAST_BIN;
}

/**
 * Keeps the k (< n) largest of x = (vals - offset) * invT in ids/vals[0, k), as x, in no
 * particular order; returns k.
 */
function selectTopK(ids: Int32Array, vals: Float64Array, bins: Uint16Array, n: number, offset: number, invT: number, k: number): number {
  binCount.fill(0);
  for (let i = 0; i < n; i++) {
    const b = binOf((vals[i] - offset) * invT);
    bins[i] = b;
    binCount[b]++;
  }
  let above = 0; // candidates in bins before the boundary bin
  let edge = 0;
  while (above + binCount[edge] < k) above += binCount[edge++];
  const eIds = edgeIds;
  const eVals = edgeVals;
  let f = 0;
  let q = 0;
  for (let i = 0; i < n; i++) {
    const b = bins[i];
    if (b < edge) {
      ids[f] = ids[i];
      vals[f++] = (vals[i] - offset) * invT;
    } else if (b === edge) {
      eIds[q] = ids[i];
      eVals[q++] = (vals[i] - offset) * invT;
    }
  }
  const need = k - above;
  if (need < q) selectTop(eVals, eIds, q, need);
  for (let i = 0; i < need; i++) {
    ids[f] = eIds[i];
    vals[f++] = eVals[i];
  }
  return k;
}

/** Replaces vals[i] by w = exp((vals[i] - offset) * invT); returns their sum. */
function weigh(vals: Float64Array, n: number, offset: number, invT: number): number {
  let z = 0;
  for (let i = 0; i < n; i++) {
    const w = fastExp((vals[i] - offset) * invT);
    vals[i] = w;
    z += w;
  }
  return z;
}

/**
 * Like weigh, then keeps (compacted) only the weights >= minP, with their histogram bins in bins
 * and, when `histogram`, the bins' total weights in binWeight. Sets out.z (all weights) and
 * out.zKept (kept weights); returns how many were kept.
 *
 * min_p before top_p gives the same set as after: both keep a most-probable prefix, so in either
 * order the shorter prefix remains, as long as top_p measures against the total before min_p
 * (out.z). p < min_p * p_max <=> w < min_p, as p_max has weight exactly 1.
 */
function weighAndFilter(
  ids: Int32Array,
  vals: Float64Array,
  bins: Uint16Array,
  n: number,
  offset: number,
  invT: number,
  minP: number,
  histogram: boolean,
): number {
  if (histogram) binWeight.fill(0);
  let z = 0;
  let zKept = 0;
  let k = 0;
  for (let i = 0; i < n; i++) {
    const x = (vals[i] - offset) * invT;
    // fastExp, inlined for its table index, which is the histogram bin.
    let w = 0;
    let b = LAST_BIN;
    if (x >= -EXP_MIN_ARG) {
      b = (-x * EXP_INV_STEP + 0.5) | 0;
      const r = x + b * EXP_STEP;
      w = EXP_TABLE[b] * (1 + r * (1 + r * (0.5 + r * (1 / 6 + r * (1 / 24)))));
    }
    z += w;
    if (w >= minP) {
      ids[k] = ids[i];
      vals[k] = w;
      bins[k++] = b;
      binWeight[b] += w;
      zKept += w;
    }
  }
  out.z = z;
  out.zKept = zKept;
  return k;
}

/** Copies the entries of ids/vals[0, n) in histogram bin `bin` to eIds/eVals; returns how many. */
function gatherBin(ids: Int32Array, vals: Float64Array, bins: Uint16Array, n: number, bin: number, eIds: Int32Array, eVals: Float64Array): number {
  let q = 0;
  for (let i = 0; i < n; i++) {
    if (bins[i] === bin) {
      eIds[q] = ids[i];
      eVals[q++] = vals[i];
    }
  }
  return q;
}

/** Draws at point r among the entries in bins before `bin`; -1 if r is past them (rounding). */
function pickBelowBin(ids: Int32Array, vals: Float64Array, bins: Uint16Array, n: number, bin: number, r: number): number {
  let acc = 0;
  let last = -1;
  for (let i = 0; i < n; i++) {
    if (bins[i] < bin) {
      acc += vals[i];
      if (r < acc) return ids[i];
      last = ids[i];
    }
  }
  return last;
}

/** Index of the largest value, lowest index on ties; NaN is never chosen (0 if all are NaN). */
export function argmax(values: Float32Array): number {
  let best = 0;
  let max = -Infinity;
  for (let i = 0; i < values.length; i++) {
    if (values[i] > max) {
      max = values[i];
      best = i;
    }
  }
  return best;
}

// Bounds of the last partition3 call: [lo, lt) > pivot, [lt, gt) == pivot, [gt, hi) < pivot.
let lt = 0;
let gt = 0;

/** Three-way partition of vals[lo, hi) (and ids alongside) around `pivot`, descending. */
function partition3(vals: Float64Array, ids: Int32Array, lo: number, hi: number, pivot: number): void {
  let a = lo;
  let i = lo;
  let b = hi;
  while (i < b) {
    const x = vals[i];
    if (x > pivot) {
      if (i !== a) {
        vals[i] = vals[a];
        vals[a] = x;
        const t = ids[i];
        ids[i] = ids[a];
        ids[a] = t;
      }
      a++;
      i++;
    } else if (x < pivot) {
      b--;
      vals[i] = vals[b];
      vals[b] = x;
      const t = ids[i];
      ids[i] = ids[b];
      ids[b] = t;
    } else {
      i++;
    }
  }
  lt = a;
  gt = b;
}

/** Median of the first, middle and last values of [lo, hi). */
function pivotOf(vals: Float64Array, lo: number, hi: number): number {
  const x = vals[lo];
  const y = vals[(lo + hi) >>> 1];
  const z = vals[hi - 1];
  return x < y ? (y < z ? y : x < z ? z : x) : x < z ? x : y < z ? z : y;
}

/** Sorts vals[lo, hi) descending (ids alongside), stable. */
function insertionSort(vals: Float64Array, ids: Int32Array, lo: number, hi: number): void {
  for (let i = lo + 1; i < hi; i++) {
    const v = vals[i];
    const id = ids[i];
    let j = i;
    while (j > lo && vals[j - 1] < v) {
      vals[j] = vals[j - 1];
      ids[j] = ids[j - 1];
      j--;
    }
    vals[j] = v;
    ids[j] = id;
  }
}

/** Quickselect: moves the k largest of vals[0, n) (0 < k < n) to [0, k), in no particular order. */
export function selectTop(vals: Float64Array, ids: Int32Array, n: number, k: number): void {
  let lo = 0;
  let hi = n;
  while (hi - lo > SMALL) {
    partition3(vals, ids, lo, hi, pivotOf(vals, lo, hi));
    if (k < lt) hi = lt;
    else if (k <= gt) return;
    else lo = gt;
  }
  insertionSort(vals, ids, lo, hi);
}

/**
 * Nucleus selection: moves the smallest set of largest weights of vals[0, n) whose sum is at
 * least `target` to the front and returns its size (n if the whole range falls short, at least
 * 1). Expected linear time: a quickselect that descends into the part holding the boundary.
 */
export function selectNucleus(vals: Float64Array, ids: Int32Array, n: number, target: number): number {
  if (n <= 1) return n;
  if (!(target > 0)) {
    // Only the largest (the first one on ties).
    let best = 0;
    for (let i = 1; i < n; i++) if (vals[i] > vals[best]) best = i;
    if (best !== 0) {
      const v = vals[0];
      vals[0] = vals[best];
      vals[best] = v;
      const t = ids[0];
      ids[0] = ids[best];
      ids[best] = t;
    }
    return 1;
  }
  let lo = 0;
  let hi = n;
  let acc = 0; // sum of [0, lo), all kept and all larger than anything in [lo, n); acc < target
  while (hi - lo > SMALL) {
    partition3(vals, ids, lo, hi, pivotOf(vals, lo, hi));
    const a = lt;
    const b = gt;
    let above = 0;
    for (let i = lo; i < a; i++) above += vals[i];
    if (acc + above >= target) {
      hi = a;
      continue;
    }
    acc += above;
    for (let i = a; i < b; i++) {
      acc += vals[i];
      if (acc >= target) return i + 1;
    }
    lo = b;
  }
  insertionSort(vals, ids, lo, hi);
  for (let i = lo; i < hi; i++) {
    acc += vals[i];
    if (acc >= target) return i + 1;
  }
  return hi; // rounding: the range fell just short of its predicted sum
}
