/** `kiln bench`'s pieces that need no model: its --rows list, its tables, and flags a transcription model refuses. */
import { describe, expect, it } from "vitest";
import bench, { formatSpeechThroughput, formatThroughput, parseRows } from "../../../src/cli/commands/bench.js";
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

  it("prints a speech model's encode, then per number of transcriptions its decoder calls and what a 30 s window takes", () => {
    const text = formatSpeechThroughput(
      {
        encodeMs: 412.6,
        decode: [
          { transcriptions: 1, rows: 5, promptMs: 20.04, msPerStep: 9.5 },
          { transcriptions: 4, rows: 20, promptMs: 61.2, msPerStep: 20 },
        ],
      },
      { transcriptions: [1, 4], beams: 5, context: 8, steps: 32, runs: 3 },
    );
    // A window: (encode + prompt + 100 steps) / 1000 s; audio seconds a second: 30 x transcriptions / that.
    expect(text.split("\n")).toEqual([
      "encode a 30 s window: 413 ms",
      "beam search (5 beams), 32 decoder steps after a 8-token prompt; a window: the encode, the prompt and 100 steps:",
      "  transcriptions  rows  prompt ms  ms/step  window s  audio s/s",
      "               1     5       20.0      9.5      1.38       21.7",
      "               4    20       61.2     20.0      2.47       48.5",
    ]);
  });

  it("refuses --prompt for a transcription model before loading anything", async () => {
    const out: string[] = [];
    const io = { stdout: { write: (s: string) => out.push(s) }, stderr: { write: (s: string) => out.push(s) } };
    expect(await bench.run(["whisper-tiny-en", "--prompt", "64"], io as never)).toBe(2);
    expect(out.join("")).toContain("--prompt is for text models");
  });
});
