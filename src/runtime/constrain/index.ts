export { ConstraintError } from "./errors.js";
export { checkJsonSchema } from "./check-schema.js";
export { checkConstraint } from "./check-constraint.js";
export { ConstraintEngine, type ConstraintSpec, type TokenMatcher } from "./engine.js";
export { applyTokenMask } from "./mask.js";
export { TokenSetMatcher } from "./token-set.js";
export { ThinkingBudgetMatcher, type ThinkingBudget } from "./thinking-budget.js";
export { GrammarClient } from "./grammar-client.js";
export { GrammarThread } from "./grammar-handle.js";
