/**
 * Sampling parameters of one generated sequence, named and bounded as in the OpenAI API (plus
 * kiln's `top_k` and `min_p`), and their validation.
 *
 * Every field is optional; `null` means the same as leaving it out (OpenAI clients send nulls).
 */
export interface SamplingParams {
  /**
   * Softmax temperature: logits are divided by it before the distribution is formed. Range 0..2,
   * default 1. Lower is more deterministic; 0 means greedy decoding (argmax, lowest token id on
   * ties), which ignores top_k, top_p, min_p and seed.
   */
  temperature?: number | null;
  /**
   * Nucleus sampling: keep the smallest set of most probable tokens whose cumulative probability
   * is at least top_p (always at least one token). Range 0..1, default 1 (off). 0 keeps only the
   * most probable token.
   */
  top_p?: number | null;
  /**
   * kiln extension: keep only the top_k most probable tokens. Integer >= 0, default 0 (off);
   * -1 is accepted as "off" too, as in vLLM.
   */
  top_k?: number | null;
  /**
   * kiln extension: drop tokens whose probability is below min_p times the probability of the
   * most probable token. Range 0..1, default 0 (off).
   */
  min_p?: number | null;
  /**
   * Subtracted once from the logit of every token that has already been generated in this
   * sequence (prompt tokens do not count). Range -2..2, default 0. Positive values push the
   * model towards new tokens.
   */
  presence_penalty?: number | null;
  /**
   * Multiplied by the number of times a token has already been generated in this sequence and
   * subtracted from its logit. Range -2..2, default 0. Positive values discourage verbatim
   * repetition.
   */
  frequency_penalty?: number | null;
  /**
   * kiln extension (vLLM's name): the logits of tokens already in the prompt or the output are
   * divided by it when positive, multiplied when negative. Range > 0 and <= 2; 1 or null is off.
   * Each distinct token is penalized once, however often it appeared. Default 1 (off).
   */
  repetition_penalty?: number | null;
  /**
   * Added to the logits of the given tokens before sampling. Keys are token ids (as decimal
   * strings in JSON), values -100..100. -100 effectively bans a token, +100 effectively forces it.
   * Ids outside the model's vocabulary are ignored by the sampler (rejected by validation when a
   * vocabulary size is given). Default none.
   */
  logit_bias?: Readonly<Record<string, number>> | null;
  /**
   * kiln extension (vLLM's): the model's end tokens cannot be sampled before this many tokens are
   * generated (the engine holds back stop strings until then too). Integer >= 0, default 0.
   */
  min_tokens?: number | null;
  /**
   * kiln extension (vLLM's and llama.cpp's): the model's end tokens are never sampled, so the output
   * ends at its token budget or a stop string. Default false.
   */
  ignore_eos?: boolean | null;
  /**
   * kiln extension (vLLM's): more tokens that end the output, as the model's end tokens do (never
   * sampled before `min_tokens`; `ignore_eos` leaves them in force). Token ids within the vocabulary,
   * at most {@link MAX_STOP_TOKEN_IDS}. Default none.
   */
  stop_token_ids?: readonly number[] | null;
  /**
   * kiln extension (vLLM's): only these tokens may be sampled, the model's end tokens included only
   * when listed. Token ids within the vocabulary, at most {@link MAX_ALLOWED_TOKEN_IDS}; applied as a
   * mask by the worker, on the CPU row and on the device. Default none (every token).
   */
  allowed_token_ids?: readonly number[] | null;
  /**
   * kiln extension (vLLM's `bad_words`, as token ids): a token that would complete one of these
   * sequences at the end of the output is never sampled (a one-token sequence is never sampled at
   * all). At most {@link MAX_BAD_WORDS} sequences of at most {@link MAX_BAD_WORD_TOKENS} ids each.
   * Default none.
   */
  bad_words_ids?: ReadonlyArray<readonly number[]> | null;
  /**
   * Seed of the sequence's random generator: the same seed and the same sequence of logits give
   * the same tokens. Any integer (values beyond 2^53 lose precision in JSON but stay
   * deterministic). Default: a random seed per sequence.
   */
  seed?: number | null;
  /**
   * Whether to return the log probability of each chosen token. Default false. Log probabilities
   * are the log-softmax of the model's raw logits, before temperature, penalties, bias and
   * filtering (vLLM's default).
   */
  logprobs?: boolean | null;
  /**
   * Number of most likely alternatives (by raw log probability) to return at each position,
   * sorted by descending log probability. Integer 0..20, default 0; requires logprobs: true.
   */
  top_logprobs?: number | null;
}

/** Bounds of the numeric parameters, inclusive. */
export const SAMPLING_LIMITS = {
  temperature: { min: 0, max: 2 },
  top_p: { min: 0, max: 1 },
  min_p: { min: 0, max: 1 },
  presence_penalty: { min: -2, max: 2 },
  frequency_penalty: { min: -2, max: 2 },
  logit_bias: { min: -100, max: 100 },
  top_logprobs: { min: 0, max: 20 },
} as const;

/** Most `stop_token_ids` of one request. */
export const MAX_STOP_TOKEN_IDS = 256;
/** Most `allowed_token_ids` of one request. */
export const MAX_ALLOWED_TOKEN_IDS = 65536;
/** Most token sequences of `bad_words_ids`, and most ids in one. */
export const MAX_BAD_WORDS = 256;
export const MAX_BAD_WORD_TOKENS = 32;

/** Bounds of repetition_penalty: above `above` (exclusive: 0 would zero every seen logit), at most `max`. */
export const REPETITION_PENALTY_LIMITS = { above: 0, max: 2 } as const;

/** Parameters with defaults filled in and logit_bias parsed. */
export interface ResolvedSamplingParams {
  temperature: number;
  topP: number;
  /** 0 = off. */
  topK: number;
  /** 0 = off. */
  minP: number;
  presencePenalty: number;
  frequencyPenalty: number;
  /** 1 = off. */
  repetitionPenalty: number;
  /** Token ids of logit_bias, in ascending order, and their biases. */
  biasIds: Int32Array;
  biasValues: Float64Array;
  /** Tokens generated before the model's end tokens may be sampled: `min_tokens`, Infinity with `ignore_eos`, else 0. */
  endTokensFrom: number;
  /** The request's own end tokens (`stop_token_ids`), and the tokens generated before they may be sampled (`min_tokens`). */
  stopIds: Int32Array;
  stopTokensFrom: number;
  /** `bad_words_ids`, each sequence split into the tokens before its last and its last. */
  badWords: Array<{ prefix: readonly number[]; last: number }>;
  /** The seed asked for, or undefined for a random one. */
  seed: number | undefined;
  logprobs: boolean;
  topLogprobs: number;
}

/** One problem found by {@link validateSamplingParams}. */
export interface SamplingProblem {
  /** The request field at fault, e.g. "temperature" or "logit_bias". */
  param: string;
  message: string;
}

export interface ValidateSamplingOptions {
  /** When given, logit_bias token ids must be below it. */
  vocabSize?: number;
}

const TOKEN_ID = /^(0|[1-9][0-9]*)$/;

function isUnset(v: unknown): v is null | undefined {
  return v === undefined || v === null;
}

/**
 * Checks sampling parameters, including their runtime types, so it can be given a parsed JSON
 * request body as is (other fields of the body are ignored). Returns every problem found, empty
 * when the parameters are valid.
 */
export function validateSamplingParams(p: unknown, options: ValidateSamplingOptions = {}): SamplingProblem[] {
  const problems: SamplingProblem[] = [];
  if (isUnset(p)) return problems;
  if (typeof p !== "object" || Array.isArray(p)) {
    problems.push({ param: "", message: "sampling parameters must be an object" });
    return problems;
  }
  const o = p as Record<string, unknown>;

  const range = (name: keyof typeof SAMPLING_LIMITS, integer = false): void => {
    const v = o[name];
    if (isUnset(v)) return;
    const { min, max } = SAMPLING_LIMITS[name];
    if (typeof v !== "number" || !Number.isFinite(v)) {
      problems.push({ param: name, message: `${name} must be a number between ${min} and ${max}` });
    } else if (integer && !Number.isInteger(v)) {
      problems.push({ param: name, message: `${name} must be an integer between ${min} and ${max}, got ${v}` });
    } else if (v < min || v > max) {
      problems.push({ param: name, message: `${name} must be between ${min} and ${max}, got ${v}` });
    }
  };
  range("temperature");
  range("top_p");
  range("min_p");
  range("presence_penalty");
  range("frequency_penalty");
  range("top_logprobs", true);

  const repetition = o.repetition_penalty;
  if (!isUnset(repetition)) {
    const { above, max } = REPETITION_PENALTY_LIMITS;
    if (typeof repetition !== "number" || !Number.isFinite(repetition) || repetition <= above || repetition > max) {
      problems.push({
        param: "repetition_penalty",
        message: `repetition_penalty must be a number above ${above} and at most ${max}, got ${String(repetition)}`,
      });
    }
  }

  const topK = o.top_k;
  if (!isUnset(topK) && (typeof topK !== "number" || !Number.isSafeInteger(topK) || topK < -1)) {
    problems.push({ param: "top_k", message: `top_k must be a non-negative integer (0 or -1 = off), got ${String(topK)}` });
  }

  const minTokens = o.min_tokens;
  if (!isUnset(minTokens) && (typeof minTokens !== "number" || !Number.isSafeInteger(minTokens) || minTokens < 0)) {
    problems.push({ param: "min_tokens", message: `min_tokens must be a non-negative integer, got ${String(minTokens)}` });
  }
  if (!isUnset(o.ignore_eos) && typeof o.ignore_eos !== "boolean") {
    problems.push({ param: "ignore_eos", message: "ignore_eos must be a boolean" });
  }

  const inVocab = (id: unknown) => typeof id === "number" && Number.isSafeInteger(id) && id >= 0 && (options.vocabSize === undefined || id < options.vocabSize);
  const size = options.vocabSize === undefined ? "" : ` (size ${options.vocabSize})`;
  /** A list of at most `most` token ids of the vocabulary; a problem names its place. */
  const idList = (name: string, value: unknown, most: number): void => {
    if (!Array.isArray(value) || value.length > most) {
      problems.push({ param: name, message: `${name} must be a list of at most ${most} token ids` });
      return;
    }
    const bad = value.findIndex((id) => !inVocab(id));
    if (bad >= 0) problems.push({ param: `${name}[${bad}]`, message: `${name}[${bad}] (${String(value[bad])}) is not a token id of the vocabulary${size}` });
  };
  if (!isUnset(o.stop_token_ids)) idList("stop_token_ids", o.stop_token_ids, MAX_STOP_TOKEN_IDS);
  if (!isUnset(o.allowed_token_ids)) {
    idList("allowed_token_ids", o.allowed_token_ids, MAX_ALLOWED_TOKEN_IDS);
    if (Array.isArray(o.allowed_token_ids) && o.allowed_token_ids.length === 0) {
      problems.push({ param: "allowed_token_ids", message: "allowed_token_ids must list at least one token id" });
    }
  }
  const badWords = o.bad_words_ids;
  if (!isUnset(badWords)) {
    if (!Array.isArray(badWords) || badWords.length > MAX_BAD_WORDS) {
      problems.push({ param: "bad_words_ids", message: `bad_words_ids must be a list of at most ${MAX_BAD_WORDS} token-id lists` });
    } else {
      badWords.forEach((w, i) => idList(`bad_words_ids[${i}]`, w, MAX_BAD_WORD_TOKENS));
    }
  }

  const seed = o.seed;
  if (!isUnset(seed) && (typeof seed !== "number" || !Number.isInteger(seed))) {
    problems.push({ param: "seed", message: `seed must be an integer, got ${String(seed)}` });
  }

  const logprobs = o.logprobs;
  if (!isUnset(logprobs) && typeof logprobs !== "boolean") {
    problems.push({ param: "logprobs", message: "logprobs must be a boolean" });
  }
  const topLogprobs = o.top_logprobs;
  if (typeof topLogprobs === "number" && topLogprobs > 0 && logprobs !== true) {
    problems.push({ param: "top_logprobs", message: "top_logprobs requires logprobs to be true" });
  }

  const bias = o.logit_bias;
  if (!isUnset(bias)) {
    if (typeof bias !== "object" || Array.isArray(bias)) {
      problems.push({ param: "logit_bias", message: "logit_bias must be an object mapping token ids to biases" });
    } else {
      const { min, max } = SAMPLING_LIMITS.logit_bias;
      for (const [key, value] of Object.entries(bias as Record<string, unknown>)) {
        if (!TOKEN_ID.test(key) || !Number.isSafeInteger(Number(key))) {
          problems.push({ param: "logit_bias", message: `logit_bias key "${key}" is not a token id (a non-negative integer)` });
        } else if (options.vocabSize !== undefined && Number(key) >= options.vocabSize) {
          problems.push({
            param: "logit_bias",
            message: `logit_bias token id ${key} is outside the vocabulary (size ${options.vocabSize})`,
          });
        }
        if (typeof value !== "number" || !Number.isFinite(value) || value < min || value > max) {
          problems.push({
            param: "logit_bias",
            message: `logit_bias value for token ${key} must be a number between ${min} and ${max}, got ${String(value)}`,
          });
        }
      }
    }
  }
  return problems;
}

/** Error thrown for invalid parameters by {@link resolveSamplingParams} and the sampler. */
export class SamplingParamsError extends RangeError {
  constructor(readonly problems: SamplingProblem[]) {
    super(`invalid sampling parameters: ${problems.map((p) => p.message).join("; ")}`);
    this.name = "SamplingParamsError";
  }
}

/** Whether `p` turns repetition_penalty on, so that the sampler needs the prompt's token ids. */
export function usesPromptIds(p: SamplingParams): boolean {
  return p.repetition_penalty != null && p.repetition_penalty !== 1;
}

/** Validates `p` (throwing {@link SamplingParamsError}) and fills in the defaults. */
export function resolveSamplingParams(p: SamplingParams = {}): ResolvedSamplingParams {
  const problems = validateSamplingParams(p);
  if (problems.length > 0) throw new SamplingParamsError(problems);
  const entries = Object.entries(p.logit_bias ?? {})
    .map(([k, v]) => [Number(k), v] as const)
    .sort((a, b) => a[0] - b[0]);
  const topK = p.top_k ?? 0;
  return {
    temperature: p.temperature ?? 1,
    topP: p.top_p ?? 1,
    topK: topK < 0 ? 0 : topK,
    minP: p.min_p ?? 0,
    presencePenalty: p.presence_penalty ?? 0,
    frequencyPenalty: p.frequency_penalty ?? 0,
    repetitionPenalty: p.repetition_penalty ?? 1,
    biasIds: Int32Array.from(entries, (e) => e[0]),
    biasValues: Float64Array.from(entries, (e) => e[1]),
    endTokensFrom: p.ignore_eos ? Infinity : (p.min_tokens ?? 0),
    stopIds: Int32Array.from(new Set(p.stop_token_ids ?? [])),
    stopTokensFrom: p.min_tokens ?? 0,
    badWords: (p.bad_words_ids ?? []).filter((w) => w.length > 0).map((w) => ({ prefix: w.slice(0, -1), last: w[w.length - 1] })),
    seed: p.seed ?? undefined,
    logprobs: p.logprobs ?? false,
    topLogprobs: p.logprobs ? (p.top_logprobs ?? 0) : 0,
  };
}
