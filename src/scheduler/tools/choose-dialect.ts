/** Which tool dialect a model speaks: read off its chat template first (as llama.cpp does), then its catalogue family. */
import type { ToolDialect } from "./dialect.js";
import { hermes } from "./hermes.js";
import { llama3 } from "./llama3.js";
import { mistral } from "./mistral.js";
import { smollm2 } from "./smollm2.js";

/**
 * The dialect of a model with this chat template and catalogue family: a template that writes
 * `<tool_call>` is Hermes, `[TOOL_CALLS]` Mistral, `<|python_tag|>` Llama 3; otherwise the family
 * decides (SmolLM2, Llama, Mistral), and Hermes-style calls described in a system prompt are the
 * fallback for families without a convention of their own.
 */
export function chooseToolDialect(templateSource: string | null, family: string | undefined): ToolDialect {
  const source = templateSource ?? "";
  if (source.includes("<tool_call>")) return hermes;
  if (source.includes("[TOOL_CALLS]")) return mistral;
  if (source.includes("<|python_tag|>")) return llama3;
  if (family === "smollm2") return smollm2;
  if (family === "llama") return llama3;
  if (family === "mistral") return mistral;
  return hermes;
}

/** Whether a chat template renders the `tools` variable itself (else the dialect's instructions carry them). */
export function templateRendersTools(templateSource: string): boolean {
  return /\btools\b/.test(templateSource);
}
