/** Wire fields -> the scheduler's GenerationRequest pieces: token budget and sampling. */
import { validateSamplingParams, type SamplingParams, type ServedModel } from "../../scheduler/index.js";
import { apiError } from "../errors.js";

/**
 * The completion budget for a prompt of `promptTokens`: `requested` when it fits the context,
 * else a 400 `context_length_exceeded`; without a request, `fallback` clipped to what is left.
 * @param promptParam the field the prompt came from ("messages" or "prompt")
 */
export function completionBudget(
  model: ServedModel,
  promptTokens: number,
  requested: number | null | undefined,
  promptParam: string,
  fallback = Number.POSITIVE_INFINITY,
): number {
  const context = model.contextLength;
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
        "max_tokens",
      );
    }
    return requested;
  }
  return Math.min(fallback, context - promptTokens);
}

/** Sampling parameters of a request, checked against the model (logit_bias ids within its vocabulary). */
export function samplingFor(model: ServedModel, params: SamplingParams): SamplingParams {
  const problems = validateSamplingParams(params, { vocabSize: model.vocabSize });
  if (problems.length > 0) throw apiError("invalid_value", problems[0].message, problems[0].param || null);
  return params;
}
