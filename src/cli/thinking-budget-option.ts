/** `--thinking-budget N`, shared by the commands that generate text. */
import { option } from "./options.js";

export const thinkingBudgetOption = option.integer({
  value: "<tokens>",
  min: 0,
  max: 1_000_000,
  description:
    "most tokens a reasoning model (Qwen3, the DeepSeek-R1 distills) thinks before its thinking is closed for it and the answer follows, where a request names no budget of its own (chat's thinking_token_budget, Anthropic's thinking.budget_tokens); 0 closes it at once (llama.cpp's --reasoning-budget). Default none: the model ends its own thinking",
});
