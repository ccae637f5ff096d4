export { CallParser } from "./call-parser.js";
export { callHead, toolConstraint, type CallSyntax } from "./call-syntax.js";
export { chooseToolDialect, templateRendersTools } from "./choose-dialect.js";
export type { ToolDialect, WireTool } from "./dialect.js";
export type * from "./types.js";
