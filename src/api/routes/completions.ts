/** POST /v1/completions (legacy): validate -> tokenize the prompts -> engine (all prompts together) -> JSON or SSE. */
import type { FastifyInstance } from "fastify";
import type { EmittedTokenLogprob, PromptTokenLogprob, ServedModel } from "../../scheduler/index.js";
import type { ApiContext } from "../context.js";
import { apiError } from "../errors.js";
import {
  DEFAULT_COMPLETION_MAX_TOKENS,
  ignoredCompletionFields,
  infillSuffix,
  parseCompletionRequest,
  type Completion,
  type CompletionLogprobs,
  type CompletionRequest,
} from "../protocol/completions.js";
import { ignoredFieldsHeader } from "../protocol/common.js";
import { requestConstraint } from "../protocol/output-constraint.js";
import { checkEndTokens, checkPromptLength, completionBudget, answerPlan, truncatedPrompt } from "./generation-request.js";
import { answerGeneration, stopReasonField, type AnswerFormat, type CollectedChoice } from "./generation.js";
import { answerId, unixNow } from "./ids.js";
import { vllmPromptLogprobs } from "./prompt-logprobs.js";
import { lookupServedModel } from "./model-lookup.js";

export function completionsRoute(app: FastifyInstance, ctx: ApiContext): void {
  app.post("/completions", async (request, reply) => {
    const body = parseCompletionRequest(request.body);
    const ignored = ignoredFieldsHeader(ignoredCompletionFields(request.body));
    if (ignored !== undefined) reply.header("x-kiln-ignored-fields", ignored);
    const model = await lookupServedModel(ctx, request, body.model);
    const suffix = infillSuffix(body, model.slug, model.fillsInMiddle);
    const prompts = suffix === null ? promptsOf(model, body).map((p) => truncated(model, p, body)) : infillPromptsOf(model, body.prompt, suffix);
    const budgets = prompts.map((p) => ({
      promptIds: p.ids,
      maxTokens: completionBudget(model, p.ids.length, body.max_tokens, "prompt", DEFAULT_COMPLETION_MAX_TOKENS),
    }));
    const topLogprobs = body.logprobs ?? null;
    // `echo` with `logprobs` scores the prompt (lm-evaluation-harness's loglikelihood requests), and so does `prompt_logprobs`.
    const echoScores = body.echo ? topLogprobs : null;
    const promptLogprobs = echoScores === null && body.prompt_logprobs == null ? null : Math.max(echoScores ?? 0, body.prompt_logprobs ?? 0);
    const constraint = requestConstraint(body);
    checkEndTokens(body, constraint !== undefined, Math.min(...budgets.map((b) => b.maxTokens)));
    // best_of: more candidates than choices, ranked by their tokens' log probabilities.
    const candidates = body.best_of ?? body.n ?? 1;
    const plan = answerPlan(
      { ...body, n: candidates },
      {
        model,
        answerId: answerId("cmpl"),
        prompts: budgets,
        topLogprobs: candidates > (body.n ?? 1) ? (topLogprobs ?? 0) : topLogprobs,
        promptLogprobs,
        promptRanks: body.prompt_logprobs != null,
        ...(constraint ? { constraint } : {}),
      },
    );
    const format = completionFormat(plan.answerId, model, {
      includeUsage: plan.includeUsage,
      echo: body.echo ? prompts.map((p) => p.text) : null,
      n: body.n ?? 1,
      candidates,
      logprobs: topLogprobs,
      promptLogprobs: body.prompt_logprobs ?? null,
    });
    return answerGeneration(ctx, request, reply, plan, format);
  });
}

/** A prompt's token ids, and its text when it is echoed (token-id prompts echo their decoded text). */
interface Prompt {
  ids: number[];
  text: string;
}

/** A prompt as `truncate_prompt_tokens` leaves it (an echo is then the text of the tokens kept). */
function truncated(model: ServedModel, prompt: Prompt, body: CompletionRequest): Prompt {
  const ids = truncatedPrompt(model, prompt.ids, body.truncate_prompt_tokens, body.max_tokens ?? DEFAULT_COMPLETION_MAX_TOKENS);
  return ids === prompt.ids ? prompt : { ids, text: body.echo ? model.decode(ids) : "" };
}

/** The request's prompts, in order: a string, strings, token ids, or lists of token ids. */
function promptsOf(model: ServedModel, body: CompletionRequest): Prompt[] {
  const truncating = body.truncate_prompt_tokens != null;
  return eachPrompt(
    body.prompt,
    (text) => {
      if (!truncating) checkPromptLength(model, text.length, "prompt");
      return { ids: model.textPrompt(text), text };
    },
    (ids) => ({ ids: checkedIds(model, ids), text: body.echo ? model.decode(ids) : "" }),
  );
}

/** Each prompt (text or token ids, without BOS) with `suffix` after it, between the model's fill-in-the-middle markers. */
function infillPromptsOf(model: ServedModel, prompt: CompletionRequest["prompt"], suffix: string): Prompt[] {
  const infill = (before: number[]): Prompt => ({ ids: model.infillPrompt(before, suffix)!, text: "" });
  return eachPrompt(
    prompt,
    (text) => {
      checkPromptLength(model, text.length + suffix.length, "prompt");
      return infill(model.textPrompt(text, false));
    },
    (ids) => infill(checkedIds(model, ids)),
  );
}

/** Maps each of the request's prompts (a string, strings, token ids, or lists of token ids) by its kind. */
function eachPrompt(prompt: CompletionRequest["prompt"], fromText: (text: string) => Prompt, fromIds: (ids: number[]) => Prompt): Prompt[] {
  if (typeof prompt === "string") return [fromText(prompt)];
  const list = prompt as Array<string | number | number[]>;
  if (typeof list[0] === "number") return [fromIds(list as number[])];
  return list.map((p) => (typeof p === "string" ? fromText(p) : fromIds(p as number[])));
}

function checkedIds(model: ServedModel, ids: number[]): number[] {
  if (ids.some((id) => id >= model.vocabSize)) {
    throw apiError("invalid_value", `Token ids in 'prompt' must be below the vocabulary size ${model.vocabSize}.`, "prompt");
  }
  return ids;
}

/**
 * Legacy logprobs of a choice: its scored prompt's tokens (offsets from 0), then its generated
 * tokens, whose text starts at `offset` in the choice's text.
 */
function legacyLogprobs(
  prompt: readonly PromptTokenLogprob[] | null,
  entries: readonly EmittedTokenLogprob[],
  offset: number,
  top: number,
): CompletionLogprobs {
  const out: CompletionLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  let at = 0;
  for (const e of prompt ?? []) {
    out.tokens.push(e.token);
    out.token_logprobs.push(e.logprob);
    out.top_logprobs.push(e.top ? Object.fromEntries(e.top.slice(0, top).map((t) => [t.token, t.logprob])) : null);
    out.text_offset.push(at);
    at += e.token.length;
  }
  for (const e of entries) {
    out.tokens.push(e.token);
    out.token_logprobs.push(e.logprob);
    out.top_logprobs.push(Object.fromEntries(e.top.map((t) => [t.token, t.logprob])));
    out.text_offset.push(offset);
    offset += e.token.length;
  }
  return out;
}

/**
 * Of each prompt's `candidates` generated choices (numbered prompt-major), the `n` with the highest
 * mean log probability of their tokens, best first, with their answer's indices; all of them, in
 * order, when there are no more candidates than choices. A choice without tokens scores 0.
 */
export function bestOf(choices: readonly CollectedChoice[], candidates: number, n: number): Array<{ choice: CollectedChoice; index: number }> {
  if (candidates === n) return choices.map((choice) => ({ choice, index: choice.index }));
  const score = (c: CollectedChoice) => (c.logprobs.length === 0 ? 0 : c.logprobs.reduce((sum, e) => sum + e.logprob, 0) / c.logprobs.length);
  const byPrompt = new Map<number, CollectedChoice[]>();
  for (const c of choices) {
    const prompt = Math.floor(c.index / candidates);
    byPrompt.set(prompt, [...(byPrompt.get(prompt) ?? []), c]);
  }
  return [...byPrompt.entries()]
    .sort(([a], [b]) => a - b)
    .flatMap(([prompt, group]) =>
      [...group]
        .sort((a, b) => score(b) - score(a) || a.index - b.index)
        .slice(0, n)
        .map((choice, rank) => ({ choice, index: prompt * n + rank })),
    );
}

interface CompletionFormatOptions {
  includeUsage: boolean;
  /** The text of each prompt, put before its choices' text (`echo`), or null. */
  echo: string[] | null;
  /** Choices per prompt in the answer: choice i continues prompt floor(i / n). */
  n: number;
  /**
   * Choices generated per prompt (`best_of`, at least `n`): generated choice i continues prompt
   * floor(i / candidates); where more than `n`, each prompt's `n` with the highest mean token log
   * probability are answered, best first (never streamed).
   */
  candidates: number;
  /** Alternatives of each token's legacy log probabilities, or null for none. */
  logprobs: number | null;
  /** Alternatives of vLLM's `prompt_logprobs` on each choice, or null for none. */
  promptLogprobs: number | null;
}

function completionFormat(id: string, model: ServedModel, options: CompletionFormatOptions): AnswerFormat {
  const created = unixNow();
  const offsets = new Map<number, number>();
  /** The echoed prompt of generated choice `index`. */
  const echoOf = (index: number) => options.echo?.[Math.floor(index / options.candidates)] ?? null;
  const answer = (choices: Completion["choices"]): Completion => ({
    id,
    object: "text_completion",
    created,
    model: model.slug,
    system_fingerprint: model.artifactId,
    choices,
    ...(options.includeUsage ? { usage: null } : {}),
  });
  return {
    start: (index, prompt) => {
      const echo = echoOf(index);
      offsets.set(index, echo?.length ?? 0);
      if (echo === null) return null;
      return answer([
        { index, text: echo, logprobs: options.logprobs !== null && prompt ? legacyLogprobs(prompt, [], 0, options.logprobs) : null, finish_reason: null },
      ]);
    },
    delta: (index, text, logprobs) => {
      const at = offsets.get(index) ?? 0;
      offsets.set(index, at + text.length);
      return answer([
        { index, text, logprobs: options.logprobs !== null && logprobs ? legacyLogprobs(null, logprobs, at, options.logprobs) : null, finish_reason: null },
      ]);
    },
    finish: (index, reason, stopReason) => answer([{ index, text: "", logprobs: null, finish_reason: reason, ...stopReasonField(stopReason) }]),
    usage: (usage) => ({ ...answer([]), usage }),
    complete: (choices, usage): Completion => ({
      ...answer(
        bestOf(choices, options.candidates, options.n).map(({ choice: c, index }) => {
          const echo = echoOf(c.index) ?? "";
          return {
            index,
            text: echo + c.text,
            logprobs:
              options.logprobs !== null ? legacyLogprobs(options.echo === null ? null : c.promptLogprobs, c.logprobs, echo.length, options.logprobs) : null,
            finish_reason: c.finishReason === "length" ? "length" : "stop",
            ...stopReasonField(c.stopReason),
            ...(options.promptLogprobs !== null ? { prompt_logprobs: vllmPromptLogprobs(c.promptLogprobs ?? [], options.promptLogprobs) } : {}),
          };
        }),
      ),
      usage,
    }),
  };
}
