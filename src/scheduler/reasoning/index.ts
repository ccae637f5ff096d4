export { ThinkSplitter, splitThinking, reasoningPart, THINK_OPEN, THINK_CLOSE, type ReasoningPiece } from "./think-split.js";
