/**
 * The in-process resampler against ffmpeg: WAVs that ffmpeg writes at the common rates other than
 * 16 kHz (tones, a tone near the input's Nyquist frequency, noise) decode in-process to the length
 * and, within float32 rounding, the samples of kiln's ffmpeg command; rates it refuses still go to
 * ffmpeg.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { AudioDecodeError, decodeAudio, decodeWithFfmpeg } from "../../../../src/runtime/audio/decode.js";
import { canResample, resample } from "../../../../src/runtime/audio/resample.js";
import { decodeWav } from "../../../../src/runtime/audio/wav.js";

const hasFfmpeg = spawnSync("ffmpeg", ["-hide_banner", "-version"], { stdio: "ignore" }).status === 0;

const scratch = mkdtempSync(join(tmpdir(), "kiln-resample-test-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

const RATES = [8000, 11025, 12000, 22050, 24000, 32000, 44100, 48000];

/**
 * The largest difference from ffmpeg allowed. Measured with ffmpeg 5.1 on x86-64: at most 1.8e-7
 * (three float32 steps near full scale; 1.2e-7 or less in mono) at every rate, mono or stereo,
 * 16-bit or float input, three seconds or a few frames. swr resamples all of them in float32 (its
 * internal format whenever the output is float, 16-bit input included), summing each filter in SIMD
 * lanes whose order depends on the CPU, where this module sums in double; the bound leaves room for
 * another CPU's summation order and is still far below anything a transcription could notice.
 */
const TOLERANCE = 1e-6;

type Codec = "pcm_s16le" | "pcm_f32le" | "pcm_s24le" | "pcm_s32le";

/** The short lengths checked besides three seconds; why each, at {@link ffmpegWavs}. */
const SHORT = [1, 10, 40, 150];

/**
 * WAVs written by ffmpeg, three seconds long and then each of {@link SHORT} frames long: per channel
 * a 440 Hz or 660 Hz tone, a 3.1 kHz tone, a tone at 45% of the rate (above 8 kHz when downsampling,
 * so the filter's stopband matters) and noise, peaking below full scale. One and ten frames are
 * shorter than any filter (32 taps or more), so ffmpeg gives no samples; 40 takes swr's usual path
 * at 8 to 12 kHz (32 taps), gives samples at 22.05 and 24 kHz only thanks to the flush's reflection,
 * and none above; 150 is about one filter at 44.1 and 48 kHz, where swr's start-up and flush overlap.
 */
function ffmpegWavs(rate: number, channels: 1 | 2, codec: Codec): Array<{ frames: number | "3 s"; bytes: Buffer }> {
  const tone = (hz: number, seed: number) => `0.3*sin(2*PI*${hz}*t)+0.2*sin(2*PI*3100*t)+0.15*sin(2*PI*${0.45 * rate}*t)+0.3*(random(${seed})-0.5)`;
  const exprs = channels === 1 ? tone(440, 0) : `${tone(440, 0)}|${tone(660, 1)}`;
  const lengths = ["3 s" as const, ...SHORT];
  const graph = [
    `aevalsrc=exprs=${exprs}:s=${rate}:d=3,asplit=${lengths.length}${lengths.map((_, i) => `[in${i}]`).join("")}`,
    ...SHORT.map((frames, i) => `[in${i + 1}]atrim=end_sample=${frames}[out${i + 1}]`),
  ].join(";");
  const files = lengths.map((frames) => join(scratch, `${rate}-${channels}-${codec}-${frames}.wav`));
  const outputs = files.flatMap((file, i) => ["-map", i === 0 ? "[in0]" : `[out${i}]`, "-c:a", codec, file]);
  const made = spawnSync("ffmpeg", ["-nostdin", "-hide_banner", "-loglevel", "error", "-y", "-filter_complex", graph, ...outputs], { encoding: "utf8" });
  if (made.status !== 0) throw new Error(`ffmpeg could not write the fixtures: ${made.stderr}`);
  return files.map((file, i) => ({ frames: lengths[i], bytes: readFileSync(file) }));
}

/** One three-second WAV written by ffmpeg, of the same signal. */
function ffmpegWav(rate: number, channels: 1 | 2, codec: Codec): Buffer {
  return ffmpegWavs(rate, channels, codec)[0].bytes;
}

/** A WAV written by ffmpeg, `frames` long, of the same signal. */
function shortFfmpegWav(rate: number, frames: number): Buffer {
  return ffmpegWavs(rate, 1, "pcm_s16le").find((wav) => wav.frames === frames)!.bytes;
}

/** kiln's ffmpeg command on `bytes`; no samples when it finds none (it then rejects as "empty"). */
async function ffmpegSamples(bytes: Uint8Array): Promise<Float32Array> {
  try {
    return await decodeWithFfmpeg(bytes);
  } catch (error) {
    if (error instanceof AudioDecodeError && error.reason === "empty") return new Float32Array(0);
    throw error;
  }
}

function largestDifference(a: Float32Array, b: Float32Array): number {
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]));
  return worst;
}

describe.skipIf(!hasFfmpeg)("decodeWav at other rates against ffmpeg", () => {
  const cases = RATES.flatMap((rate) =>
    ([1, 2] as const).flatMap((channels) => (["pcm_s16le", "pcm_f32le"] as const).map((codec) => [rate, channels, codec] as const)),
  );

  it.each(cases)("%i Hz, %i channel(s), %s: ffmpeg's length and samples, three seconds and a few frames long", async (rate, channels, codec) => {
    for (const { frames, bytes } of ffmpegWavs(rate, channels, codec)) {
      const fast = decodeWav(bytes);
      expect(fast, `${frames}`).toBeDefined();
      const reference = await ffmpegSamples(bytes);
      if (frames === "3 s") expect(reference.length).toBe(48000);
      expect(fast!.length, `${frames}`).toBe(reference.length);
      expect(largestDifference(fast!, reference), `${frames}`).toBeLessThanOrEqual(TOLERANCE);
    }
  });

  // ffmpeg writes these as WAVE_FORMAT_EXTENSIBLE; swr resamples them in float32 too.
  it.each([22050, 44100].flatMap((rate) => (["pcm_s24le", "pcm_s32le"] as const).map((codec) => [rate, codec] as const)))(
    "%i Hz stereo %s: ffmpeg's length and samples",
    async (rate, codec) => {
      const bytes = ffmpegWav(rate, 2, codec);
      const fast = decodeWav(bytes);
      expect(fast).toBeDefined();
      const reference = await ffmpegSamples(bytes);
      expect(fast!.length).toBe(reference.length);
      expect(largestDifference(fast!, reference)).toBeLessThanOrEqual(TOLERANCE);
    },
  );

  it("decodeAudio resamples without ffmpeg, and a file too short for one filter is empty as with ffmpeg", async () => {
    const bytes = ffmpegWav(44100, 2, "pcm_s16le");
    const tiny = shortFfmpegWav(48000, 10);
    await expect(decodeWithFfmpeg(tiny)).rejects.toMatchObject({ reason: "empty" });
    const saved = process.env.KILN_FFMPEG;
    process.env.KILN_FFMPEG = join(scratch, "no-such-ffmpeg");
    try {
      expect((await decodeAudio(bytes)).length).toBe(48000);
      await expect(decodeAudio(tiny)).rejects.toMatchObject({ reason: "empty" });
    } finally {
      if (saved === undefined) delete process.env.KILN_FFMPEG;
      else process.env.KILN_FFMPEG = saved;
    }
  });

  // 44,056 Hz reduces against 16 kHz to 2,000 phases, past the 1,024 that swr computes exactly.
  it("a rate the resampler refuses is left to ffmpeg", async () => {
    const bytes = ffmpegWav(44056, 1, "pcm_s16le");
    expect(decodeWav(bytes)).toBeUndefined();
    const decoded = await decodeAudio(bytes);
    expect(decoded.length).toBe((await ffmpegSamples(bytes)).length);
  });
});

describe("resample", () => {
  it("takes the common rates and refuses inexact or invalid ones", () => {
    for (const rate of [...RATES, 96000, 7350]) expect(canResample(rate, 16000)).toBe(true);
    for (const rate of [44056, 16001, 768000, 0, -8000, 22050.5, Number.NaN, 16000]) expect(canResample(rate, 16000)).toBe(false);
    expect(() => resample(new Float32Array(100), 16001, 16000)).toThrow(RangeError);
  });

  it("keeps a constant signal constant, to float32 rounding", () => {
    const ones = new Float32Array(48000).fill(0.5);
    for (const rate of RATES) {
      const out = resample(ones.subarray(0, rate), rate, 16000);
      expect(out.length).toBe(16000);
      // Every phase is normalized by phase 0's sum, as swr does, so the others' gains are off by a little.
      expect(largestDifference(out, new Float32Array(out.length).fill(0.5))).toBeLessThan(1e-5);
    }
  });
});
