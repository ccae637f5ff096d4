/** A tiny Llama GGUF with a hand-made 16-token vocabulary: compiles in well under a second. */
import { GgmlType, GgufValueType } from "../../../src/compiler/gguf/types.js";
import { meta, type MetaValue } from "../../fixtures/gguf/write-gguf.js";
import { writeTinyModel } from "../../fixtures/synthetic/tiny-model.js";

const LETTERS = ["<|endoftext|>", ..."abcdefghijklmno".split("")];

/** The tokenizer of `vocab` tokens: the 16 above, then "t16", "t17" ... */
export function tinyTokenizer(vocab: number): Array<[string, MetaValue]> {
  const tokens = [...LETTERS, ...Array.from({ length: Math.max(0, vocab - LETTERS.length) }, (_, i) => `t${LETTERS.length + i}`)];
  return [
    ["tokenizer.ggml.model", meta.str("gpt2")],
    ["tokenizer.ggml.pre", meta.str("default")],
    ["tokenizer.ggml.tokens", meta.arr(GgufValueType.STRING, tokens)],
    [
      "tokenizer.ggml.token_type",
      meta.arr(
        GgufValueType.INT32,
        tokens.map((_, i) => (i === 0 ? 3 : 1)),
      ),
    ],
    ["tokenizer.ggml.merges", meta.arr(GgufValueType.STRING, ["a b"])],
    ["tokenizer.ggml.eos_token_id", meta.u32(0)],
    ["tokenizer.chat_template", meta.str("{% for m in messages %}{{ m.content }}{% endfor %}")],
  ];
}

/**
 * Writes a tiny random-weight llama GGUF (`seed` picks the weights; `vocab` tokens, default 16;
 * `heads` query and `kvHeads` key/value heads over a hidden size of 32, default 4 and 2) to `path`.
 */
export async function writeTinyGguf(path: string, seed = 1, vocab = LETTERS.length, heads = 4, kvHeads = 2): Promise<void> {
  const f32 = GgmlType.F32;
  await writeTinyModel(
    path,
    {
      architecture: "llama",
      seed,
      layers: 1,
      hidden: 32,
      heads,
      kvHeads,
      ffn: 64,
      contextLength: 64,
      ropeTheta: 10000,
      rmsEps: 1e-5,
      types: { embedding: f32, attnQ: f32, attnK: f32, attnV: f32, attnOutput: f32, ffnGate: f32, ffnUp: f32, ffnDown: f32 },
    },
    tinyTokenizer(vocab),
  );
}
