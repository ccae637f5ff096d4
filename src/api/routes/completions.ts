/** POST /v1/completions (legacy): validate -> tokenize the prompt -> engine -> JSON or SSE. */
import type { FastifyInstance } from "fastify";
import type { EmittedTokenLogprob, ServedModel } from "../../scheduler/index.js";
import type { ApiContext } from "../context.js";
import { apiError } from "../errors.js";
import {
  DEFAULT_COMPLETION_MAX_TOKENS,
  ignoredCompletionFields,
  parseCompletionRequest,
  type Completion,
  type CompletionLogprobs,
} from "../protocol/completions.js";
import { requestConstraint } from "../protocol/output-constraint.js";
import { completionBudget, generationJob } from "./generation-request.js";
import { answerGeneration, type AnswerFormat } from "./generation.js";
import { answerId, unixNow } from "./ids.js";
import { lookupServedModel } from "./model-lookup.js";

export function completionsRoute(app: FastifyInstance, ctx: ApiContext): void {
  app.post("/completions", async (request, reply) => {
    const body = parseCompletionRequest(request.body);
    const ignored = ignoredCompletionFields(request.body);
    if (ignored.length > 0) reply.header("x-kiln-ignored-fields", ignored.join(", "));
    const model = lookupServedModel(ctx, request, body.model);
    const prompt = body.prompt;
    let promptIds: number[];
    let promptText: string;
    if (typeof prompt === "string" || typeof prompt[0] === "string") {
      promptText = typeof prompt === "string" ? prompt : (prompt[0] as string);
      promptIds = model.textPrompt(promptText);
    } else {
      promptIds = prompt as number[];
      if (promptIds.some((id) => id >= model.vocabSize)) {
        throw apiError("invalid_value", `Token ids in 'prompt' must be below the vocabulary size ${model.vocabSize}.`, "prompt");
      }
      promptText = body.echo ? model.decode(promptIds) : "";
    }
    const maxTokens = completionBudget(model, promptIds.length, body.max_tokens, "prompt", DEFAULT_COMPLETION_MAX_TOKENS);
    const topLogprobs = body.logprobs ?? null;
    const constraint = requestConstraint(body);
    const job = generationJob(body, { model, answerId: answerId("cmpl"), promptIds, maxTokens, topLogprobs, ...(constraint ? { constraint } : {}) });
    const format = completionFormat(job.answerId, model, { includeUsage: job.includeUsage, echo: body.echo ? promptText : null, logprobs: topLogprobs !== null });
    return answerGeneration(ctx, request, reply, job, format);
  });
}

/** Legacy logprobs of a run of tokens whose text starts at `offset` in the choice's text. */
function legacyLogprobs(entries: EmittedTokenLogprob[], offset: number): CompletionLogprobs {
  const out: CompletionLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  for (const e of entries) {
    out.tokens.push(e.token);
    out.token_logprobs.push(e.logprob);
    out.top_logprobs.push(Object.fromEntries(e.top.map((t) => [t.token, t.logprob])));
    out.text_offset.push(offset);
    offset += e.token.length;
  }
  return out;
}

interface CompletionFormatOptions {
  includeUsage: boolean;
  /** Prompt text to put before each choice's text (`echo`), or null. */
  echo: string | null;
  logprobs: boolean;
}

function completionFormat(id: string, model: ServedModel, options: CompletionFormatOptions): AnswerFormat {
  const created = unixNow();
  const offsets = new Map<number, number>();
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
    start: (index) => {
      offsets.set(index, options.echo?.length ?? 0);
      return options.echo ? answer([{ index, text: options.echo, logprobs: null, finish_reason: null }]) : null;
    },
    delta: (index, text, logprobs) => {
      const at = offsets.get(index) ?? 0;
      offsets.set(index, at + text.length);
      return answer([{ index, text, logprobs: options.logprobs && logprobs ? legacyLogprobs(logprobs, at) : null, finish_reason: null }]);
    },
    finish: (index, reason) => answer([{ index, text: "", logprobs: null, finish_reason: reason }]),
    usage: (usage) => ({ ...answer([]), usage }),
    complete: (choices, usage): Completion => ({
      ...answer(
        choices.map((c) => ({
          index: c.index,
          text: (options.echo ?? "") + c.text,
          logprobs: options.logprobs ? legacyLogprobs(c.logprobs, options.echo?.length ?? 0) : null,
          finish_reason: c.finishReason === "length" ? "length" : "stop",
        })),
      ),
      usage,
    }),
  };
}
