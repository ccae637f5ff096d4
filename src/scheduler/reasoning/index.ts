export { ThinkSplitter, splitThinking, reasoningPart, promptOpensThinking, THINK_OPEN, THINK_CLOSE, type ReasoningPiece } from "./think-split.js";
export { thinkingFirst } from "./thinking-first.js";
export { thinkingBudget } from "./thinking-budget.js";
