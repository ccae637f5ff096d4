/** `kiln bench`'s pieces that need no model: its --rows list and its table. */
import { describe, expect, it } from "vitest";
import { formatThroughput, parseRows } from "../../../src/cli/commands/bench.js";
import { UsageError } from "../../../src/cli/options.js";

describe("kiln bench", () => {
  it("takes --rows as a comma list of whole numbers of sequences, each once", () => {
    expect(parseRows("1,16,64")).toEqual([1, 16, 64]);
    expect(parseRows(" 4 , 1,4")).toEqual([4, 1]);
    for (const bad of ["", "0", "1,,2", "1.5", "-1", "two"]) expect(() => parseRows(bad), bad).toThrow(UsageError);
  });

  it("prints the prompt's figures, then one aligned line per number of sequences, '-' where no step was measured", () => {
    const text = formatThroughput(
      {
        prompt: { tokens: 512, ttftMs: 812.4, tokensPerSecond: 640.2 },
        decode: [
          { rows: 1, msPerStep: 12.34, tokensPerSecond: 81.03, samples: 93 },
          { rows: 16, msPerStep: Number.NaN, tokensPerSecond: 0, samples: 0 },
        ],
      },
      { promptTokens: 512, rows: [1, 16], steps: 32, runs: 3, decodeContext: 64 },
    );
    expect(text.split("\n")).toEqual([
      "prompt of 512 tokens: first token after 812 ms (640 prompt tokens/s)",
      "decode, 32 tokens a sequence after a 64-token prompt:",
      "  sequences  ms/step  tokens/s  steps",
      "          1     12.3      81.0     93",
      "         16        -         -      0",
    ]);
  });
});
