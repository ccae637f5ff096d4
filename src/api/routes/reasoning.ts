/**
 * What a chat request asks of a reasoning model's thinking: the template variables that switch it
 * (Qwen3's `enable_thinking`), and whether the answer is split into reasoning and content.
 */
import { THINK_OPEN, type ServedModel } from "../../scheduler/index.js";
import { apiError } from "../errors.js";
import type { ChatCompletionRequest } from "../protocol/chat-completions.js";

export interface ReasoningPlan {
  /** Variables for the chat template: the client's `chat_template_kwargs`, and `enable_thinking: false` when thinking is off. */
  variables?: Record<string, unknown>;
  /** Split the answer's thinking from its content: a reasoning model whose output is not constrained. */
  split: boolean;
}

/**
 * `constrained`: the answer is held to a grammar from its first token (a JSON schema, a forced tool
 * call), so there is no room for thinking: a model that can answer without it is asked to, and the
 * whole output is content.
 */
export function reasoningPlan(
  model: ServedModel,
  body: Pick<ChatCompletionRequest, "reasoning_effort" | "chat_template_kwargs">,
  constrained: boolean,
): ReasoningPlan {
  const reasoning = model.reasoning;
  const effort = body.reasoning_effort ?? undefined;
  if (effort !== undefined && !reasoning) {
    throw apiError(
      "unsupported_parameter",
      `Unsupported parameter: 'reasoning_effort' is not supported with the model '${model.slug}', which does not reason.`,
      "reasoning_effort",
    );
  }
  const off = effort === "none" || effort === "minimal";
  if (off && reasoning && !reasoning.switchable) {
    throw apiError(
      "unsupported_value",
      `The model '${model.slug}' always reasons: its thinking cannot be switched off with 'reasoning_effort' '${effort}'.`,
      "reasoning_effort",
    );
  }
  const variables: Record<string, unknown> = { ...(body.chat_template_kwargs ?? {}) };
  if (reasoning?.switchable && (off || constrained)) variables.enable_thinking = false;
  return { ...(Object.keys(variables).length > 0 ? { variables } : {}), split: reasoning !== null && !constrained };
}

/** Whether a rendered prompt ends by opening the reasoning (DeepSeek-R1 distills' templates end with `<think>\n`). */
export function promptOpensThinking(model: ServedModel, promptIds: readonly number[]): boolean {
  // Enough tokens to hold the tag however it tokenizes (one added token on those models, several on others).
  return model.decode(promptIds.slice(-16)).trimEnd().endsWith(THINK_OPEN);
}
