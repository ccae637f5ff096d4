import { describe, expect, it } from "vitest";
import { checkTextGraphIo, kvBytesPerPosition, servedContextLength, TEXT_GRAPH, textGraphIo } from "../../../../src/runtime/artifact/index.js";

const smol = { layers: 30, kvHeads: 3, headDim: 64, contextLength: 8192 };

describe("servedContextLength", () => {
  it("keeps the model's context when there is no budget or the budget holds it", () => {
    expect(servedContextLength(smol, 16)).toBe(8192);
    expect(servedContextLength(smol, 1, 4096 * 1024 * 1024)).toBe(8192);
  });

  it("caps each sequence's context so every slot fits the budget, in whole growth steps", () => {
    // 16 slots x 46,080 bytes per position per slot: 4 GiB holds 5,825 positions -> 5,760.
    expect(servedContextLength(smol, 16, 4096 * 1024 * 1024)).toBe(5760);
    expect(servedContextLength(smol, 16, 4096 * 1024 * 1024) * 16 * 46080).toBeLessThanOrEqual(4096 * 1024 * 1024);
  });

  it("refuses a budget too small for one growth step", () => {
    expect(() => servedContextLength(smol, 16, 1024 * 1024)).toThrow(RangeError);
  });
});

describe("the text graph contract", () => {
  it("names every input and output once, in the builder's order", () => {
    const io = textGraphIo(2);
    expect(io.inputs).toEqual([
      "input_ids",
      "position_ids",
      "past_mask",
      "new_mask",
      "logits_from",
      "past_key_t.0",
      "past_value.0",
      "past_key_t.1",
      "past_value.1",
    ]);
    expect(io.outputs).toEqual(["logits", "hidden", "present_key.0", "present_value.0", "present_key.1", "present_value.1"]);
    expect(TEXT_GRAPH.pastKey(7)).toBe("past_key_t.7");
  });

  it("refuses recorded names of another contract", () => {
    expect(() => checkTextGraphIo(textGraphIo(3), 3, "x")).not.toThrow();
    expect(() => checkTextGraphIo(textGraphIo(3), 2, "x")).toThrow(/recompile/);
    const renamed = textGraphIo(1);
    renamed.inputs[3] = "attention_mask";
    expect(() => checkTextGraphIo(renamed, 1, "the artifact a")).toThrow(/the artifact a/);
  });

  it("adds the ring positions input only to graphs with sliding-window layers", () => {
    expect(textGraphIo(1, true).inputs).toEqual([
      "input_ids",
      "position_ids",
      "past_mask",
      "new_mask",
      "logits_from",
      "ring_positions",
      "past_key_t.0",
      "past_value.0",
    ]);
    expect(() => checkTextGraphIo(textGraphIo(2, true), 2, "x", true)).not.toThrow();
    expect(() => checkTextGraphIo(textGraphIo(2), 2, "x", true)).toThrow(/recompile/);
    expect(() => checkTextGraphIo(textGraphIo(2, true), 2, "x")).toThrow(/recompile/);
  });

  it("sizes one position of one slot as float32 keys and values of every layer", () => {
    expect(kvBytesPerPosition(smol)).toBe(46080);
  });
});
