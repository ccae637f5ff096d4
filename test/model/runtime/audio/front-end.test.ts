/**
 * The speech front end on real files: ffmpeg decoding of every upload format, the error reasons an
 * API user sees, and kiln's log-mel features against faster-whisper's FeatureExtractor.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SAMPLE_RATE } from "../../../../src/runtime/artifact/speech-graph.js";
import { AudioDecodeError, type AudioProblem, decodeAudio, ffmpegAvailable, logMel } from "../../../../src/runtime/audio/index.js";
import { referenceAvailable, referenceLogMel } from "../../../support/faster-whisper.js";
import { SPEECH_FORMATS, speechFixture } from "../../../support/speech.js";

async function decodeFile(path: string): Promise<Float32Array> {
  return decodeAudio(readFileSync(path), { filename: path });
}

async function reasonOf(bytes: Uint8Array, filename?: string): Promise<AudioProblem | "decoded"> {
  try {
    await decodeAudio(bytes, { filename });
    return "decoded";
  } catch (error) {
    if (error instanceof AudioDecodeError) {
      // Readable, and never a server path (the temp file is called "input" in messages).
      expect(error.message.length).toBeGreaterThan(10);
      expect(error.message).not.toMatch(/kiln-audio-/);
      return error.reason;
    }
    throw error;
  }
}

/** Seeded xorshift bytes, so the "random file" is the same on every run. */
function noise(length: number, seed: number): Uint8Array {
  let x = seed >>> 0 || 1;
  return Uint8Array.from({ length }, () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return x & 255;
  });
}

let scratch: string;
beforeAll(() => {
  scratch = mkdtempSync(join(tmpdir(), "kiln-front-end-"));
});
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

describe("decodeAudio", () => {
  it("finds ffmpeg", async () => {
    expect(await ffmpegAvailable()).toBe(true);
  });

  it("decodes every upload format to the same duration", async () => {
    const fixture = speechFixture("lighthouse");
    const durations: Record<string, number> = {};
    for (const format of SPEECH_FORMATS) durations[format] = (await decodeFile(fixture.files[format])).length / SAMPLE_RATE;
    console.log(
      "decoded seconds",
      fixture.seconds.toFixed(3),
      JSON.stringify(Object.fromEntries(Object.entries(durations).map(([f, s]) => [f, +s.toFixed(4)]))),
    );
    for (const format of SPEECH_FORMATS) expect(Math.abs(durations[format] - fixture.seconds), format).toBeLessThan(0.05);
  });

  it("decodes silence to near-zero samples", async () => {
    const samples = await decodeFile(speechFixture("silence").files.ogg);
    expect(samples.length / SAMPLE_RATE).toBeCloseTo(4, 1);
    expect(Math.max(...samples.map(Math.abs))).toBeLessThan(1e-3);
  });

  it("classifies what it cannot decode", async () => {
    const random = noise(5000, 7);
    const m4a = readFileSync(speechFixture("lighthouse").files.m4a);
    const videoOnly = join(scratch, "video.mp4");
    const made = spawnSync("ffmpeg", ["-nostdin", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=duration=1:size=64x64", "-c:v", "mpeg4", videoOnly], {
      shell: false,
    });
    expect(made.status).toBe(0);
    expect(await reasonOf(new Uint8Array(0), "a.wav")).toBe("empty");
    // Random bytes: whichever demuxer probes them, they must not decode.
    expect(["unsupported", "corrupt"]).toContain(await reasonOf(random, "a.mp3"));
    expect(await reasonOf(random, "a.bin")).toBe("unsupported");
    expect(await reasonOf(new TextEncoder().encode("this is not audio, just a line of text\n".repeat(20)), "notes.txt")).toBe("unsupported");
    expect(await reasonOf(readFileSync(videoOnly), "video.mp4")).toBe("unsupported");
    // ffmpeg's m4a keeps its index at the end: cutting it off leaves a recognizable but broken file.
    expect(await reasonOf(m4a.subarray(0, Math.floor(m4a.length * 0.6)), "cut.m4a")).toBe("corrupt");
  });

  it("says when ffmpeg is missing", async () => {
    const saved = process.env.KILN_FFMPEG;
    process.env.KILN_FFMPEG = join(scratch, "no-such-ffmpeg");
    try {
      // An MP3: a WAV may decode in-process, without ffmpeg.
      expect(await reasonOf(readFileSync(speechFixture("lighthouse").files.mp3))).toBe("ffmpeg_missing");
    } finally {
      if (saved === undefined) delete process.env.KILN_FFMPEG;
      else process.env.KILN_FFMPEG = saved;
    }
  });

  it("decodes piped uploads on the spare ffmpeg to the samples of an ffmpeg started on the file", async () => {
    const fixture = speechFixture("bakery");
    const fastStart = join(scratch, "fast-start.m4a");
    expect(spawnSync("ffmpeg", ["-nostdin", "-loglevel", "error", "-i", fixture.files.m4a, "-c", "copy", "-movflags", "+faststart", fastStart]).status).toBe(0);
    const files = [...(["mp3", "flac", "ogg", "webm", "mpga", "m4a"] as const).map((f) => fixture.files[f]), fastStart];
    for (const path of files) {
      const fromFile = spawnSync(
        "ffmpeg",
        ["-nostdin", "-hide_banner", "-loglevel", "error", "-i", path, "-vn", "-f", "f32le", "-ac", "1", "-ar", "16000", "pipe:1"],
        {
          maxBuffer: 1 << 26,
        },
      );
      expect(fromFile.status).toBe(0);
      const expected = new Float32Array(Uint8Array.from(fromFile.stdout).buffer);
      // Twice: the first may find no spare waiting; the second takes the one the first started.
      for (let i = 0; i < 2; i++) expect(Array.from(await decodeFile(path)), `${path} (${i})`).toEqual(Array.from(expected));
    }
  });

  it("pipes MP3s to the spare ffmpeg and cuts them to the gapless length ffmpeg gives from a file", async () => {
    // A wrapper that logs each ffmpeg's input, to see which decodes took a file.
    const log = join(scratch, "ffmpeg-inputs.log");
    const wrapper = join(scratch, "logging-ffmpeg");
    writeFileSync(wrapper, `#!/bin/sh\nprev=""\nfor a in "$@"; do [ "$prev" = "-i" ] && echo "$a" >> "${log}"; prev="$a"; done\nexec ffmpeg "$@"\n`, {
      mode: 0o755,
    });
    const saved = process.env.KILN_FFMPEG;
    process.env.KILN_FFMPEG = wrapper;
    try {
      // A tone up to the last sample, so the end padding and the resampler's last samples are not silence.
      for (const [rate, channels] of [
        [22_050, 1],
        [44_100, 2],
        [16_000, 1],
        [8_000, 1],
      ] as const) {
        const path = join(scratch, `tone-${rate}.mp3`);
        const tone = ["-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i", `sine=frequency=440:duration=1.37:sample_rate=${rate}`];
        expect(spawnSync("ffmpeg", [...tone, "-ac", String(channels), "-c:a", "libmp3lame", "-b:a", "64k", path]).status).toBe(0);
        const fromFile = spawnSync("ffmpeg", ["-nostdin", "-loglevel", "error", "-i", path, "-f", "f32le", "-ac", "1", "-ar", "16000", "pipe:1"], {
          maxBuffer: 1 << 26,
        });
        const expected = new Float32Array(Uint8Array.from(fromFile.stdout).buffer);
        await decodeAudio(readFileSync(path)); // leaves a spare waiting
        writeFileSync(log, "");
        const samples = await decodeAudio(readFileSync(path));
        expect(readFileSync(log, "utf8").trim().split("\n"), `${rate} Hz: the inputs ffmpeg was started on`).toEqual(["pipe:0"]);
        expect(samples.length, `${rate} Hz`).toBe(expected.length);
        // Only the resampler's last filter length (16 output samples) sees the cut-off padding, not a reflection of the audio.
        const tail = rate === SAMPLE_RATE ? 0 : 32;
        expect(Array.from(samples.subarray(0, samples.length - tail)), `${rate} Hz`).toEqual(Array.from(expected.subarray(0, expected.length - tail)));
        for (let i = samples.length - tail; i < samples.length; i++) expect(Math.abs(samples[i] - expected[i]), `${rate} Hz, sample ${i}`).toBeLessThan(0.1);
      }
    } finally {
      if (saved === undefined) delete process.env.KILN_FFMPEG;
      else process.env.KILN_FFMPEG = saved;
    }
  });

  it("leaves no spare ffmpeg holding a process open", () => {
    const script = `import { decodeAudio } from ${JSON.stringify(join(process.cwd(), "src/runtime/audio/index.ts"))};
      import { readFileSync } from "node:fs";
      const samples = await decodeAudio(readFileSync(${JSON.stringify(speechFixture("lighthouse").files.mp3)}));
      console.log(samples.length > 0 ? "decoded" : "empty");`;
    const started = performance.now();
    const run = spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], { encoding: "utf8", timeout: 60_000 });
    expect(run.stdout.trim(), run.stderr).toBe("decoded");
    expect(run.status).toBe(0);
    expect(performance.now() - started).toBeLessThan(30_000);
  });

  it("stops on abort", async () => {
    const controller = new AbortController();
    const decoding = decodeAudio(readFileSync(speechFixture("long").files.webm), { signal: controller.signal });
    controller.abort(new Error("client went away"));
    await expect(decoding).rejects.toThrow("client went away");
  });
});

describe("logMel against faster-whisper", () => {
  it.skipIf(!referenceAvailable())("matches FeatureExtractor on a file over 30 s", async () => {
    const samples = await decodeFile(speechFixture("long").files.flac);
    const started = performance.now();
    const mel = logMel(samples, 80);
    const ms = performance.now() - started;
    const reference = await referenceLogMel(samples, 80);
    expect(mel.frames).toBe(reference.frames);
    let maxDiff = 0;
    for (let i = 0; i < reference.data.length; i++) maxDiff = Math.max(maxDiff, Math.abs(mel.data[i] - reference.data[i]));
    console.log(`log-mel of ${(samples.length / SAMPLE_RATE).toFixed(1)} s: ${ms.toFixed(1)} ms, max |kiln - faster-whisper| = ${maxDiff.toExponential(2)}`);
    expect(maxDiff).toBeLessThan(1e-4);
  });

  it.skipIf(!referenceAvailable())("matches FeatureExtractor(feature_size=128), large-v3's 128-bin filter bank", async () => {
    const samples = await decodeFile(speechFixture("lighthouse").files.flac);
    const mel = logMel(samples, 128);
    const reference = await referenceLogMel(samples, 128);
    expect(mel.frames).toBe(reference.frames);
    expect(mel.data.length).toBe(128 * mel.frames);
    let maxDiff = 0;
    for (let i = 0; i < reference.data.length; i++) maxDiff = Math.max(maxDiff, Math.abs(mel.data[i] - reference.data[i]));
    console.log(`log-mel with 128 bins: max |kiln - faster-whisper| = ${maxDiff.toExponential(2)}`);
    expect(maxDiff).toBeLessThan(1e-4);
  });
});
