/**
 * Silero VAD in kiln's runtime against the reference on real speech padded with silence: the same
 * model file run by Python's onnxruntime the way the silero-vad package's wrapper runs it, and
 * faster-whisper's get_speech_timestamps over those probabilities.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pullVadModel } from "../../../../src/catalogue/pull/vad-model.js";
import { decodeAudio, SileroVad, speechTimestamps } from "../../../../src/runtime/audio/index.js";
import { referenceAvailable, referencePython } from "../../../support/faster-whisper.js";
import { paddedSpeech } from "../../../support/speech.js";

let work: string;
beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), "kiln-vad-"));
});
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe("Silero VAD against its reference", () => {
  it.skipIf(!referenceAvailable())(
    "gives the reference's probabilities and faster-whisper's speech timestamps",
    async () => {
      const padded = paddedSpeech("bakery", 6, 9);
      const samples = await decodeAudio(readFileSync(padded.path), { filename: padded.path });
      const vad = await SileroVad.load(await pullVadModel());
      const started = performance.now();
      const probabilities = await vad.speechProbabilities(samples);
      const ms = performance.now() - started;
      await vad.release();
      const input = join(work, "samples.f32");
      writeFileSync(input, Buffer.from(samples.buffer, samples.byteOffset, samples.byteLength));
      execFileSync(referencePython(), [resolve("test/model/runtime/audio/vad-reference.py"), await pullVadModel(), input, join(work, "ref.json")], {
        stdio: ["ignore", "ignore", "inherit"],
      });
      const reference = JSON.parse(readFileSync(join(work, "ref.json"), "utf8")) as { probabilities: number[]; chunks: Array<{ start: number; end: number }> };
      expect(probabilities.length).toBe(reference.probabilities.length);
      let maxDiff = 0;
      reference.probabilities.forEach((p, i) => (maxDiff = Math.max(maxDiff, Math.abs(p - probabilities[i]))));
      const chunks = speechTimestamps(probabilities, samples.length);
      console.log(
        `Silero VAD over ${(samples.length / 16000).toFixed(1)} s: ${ms.toFixed(0)} ms, max |probability diff| ${maxDiff.toExponential(2)}; speech ${JSON.stringify(chunks)}`,
      );
      expect(maxDiff).toBeLessThan(1e-4);
      expect(chunks).toEqual(reference.chunks);
      // One stretch, around the spoken sentence.
      expect(chunks).toHaveLength(1);
      expect(chunks[0].start / 16000).toBeGreaterThan(padded.speechStart - 0.5);
      expect(chunks[0].end / 16000).toBeLessThan(padded.speechEnd + 0.5);
    },
    120_000,
  );
});
