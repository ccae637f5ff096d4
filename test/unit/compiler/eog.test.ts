import { describe, expect, it } from "vitest";
import { endOfGenerationIds } from "../../../src/compiler/eog.js";
import type { TokenizerSpec } from "../../../src/runtime/artifact/index.js";

const NORMAL = 1;
const CONTROL = 3;
const USER_DEFINED = 4;

function spec(tokens: Array<[string, number]>, ids: Partial<Pick<TokenizerSpec, "eosId" | "eotId">> = {}): TokenizerSpec {
  return {
    model: "gpt2",
    pre: "default",
    tokens: tokens.map(([t]) => t),
    tokenTypes: tokens.map(([, type]) => type),
    merges: [],
    bosId: null,
    eosId: ids.eosId ?? null,
    eotId: ids.eotId ?? null,
    padId: null,
    unkId: null,
    addBos: false,
    addEos: false,
    addSpacePrefix: false,
  };
}

describe("endOfGenerationIds", () => {
  it("includes EOS, EOT and control tokens with end-of-generation texts, sorted and unique", () => {
    const s = spec(
      [
        ["<|endoftext|>", CONTROL], // 0
        ["hello", NORMAL], // 1
        ["<|im_start|>", CONTROL], // 2: a control token, but not end-of-generation
        ["<|im_end|>", CONTROL], // 3
        ["<|eot_id|>", CONTROL], // 4
        ["<end_of_turn>", CONTROL], // 5
        ["<｜end▁of▁sentence｜>", CONTROL], // 6 (DeepSeek, full-width bars)
      ],
      { eosId: 3, eotId: 4 },
    );
    expect(endOfGenerationIds(s)).toEqual([0, 3, 4, 5, 6]);
  });

  it("ignores end-of-generation texts that are not control tokens", () => {
    const s = spec([
      ["<|im_end|>", NORMAL],
      ["<|eot_id|>", USER_DEFINED],
      ["<|end|>", CONTROL],
    ]);
    expect(endOfGenerationIds(s)).toEqual([2]);
  });

  it("keeps EOS and EOT whatever their text or type, and handles their absence", () => {
    expect(
      endOfGenerationIds(
        spec(
          [
            ["</s>", NORMAL],
            ["x", NORMAL],
            ["y", NORMAL],
          ],
          { eosId: 0, eotId: 2 },
        ),
      ),
    ).toEqual([0, 2]);
    expect(endOfGenerationIds(spec([["x", NORMAL]]))).toEqual([]);
  });

  it("sorts numerically, not as strings", () => {
    const tokens: Array<[string, number]> = Array.from({ length: 12 }, (_, i) => [`t${i}`, NORMAL]);
    tokens[2] = ["<|eot_id|>", CONTROL];
    expect(endOfGenerationIds(spec(tokens, { eosId: 10 }))).toEqual([2, 10]);
  });
});
