/** Wire fields -> the scheduler's GenerationRequest: token budget, sampling, and the answer plan both endpoints run. */
import type { ConstraintSpec, ThinkingBudget } from "../../runtime/constrain/index.js";
import { validateSamplingParams, type SamplingParams, type ServedModel } from "../../scheduler/index.js";
import { MAX_BAD_WORD_TOKENS } from "../../runtime/sampling/index.js";
import type { FastifyRequest } from "fastify";
import { BATCH_PRIORITY } from "../defaults.js";
import { apiError } from "../errors.js";
import { stopList, type SharedFields } from "../protocol/common.js";
import type { AnswerPlan } from "./generation.js";

/** What a route worked out from its own fields. */
export interface PlanParts {
  model: ServedModel;
  /** Unique id of the answer (`chatcmpl-…`, `cmpl-…`). */
  answerId: string;
  /** One generation per prompt (a completions request may send several), each with its budget from {@link completionBudget}. */
  prompts: Array<{ promptIds: number[]; maxTokens: number }>;
  /** Alternatives to report beside each token's log probability (0..20), or null for no log probabilities. */
  topLogprobs: number | null;
  /** Score the prompt's tokens too, with this many alternatives (completions' `echo` with `logprobs`, `prompt_logprobs`). Default: no. */
  promptLogprobs?: number | null;
  /** Rank each scored prompt token among the vocabulary (vLLM's `prompt_logprobs`). Default false. */
  promptRanks?: boolean;
  /** What the output must be (`response_format`, `guided_*`). Default none. */
  constraint?: ConstraintSpec;
  /** Most tokens a reasoning model thinks before its thinking is closed for it (see `thinkingBudgetOf`). Default none. */
  thinkingBudget?: ThinkingBudget;
  /** The output holds tool calls: a choice ends where it starts repeating a call it already made (the engine's `endRepeatedCalls`). Default false. */
  endRepeatedCalls?: boolean;
  /** Tokens the answer is expected to repeat (chat's `prediction`). Default none. */
  prediction?: number[];
  /** Milliseconds of writing after which a choice ends at its next line break (llama.cpp's `t_max_predict_ms`). Default none. */
  lineTimeLimitMs?: number;
  /** Spaces and tabs each line after a line break needs, else a choice ends there (llama.cpp's `n_indent`). Default none. */
  minIndent?: number;
}

/** The plan of a generation request's answer: a route's parts plus the fields both endpoints share. */
export function answerPlan(body: SharedFields, parts: PlanParts): AnswerPlan {
  const { model, topLogprobs, promptLogprobs } = parts;
  const stream = body.stream === true;
  const sampling = samplingFor(model, {
    temperature: body.temperature,
    top_p: body.top_p,
    top_k: body.top_k,
    min_p: body.min_p,
    repetition_penalty: body.repetition_penalty,
    presence_penalty: body.presence_penalty,
    frequency_penalty: body.frequency_penalty,
    logit_bias: body.logit_bias,
    seed: body.seed,
    min_tokens: body.min_tokens,
    ignore_eos: body.ignore_eos,
    stop_token_ids: body.stop_token_ids,
    allowed_token_ids: body.allowed_token_ids,
    ...(body.bad_words?.length ? { bad_words_ids: badWordIds(model, body.bad_words) } : {}),
    logprobs: topLogprobs !== null,
    top_logprobs: topLogprobs ?? 0,
  });
  return {
    model,
    answerId: parts.answerId,
    stream,
    includeUsage: stream && body.stream_options?.include_usage === true,
    continuousUsage: stream && body.stream_options?.include_usage === true && body.stream_options?.continuous_usage_stats === true,
    requests: parts.prompts.map(({ promptIds, maxTokens }) => ({
      promptIds,
      maxTokens,
      sampling,
      stop: stopList(body.stop),
      ...(body.include_stop_str_in_output ? { includeStop: true } : {}),
      ...(body.skip_special_tokens === false ? { renderSpecial: true } : {}),
      n: body.n ?? 1,
      ...(topLogprobs !== null ? { logprobs: { top: topLogprobs } } : {}),
      ...(promptLogprobs !== null && promptLogprobs !== undefined
        ? { promptLogprobs: { top: promptLogprobs, ...(parts.promptRanks ? { ranks: true } : {}) } }
        : {}),
      ...(body.priority != null ? { priority: body.priority } : {}),
      ...(parts.constraint ? { constraint: parts.constraint } : {}),
      ...(parts.thinkingBudget ? { thinkingBudget: parts.thinkingBudget } : {}),
      ...(parts.endRepeatedCalls ? { endRepeatedCalls: true } : {}),
      ...(parts.prediction?.length ? { prediction: parts.prediction } : {}),
      ...(parts.lineTimeLimitMs !== undefined ? { lineTimeLimitMs: parts.lineTimeLimitMs } : {}),
      ...(parts.minIndent !== undefined ? { minIndent: parts.minIndent } : {}),
    })),
  };
}

/**
 * The engine priority of a request `request` sends: the one it named (vLLM's `priority`), else, for
 * a Batch API line, {@link BATCH_PRIORITY} (clients' own requests wait ahead of it), else none (0).
 */
export function enginePriority(request: FastifyRequest, named: number | undefined): number | undefined {
  return named ?? (request.apiKey?.batch ? BATCH_PRIORITY : undefined);
}

/**
 * A predicted output's tokens, as many as an answer can hold. Its text is cut first to 16 characters
 * a position of the context (more than any token holds), so that a prediction of megabytes does not
 * hold the event loop while it is tokenized only to be cut.
 */
export function predictionIds(model: ServedModel, text: string): number[] {
  return model.textPrompt(text.slice(0, model.contextLength * 16), false).slice(0, model.contextLength);
}

/**
 * A 400 `context_length_exceeded` for a prompt of `chars` characters that cannot fit the context
 * whatever it tokenizes to, found before the work of tokenizing it (a prompt of megabytes would
 * otherwise hold the server's event loop for as long as that takes).
 * @param promptParam the field the prompt came from ("messages", "prompt" or "input")
 */
export function checkPromptLength(model: ServedModel, chars: number, promptParam: string): void {
  const fewest = model.fewestTokens(chars);
  if (fewest < model.contextLength) return;
  throw apiError(
    "context_length_exceeded",
    `This model's maximum context length is ${model.contextLength} tokens. However, your ${promptParam} holds ${chars} characters, at least ${fewest} tokens. Please reduce the length of the ${promptParam}.`,
    promptParam,
  );
}

/**
 * The completion budget for a prompt of `promptTokens`: `requested` when it fits the context,
 * else a 400 `context_length_exceeded`; without a request, `fallback` clipped to what is left.
 * @param promptParam the field the prompt came from ("messages" or "prompt")
 * @param requestedParam the field `requested` came from ("max_tokens" or "max_completion_tokens")
 */
export function completionBudget(
  model: ServedModel,
  promptTokens: number,
  requested: number | null | undefined,
  promptParam: string,
  fallback = Number.POSITIVE_INFINITY,
  requestedParam = "max_tokens",
): number {
  const context = model.contextLength;
  if (promptTokens === 0) {
    // The engine needs one token to start from; an empty text prompt on a model without BOS has none.
    throw apiError(
      "invalid_value",
      `'${promptParam}' gives no tokens, and this model adds no beginning-of-sequence token, so there is nothing to generate from: send at least one character or token id.`,
      promptParam,
    );
  }
  if (promptTokens >= context) {
    throw apiError(
      "context_length_exceeded",
      `This model's maximum context length is ${context} tokens. However, your ${promptParam} resulted in ${promptTokens} tokens. Please reduce the length of the ${promptParam}.`,
      promptParam,
    );
  }
  if (requested !== null && requested !== undefined) {
    if (promptTokens + requested > context) {
      throw apiError(
        "context_length_exceeded",
        `This model's maximum context length is ${context} tokens. However, you requested ${promptTokens + requested} tokens (${promptTokens} in the ${promptParam}, ${requested} in the completion). Please reduce the length of the ${promptParam} or completion.`,
        requestedParam,
      );
    }
    return requested;
  }
  return Math.min(fallback, context - promptTokens);
}

/**
 * The prompt `truncate_prompt_tokens` leaves: its last `keep` tokens (all of a shorter one), or
 * with -1 as many of the last as the context holds beside `requested` completion tokens (at least
 * one). Unchanged without the field.
 */
export function truncatedPrompt(model: ServedModel, promptIds: number[], keep: number | null | undefined, requested: number | null | undefined): number[] {
  if (keep === null || keep === undefined) return promptIds;
  const most = keep === -1 ? model.contextLength - Math.max(1, requested ?? 1) : keep;
  return promptIds.length > most ? promptIds.slice(promptIds.length - Math.max(1, most)) : promptIds;
}

/**
 * A 400 for `min_tokens` or `ignore_eos` beside an output held to a grammar from its first token
 * (`forced`), which must end where the grammar does, or for `min_tokens` above the completion's budget.
 */
export function checkEndTokens(
  body: Pick<SharedFields, "min_tokens" | "ignore_eos">,
  forced: boolean,
  maxTokens: number | null | undefined,
  maxParam = "max_tokens",
): void {
  const field = body.ignore_eos ? "ignore_eos" : body.min_tokens ? "min_tokens" : undefined;
  if (field && forced) {
    throw apiError("unsupported_value", `'${field}' cannot be combined with a constrained output, which ends where its grammar does.`, field);
  }
  if (body.min_tokens && maxTokens !== null && maxTokens !== undefined && body.min_tokens > maxTokens) {
    throw apiError(
      "invalid_value",
      `'min_tokens' (${body.min_tokens}) is more than the ${maxTokens} tokens this completion may have (its '${maxParam}', or what the context leaves).`,
      "min_tokens",
    );
  }
}

/**
 * The token sequences of `bad_words`, as vLLM makes them: each word (its leading blanks taken off)
 * tokenized alone and after a space, so that it is banned at the start of the text and after a word.
 */
function badWordIds(model: ServedModel, words: readonly string[]): number[][] {
  const out: number[][] = [];
  const seen = new Set<string>();
  words.forEach((word, i) => {
    for (const text of [word.trimStart(), " " + word.trimStart()]) {
      const ids = model.textPrompt(text, false);
      if (ids.length > MAX_BAD_WORD_TOKENS) {
        throw apiError("invalid_value", `'bad_words[${i}]' is ${ids.length} tokens long; at most ${MAX_BAD_WORD_TOKENS} are accepted.`, `bad_words[${i}]`);
      }
      const key = ids.join(",");
      if (ids.length > 0 && !seen.has(key)) out.push(ids);
      seen.add(key);
    }
  });
  return out;
}

/** Sampling parameters of a request, checked against the model (logit_bias ids within its vocabulary). */
function samplingFor(model: ServedModel, params: SamplingParams): SamplingParams {
  const problems = validateSamplingParams(params, { vocabSize: model.vocabSize });
  if (problems.length > 0) throw apiError("invalid_value", problems[0].message, problems[0].param || null);
  return params;
}
