/** A thinking budget as the worker holds it: the tags as the model's tokenizer writes them. */
import type { ThinkingBudget } from "../../runtime/constrain/index.js";
import { THINK_CLOSE, THINK_OPEN } from "./think-split.js";

/**
 * `tokens` of thinking, counted from the open tag (or from the start, where the prompt `opened` it),
 * for a model whose text `encode` tokenizes with its control tokens parsed (`<think>` is one token
 * on Qwen3 and the DeepSeek-R1 distills, several on a vocabulary without it).
 */
export function thinkingBudget(tokens: number, opened: boolean, encode: (text: string) => number[]): ThinkingBudget {
  return { tokens, opened, open: encode(THINK_OPEN), close: encode(THINK_CLOSE) };
}
