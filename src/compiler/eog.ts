import type { TokenizerSpec } from "../runtime/artifact/index.js";

/** Token texts llama.cpp also treats as end-of-generation when they are control tokens. */
const EOG_TEXTS = new Set([
  "<|eot_id|>",
  "<|im_end|>",
  "<|end|>",
  "<end_of_turn>",
  "<|endoftext|>",
  "<|eom_id|>",
  "<EOT>",
  "_<EOT>",
  "<|end▁of▁sentence|>",
  "<｜end▁of▁sentence｜>",
]);

const CONTROL = 3;

export function endOfGenerationIds(spec: TokenizerSpec): number[] {
  const ids = new Set<number>();
  if (spec.eosId !== null) ids.add(spec.eosId);
  if (spec.eotId !== null) ids.add(spec.eotId);
  spec.tokens.forEach((text, id) => {
    if (spec.tokenTypes[id] === CONTROL && EOG_TEXTS.has(text)) ids.add(id);
  });
  return [...ids].sort((a, b) => a - b);
}
