/**
 * What a chat request asks of a reasoning model's thinking: the template variables that switch it
 * (Qwen3's `enable_thinking`), whether the answer is split into reasoning and content, and the
 * budget its thinking is held to.
 */
import type { ConstraintSpec, ThinkingBudget } from "../../runtime/constrain/index.js";
import { promptOpensThinking, reasoningPart, thinkingBudget, thinkingFirst, type ServedModel } from "../../scheduler/index.js";
import { apiError } from "../errors.js";
import type { Usage } from "../protocol/chat-completions.js";
import type { REASONING_EFFORTS } from "../protocol/common.js";

export interface ReasoningPlan {
  /** Variables for the chat template: the client's `chat_template_kwargs`, and `enable_thinking: false` when thinking is off. */
  variables?: Record<string, unknown>;
  /**
   * Split the answer's thinking from its content. A constraint then holds only after the thinking
   * (`thinkingFirst`). False for a model that does not reason, and for a constrained answer from a
   * model whose thinking is switched off: that is all content, held to its grammar from the first token.
   */
  split: boolean;
}

/** What a request says of the thinking: its effort, and extra template variables (chat's `chat_template_kwargs`). */
export interface ReasoningAsk {
  effort?: (typeof REASONING_EFFORTS)[number] | null;
  templateVariables?: Record<string, unknown> | null;
}

/**
 * `constrained`: the answer is held to a grammar (a JSON schema, a forced tool call). A reasoning
 * model still thinks first unless asked not to, as vLLM serves structured output from such models.
 * `param` names the effort's field in errors.
 */
export function reasoningPlan(model: ServedModel, ask: ReasoningAsk, constrained: boolean, param = "reasoning_effort"): ReasoningPlan {
  const reasoning = model.reasoning;
  const effort = ask.effort ?? undefined;
  if (effort !== undefined && !reasoning) {
    throw apiError("unsupported_parameter", `Unsupported parameter: '${param}' is not supported with the model '${model.slug}', which does not reason.`, param);
  }
  const off = effort === "none" || effort === "minimal";
  if (off && reasoning && !reasoning.switchable) {
    throw apiError("unsupported_value", `The model '${model.slug}' always reasons: its thinking cannot be switched off with '${param}' '${effort}'.`, param);
  }
  const variables: Record<string, unknown> = { ...(ask.templateVariables ?? {}) };
  if (reasoning?.switchable && off) variables.enable_thinking = false;
  const thinks = reasoning !== null && !(reasoning.switchable && variables.enable_thinking === false);
  return { ...(Object.keys(variables).length > 0 ? { variables } : {}), split: thinks || (reasoning !== null && !constrained) };
}

/** What a generation needs of its thinking: where it opens (null: the answer is not split), the constraint held after it, and its budget. */
export interface ThinkingParts {
  reasoning?: { opened: boolean };
  constraint?: ConstraintSpec;
  thinkingBudget?: ThinkingBudget;
}

/**
 * The thinking of an answer to `promptIds` as `plan` says it: whether the prompt opened it, the
 * constraint `calls` (a format, tool calls) held only after it when the answer is split, and its
 * budget (see {@link thinkingBudgetOf}).
 */
export function thinkingParts(
  model: ServedModel,
  promptIds: readonly number[],
  plan: ReasoningPlan,
  calls: ConstraintSpec | undefined,
  asked?: { tokens: number | null | undefined; param: string },
): ThinkingParts {
  const reasoning = plan.split ? { opened: promptOpensThinking(model.decode, promptIds) } : undefined;
  const constraint = calls && reasoning ? thinkingFirst(calls, reasoning.opened) : calls;
  const thinkingBudget = thinkingBudgetOf(model, reasoning, asked);
  return { ...(reasoning ? { reasoning } : {}), ...(constraint ? { constraint } : {}), ...(thinkingBudget ? { thinkingBudget } : {}) };
}

/**
 * The budget of the thinking of a request whose answer is split (`reasoning`): the one it `asked`
 * for (`tokens` in its field `param`), else the server's (`--thinking-budget`). Undefined without
 * either, or when the model will not think; a budget asked of a model that does not reason is a 400.
 */
function thinkingBudgetOf(
  model: ServedModel,
  reasoning: { opened: boolean } | undefined,
  asked?: { tokens: number | null | undefined; param: string },
): ThinkingBudget | undefined {
  if (asked?.tokens != null && !model.reasoning) {
    throw apiError(
      "unsupported_parameter",
      `Unsupported parameter: '${asked.param}' is not supported with the model '${model.slug}', which does not reason.`,
      asked.param,
    );
  }
  const tokens = asked?.tokens ?? model.thinkingBudget;
  if (tokens === undefined || !reasoning) return undefined;
  return thinkingBudget(tokens, reasoning.opened, (text) => model.textPrompt(text, false, "parse"));
}

/** `usage` with the tokens of the reasoning in each choice's text (its tags included) as `reasoning_tokens`. */
export function withReasoningTokens(usage: Usage, model: ServedModel, texts: readonly string[], opened: boolean): Usage {
  let tokens = 0;
  for (const text of texts) {
    const part = reasoningPart(text, opened);
    if (part !== "") tokens += model.countTokens(part);
  }
  if (tokens === 0) return usage;
  return { ...usage, completion_tokens_details: { ...usage.completion_tokens_details, reasoning_tokens: tokens } };
}
