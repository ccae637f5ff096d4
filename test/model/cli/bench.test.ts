/**
 * `kiln bench` on the embedded SmolLM2 and whisper tiny.en on the CPU, as a user runs it: the real
 * models through the engine (or speech worker) `kiln serve` runs. Its figures are not checked against a speed (they are measured, not
 * asserted), only for what they must be: positive, decode steps measured at every asked number of
 * sequences, tokens per second that follow from the step time, and bad flags refused.
 */
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import type { SpeechThroughputFigures, SpeechThroughputPlan, ThroughputFigures, ThroughputPlan } from "../../../src/scheduler/index.js";
import { KILN_BIN } from "../../support/server.js";
import { TEXT_SLUG } from "../../support/model.js";

const run = promisify(execFile);

async function kiln(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [KILN_BIN, ...args], { env: process.env, maxBuffer: 16 << 20 });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

describe("kiln bench", () => {
  it("measures the time to first token and the decode step at each number of sequences", async () => {
    const { code, stdout, stderr } = await kiln(["bench", TEXT_SLUG, "--prompt", "48", "--rows", "1,3", "--steps", "6", "--runs", "2", "--json"]);
    expect(code, stderr).toBe(0);
    const out = JSON.parse(stdout) as { model: string; artifact: string; device: string; plan: ThroughputPlan } & ThroughputFigures;
    expect(out).toMatchObject({ model: TEXT_SLUG, device: "cpu", plan: { promptTokens: 48, rows: [1, 3], steps: 6, runs: 2, decodeContext: 64 } });
    expect(out.artifact).toMatch(new RegExp(`^${TEXT_SLUG}-`));
    expect(out.prompt.tokens).toBe(48);
    expect(out.prompt.ttftMs).toBeGreaterThan(0);
    expect(out.prompt.tokensPerSecond).toBeGreaterThan(0);
    expect(out.decode.map((d) => d.rows)).toEqual([1, 3]);
    for (const d of out.decode) {
      // 6 tokens a sequence: the first comes from the prefill, so up to 5 decode steps a run, 2 runs.
      expect(d.samples, `rows ${d.rows}`).toBeGreaterThanOrEqual(2);
      expect(d.samples).toBeLessThanOrEqual(10);
      expect(d.msPerStep).toBeGreaterThan(0);
      expect(d.tokensPerSecond).toBeCloseTo((d.rows * 1000) / d.msPerStep, 6);
    }
  }, 120_000);

  it("prints a table without --json", async () => {
    const { code, stdout, stderr } = await kiln(["bench", "--model", TEXT_SLUG, "--prompt", "16", "--rows", "2", "--steps", "3", "--runs", "1"]);
    expect(code, stderr).toBe(0);
    expect(stdout).toMatch(/^prompt of 16 tokens: first token after \d+ ms/m);
    expect(stdout).toMatch(/^\s+sequences\s+ms\/step\s+tokens\/s\s+steps$/m);
    expect(stdout).toMatch(/^\s+2\s+[0-9.]+\s+[0-9.]+\s+\d+$/m);
  }, 120_000);

  it("refuses a bad --rows and a prompt longer than the model serves, with exit 2", async () => {
    const rows = await kiln(["bench", TEXT_SLUG, "--rows", "1,zero"]);
    expect(rows.code).toBe(2);
    expect(rows.stderr).toContain("--rows takes whole numbers");
    const long = await kiln(["bench", TEXT_SLUG, "--prompt", "100000", "--runs", "1"]);
    expect(long.code).toBe(2);
    expect(long.stderr).toMatch(/serves \d+ tokens per sequence here/);
  }, 120_000);

  it("measures a transcription model's encode and beam-search decoder calls at each number of transcriptions", async () => {
    const { code, stdout, stderr } = await kiln(["bench", "whisper-tiny-en", "--rows", "1,2", "--beams", "2", "--steps", "4", "--runs", "1", "--json"]);
    expect(code, stderr).toBe(0);
    const out = JSON.parse(stdout) as { model: string; artifact: string; device: string; plan: SpeechThroughputPlan } & SpeechThroughputFigures;
    expect(out).toMatchObject({ model: "whisper-tiny-en", device: "cpu", plan: { transcriptions: [1, 2], beams: 2, context: 8, steps: 4, runs: 1 } });
    expect(out.artifact).toMatch(/^whisper-tiny-en-/);
    expect(out.encodeMs).toBeGreaterThan(0);
    expect(out.decode.map((d) => [d.transcriptions, d.rows])).toEqual([
      [1, 2],
      [2, 4],
    ]);
    for (const d of out.decode) {
      expect(d.promptMs).toBeGreaterThan(0);
      expect(d.msPerStep).toBeGreaterThan(0);
    }
    const table = await kiln(["bench", "whisper-tiny-en", "--rows", "1", "--beams", "1", "--steps", "2", "--runs", "1"]);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toMatch(/^encode a 30 s window: \d+ ms$/m);
    expect(table.stdout).toMatch(/^\s+1\s+1\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+$/m);
  }, 120_000);

  it("refuses more decoder steps than a window holds, with exit 2", async () => {
    const long = await kiln(["bench", "whisper-tiny-en", "--rows", "1", "--steps", "1000", "--runs", "1"]);
    expect(long.code).toBe(2);
    expect(long.stderr).toMatch(/decodes 448 tokens a window; --steps 1000 needs at most \d+/);
  }, 120_000);
});
