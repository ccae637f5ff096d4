/** A family's tool-calling convention: how calls are written, how tools are described to a template that cannot render them, and call ids. */
import { randomBytes } from "node:crypto";
import type { CallSyntax } from "./call-syntax.js";

/** A tool definition as the reference API writes it (and chat templates take it). */
export interface WireTool {
  type: "function";
  function: { name: string; description?: string; parameters: Record<string, unknown> };
}

export interface ToolDialect {
  /** As in the table of dialects in docs/http-api.md ("hermes", "smollm2", "llama3", "mistral"). */
  readonly name: string;
  readonly syntax: CallSyntax;
  /**
   * The system-prompt text that offers `tools` (the reference API's definitions) to a model whose
   * chat template does not render `tools` itself.
   */
  instructions(tools: readonly WireTool[]): string;
  /** A fresh id for a call. */
  newId(): string;
}

const ALPHANUMERIC = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/** `length` random letters and digits. */
export function randomAlphanumeric(length: number): string {
  const bytes = randomBytes(length);
  let out = "";
  for (const b of bytes) out += ALPHANUMERIC[b % ALPHANUMERIC.length];
  return out;
}

/** The reference API's call id shape: `call_` and 24 letters and digits. */
export function openaiCallId(): string {
  return "call_" + randomAlphanumeric(24);
}
