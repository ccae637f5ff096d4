/** The real {@link TokenBackend}: the runtime's single-sequence `generate()` over a loaded model. */
import { generate } from "../runtime/generate.js";
import type { TextRuntime } from "../runtime/text-runtime.js";
import type { TokenBackend } from "./types.js";

export function runtimeBackend(runtime: TextRuntime): TokenBackend {
  return {
    generate: (promptIds, { maxTokens, sampling, signal }) => generate(runtime.worker, promptIds, { maxTokens, sampling, signal }),
    createDecoder: () => runtime.tokenizer.createStreamDecoder(),
    tokenBytes: (id) => runtime.tokenizer.tokenBytes(id),
  };
}
