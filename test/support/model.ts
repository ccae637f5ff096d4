/** Shared access to the real embedded model for model tests: pulled and compiled once into the test KILN_HOME. */
import { join } from "node:path";
import { pullModel } from "../../src/catalogue/pull/index.js";
import { provisionArtifact } from "../../src/provision/index.js";
import type { CompileOptions, CompileResult } from "../../src/compiler/compile.js";

export const TEXT_SLUG = "smollm2-135m-instruct";

export async function compiledArtifact(options: CompileOptions = {}): Promise<CompileResult> {
  return provisionArtifact(TEXT_SLUG, { compile: options });
}

export async function textGgufPath(): Promise<string> {
  const pulled = await pullModel(TEXT_SLUG);
  const gguf = pulled.files.find((f) => f.path.endsWith(".gguf"));
  if (!gguf) throw new Error(`no GGUF pulled for ${TEXT_SLUG}`);
  return join(pulled.dir, gguf.path);
}

/** Twenty fixed chat prompts used wherever kiln is compared with llama.cpp. */
export const CHAT_PROMPTS = [
  "What is the capital of France?",
  "Write a haiku about rain.",
  "Explain recursion to a child.",
  "List three prime numbers.",
  "How do I boil an egg?",
  "Translate 'good morning' into Spanish.",
  "What is 12 times 13?",
  "Give me a name for a pet turtle.",
  "Why is the sky blue?",
  "Write a Python function that reverses a string.",
  "Summarize the plot of Romeo and Juliet.",
  "What are the planets of the solar system?",
  "Describe a cat in one sentence.",
  "What is photosynthesis?",
  "Suggest a healthy breakfast.",
  "Who wrote Hamlet?",
  "What is the boiling point of water?",
  "Tell me a joke about computers.",
  "How many legs does a spider have?",
  "What does HTTP stand for?",
];
