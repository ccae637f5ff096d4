/**
 * The in-process WAV path against ffmpeg: generated 16 kHz WAVs decode to ffmpeg's samples (kiln's
 * ffmpeg command, run here directly), and files it does not take, malformed ones included, go to
 * ffmpeg or fail as ffmpeg does, without crashing or hanging.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { AudioDecodeError, decodeAudio } from "../../../../src/runtime/audio/decode.js";
import { decodeWav, MAX_RESAMPLED_SAMPLES } from "../../../../src/runtime/audio/wav.js";

const hasFfmpeg = spawnSync("ffmpeg", ["-hide_banner", "-version"], { stdio: "ignore" }).status === 0;

const scratch = mkdtempSync(join(tmpdir(), "kiln-wav-test-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** kiln's ffmpeg command on `bytes`, read from a file as decodeAudio does, or its failure. */
function ffmpegSamples(bytes: Uint8Array): { samples?: Float32Array; failed: boolean } {
  const input = join(scratch, "input");
  writeFileSync(input, bytes);
  const args = ["-nostdin", "-hide_banner", "-loglevel", "error", "-i", input, "-vn", "-f", "f32le", "-ac", "1", "-ar", "16000", "pipe:1"];
  const result = spawnSync("ffmpeg", args, { maxBuffer: 1 << 28 });
  if (result.status !== 0) return { failed: true };
  const out = result.stdout;
  const samples = new Float32Array(out.length / 4);
  new Uint8Array(samples.buffer).set(out);
  return { samples, failed: false };
}

/** Seeded numbers in -1..1, so failures reproduce. */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return (state / 2 ** 32) * 2 - 1;
  };
}

type Encoding = "s16" | "s24" | "s32" | "f32";
const BYTES: Record<Encoding, number> = { s16: 2, s24: 3, s32: 4, f32: 4 };

interface WavSpec {
  encoding: Encoding;
  channels: number;
  frames: number;
  rate?: number;
  /** WAVE_FORMAT_EXTENSIBLE with this speaker mask. */
  extensible?: number;
  /** Chunks between `fmt ` and `data`. */
  extraChunks?: Buffer[];
}

/** A RIFF/WAVE file of noise with full-scale extremes at the start. */
function makeWav(spec: WavSpec, seed = 1): Buffer {
  const { encoding, channels, frames, rate = 16000, extensible } = spec;
  const next = random(seed);
  const width = BYTES[encoding];
  const data = Buffer.alloc(frames * channels * width);
  for (let i = 0; i < frames * channels; i++) {
    const x = i === 0 ? -1 : i === 1 ? 1 : next();
    const at = i * width;
    if (encoding === "s16") data.writeInt16LE(Math.max(-32768, Math.min(32767, Math.round(x * 32768))), at);
    else if (encoding === "s24") data.writeIntLE(Math.max(-8388608, Math.min(8388607, Math.round(x * 8388608))), at, 3);
    else if (encoding === "s32") data.writeInt32LE(Math.max(-2147483648, Math.min(2147483647, Math.round(x * 2147483648))), at);
    else data.writeFloatLE(x, at);
  }
  const tag = encoding === "f32" ? 3 : 1;
  const fmt = Buffer.alloc(extensible === undefined ? 16 : 40);
  fmt.writeUInt16LE(extensible === undefined ? tag : 0xfffe, 0);
  fmt.writeUInt16LE(channels, 2);
  fmt.writeUInt32LE(rate, 4);
  fmt.writeUInt32LE(rate * channels * width, 8);
  fmt.writeUInt16LE(channels * width, 12);
  fmt.writeUInt16LE(width * 8, 14);
  if (extensible !== undefined) {
    fmt.writeUInt16LE(22, 16);
    fmt.writeUInt16LE(width * 8, 18);
    fmt.writeUInt32LE(extensible, 20);
    fmt.writeUInt16LE(tag, 24);
    Buffer.from([0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xaa, 0x00, 0x38, 0x9b, 0x71]).copy(fmt, 26);
  }
  const chunk = (id: string, body: Buffer) => {
    const head = Buffer.alloc(8);
    head.write(id, 0, "ascii");
    head.writeUInt32LE(body.length, 4);
    return Buffer.concat([head, body, Buffer.alloc(body.length % 2)]);
  };
  const body = Buffer.concat([Buffer.from("WAVE"), chunk("fmt ", fmt), ...(spec.extraChunks ?? []), chunk("data", data)]);
  const riff = Buffer.alloc(8);
  riff.write("RIFF", 0, "ascii");
  riff.writeUInt32LE(body.length, 4);
  return Buffer.concat([riff, body]);
}

function expectSameSamples(actual: Float32Array, expected: Float32Array) {
  expect(actual.length).toBe(expected.length);
  let worst = 0;
  for (let i = 0; i < actual.length; i++) worst = Math.max(worst, Math.abs(actual[i] - expected[i]));
  expect(worst).toBeLessThanOrEqual(1e-7);
}

describe.skipIf(!hasFfmpeg)("decodeWav against ffmpeg", () => {
  const list = Buffer.from("LIST\x0c\x00\x00\x00INFOISFT\x00\x00\x00\x00", "latin1");
  const taken: Array<[string, WavSpec]> = [
    ["16-bit mono", { encoding: "s16", channels: 1, frames: 16000 }],
    ["16-bit stereo", { encoding: "s16", channels: 2, frames: 16000 }],
    ["24-bit mono", { encoding: "s24", channels: 1, frames: 4000 }],
    ["24-bit stereo", { encoding: "s24", channels: 2, frames: 4000 }],
    ["32-bit int mono", { encoding: "s32", channels: 1, frames: 4000 }],
    ["32-bit int stereo", { encoding: "s32", channels: 2, frames: 4000 }],
    ["float32 mono", { encoding: "f32", channels: 1, frames: 16000 }],
    ["float32 stereo", { encoding: "f32", channels: 2, frames: 16000 }],
    ["extensible 16-bit mono", { encoding: "s16", channels: 1, frames: 4000, extensible: 0x4 }],
    ["extensible float32 stereo", { encoding: "f32", channels: 2, frames: 4000, extensible: 0x3 }],
    ["a LIST chunk before the data", { encoding: "s16", channels: 1, frames: 4000, extraChunks: [list] }],
  ];
  it.each(taken)("%s: the same samples as ffmpeg", (_, spec) => {
    const bytes = makeWav(spec);
    const fast = decodeWav(bytes);
    expect(fast).toBeDefined();
    const reference = ffmpegSamples(bytes);
    expect(reference.failed).toBe(false);
    expectSameSamples(fast!, reference.samples!);
  });

  it("a WAV written by ffmpeg itself", () => {
    const out = join(scratch, "made.wav");
    const args = [
      "-nostdin",
      "-hide_banner",
      "-loglevel",
      "error",
      "-y",
      "-f",
      "lavfi",
      "-i",
      "sine=frequency=440:duration=1",
      "-ar",
      "16000",
      "-ac",
      "2",
      "-c:a",
      "pcm_s16le",
      out,
    ];
    expect(spawnSync("ffmpeg", args).status).toBe(0);
    const bytes = readFileSync(out);
    const fast = decodeWav(bytes);
    expect(fast).toBeDefined();
    expectSameSamples(fast!, ffmpegSamples(bytes).samples!);
  });

  it("a WAV ffmpeg streamed (sizes left unset): left to ffmpeg", async () => {
    const args = [
      "-nostdin",
      "-hide_banner",
      "-loglevel",
      "error",
      "-f",
      "lavfi",
      "-i",
      "sine=frequency=440:duration=1",
      "-ar",
      "16000",
      "-c:a",
      "pcm_s16le",
      "-f",
      "wav",
      "pipe:1",
    ];
    const made = spawnSync("ffmpeg", args);
    expect(made.status).toBe(0);
    expect(decodeWav(made.stdout)).toBeUndefined();
    expectSameSamples(await decodeAudio(made.stdout), ffmpegSamples(made.stdout).samples!);
  });

  it("decodeAudio returns the fast path's samples", async () => {
    const bytes = makeWav({ encoding: "s16", channels: 2, frames: 8000 });
    expectSameSamples(await decodeAudio(bytes), ffmpegSamples(bytes).samples!);
  });

  const left: Array<[string, WavSpec]> = [
    ["44,056 Hz (more resampling phases than swr computes exactly)", { encoding: "s16", channels: 1, frames: 4000, rate: 44056 }],
    ["16,001 Hz", { encoding: "s16", channels: 1, frames: 4000, rate: 16001 }],
    ["22.05 kHz stereo past the in-process resampling limit", { encoding: "s16", channels: 2, frames: MAX_RESAMPLED_SAMPLES / 2 + 1, rate: 22050 }],
    ["three channels", { encoding: "s16", channels: 3, frames: 4000 }],
    ["six channels", { encoding: "f32", channels: 6, frames: 4000 }],
    ["extensible stereo with a back-left/back-right mask", { encoding: "s16", channels: 2, frames: 4000, extensible: 0x30 }],
  ];
  it.each(left)("%s: left to ffmpeg", async (_, spec) => {
    const bytes = makeWav(spec);
    expect(decodeWav(bytes)).toBeUndefined();
    const reference = ffmpegSamples(bytes);
    // ffmpeg 5.1 cannot mix a back-left/back-right pair down to mono; kiln fails as it does.
    if (reference.failed) await expect(decodeAudio(bytes)).rejects.toBeInstanceOf(AudioDecodeError);
    else expectSameSamples(await decodeAudio(bytes), reference.samples!);
  });

  /** Malformed variants of a good 16-bit mono WAV (44-byte header). */
  const good = () => makeWav({ encoding: "s16", channels: 1, frames: 1600 });
  const malformed: Array<[string, () => Buffer]> = [
    ["a truncated data chunk", () => good().subarray(0, 44 + 1000)],
    ["a truncated data chunk ending mid-sample", () => good().subarray(0, 44 + 1001)],
    ["a header cut inside the fmt chunk", () => good().subarray(0, 30)],
    ["only the RIFF header", () => good().subarray(0, 12)],
    ["zero channels", () => withUint16(good(), 22, 0)],
    ["zero block align", () => withUint16(good(), 32, 0)],
    ["a huge declared data size", () => withUint32(good(), 40, 0xfffffff0)],
    ["a streamed data size (0xffffffff)", () => withUint32(good(), 40, 0xffffffff)],
    ["a zero data size", () => withUint32(good(), 40, 0)],
    ["a huge declared fmt size", () => withUint32(good(), 16, 0xfffffff0)],
    ["a huge declared RIFF size", () => withUint32(good(), 4, 0xfffffff0)],
    ["an odd data size", () => withUint32(good(), 40, 3199)],
    ["no data chunk", () => good().subarray(0, 36)],
    ["RIFX (big-endian)", () => withAscii(good(), 0, "RIFX")],
    ["RF64 without a ds64 chunk", () => withAscii(good(), 0, "RF64")],
  ];
  it.each(malformed)("%s: decoded as ffmpeg does, or failing as ffmpeg does", async (_, make) => {
    const bytes = make();
    const fast = decodeWav(bytes);
    const reference = ffmpegSamples(bytes);
    const ours = await decodeAudio(bytes).then(
      (samples) => ({ samples, error: undefined }),
      (error: unknown) => ({ samples: undefined, error }),
    );
    if (fast) expectSameSamples(fast, reference.samples!);
    if (reference.failed || reference.samples!.length === 0) {
      expect(ours.error).toBeInstanceOf(AudioDecodeError);
    } else {
      expect(ours.error).toBeUndefined();
      expectSameSamples(ours.samples!, reference.samples!);
    }
  });
});

describe("decodeWav without ffmpeg", () => {
  it("never throws on random bytes behind a WAV header", () => {
    const next = random(7);
    for (let n = 0; n < 500; n++) {
      const bytes = makeWav({ encoding: "s16", channels: 1, frames: 64 }, n);
      const flips = 1 + (n % 8);
      for (let f = 0; f < flips; f++) bytes[Math.floor(((next() + 1) / 2) * 48) % 48] = Math.floor(((next() + 1) / 2) * 256) & 0xff;
      expect(() => decodeWav(bytes)).not.toThrow();
    }
  });

  it("takes nothing but RIFF/WAVE", () => {
    expect(decodeWav(new Uint8Array(0))).toBeUndefined();
    expect(decodeWav(Buffer.from("ID3\x03\x00\x00\x00\x00\x00\x00 not a wav at all", "latin1"))).toBeUndefined();
  });

  it("reads a WAV inside a larger buffer at an odd offset", () => {
    const bytes = makeWav({ encoding: "s16", channels: 1, frames: 100 });
    const holder = new Uint8Array(bytes.length + 1);
    holder.set(bytes, 1);
    const samples = decodeWav(holder.subarray(1));
    expect(samples?.length).toBe(100);
    expect(samples![0]).toBe(-1);
    expect(samples![1]).toBe(32767 / 32768);
  });
});

function withUint16(bytes: Buffer, at: number, value: number): Buffer {
  bytes.writeUInt16LE(value, at);
  return bytes;
}

function withUint32(bytes: Buffer, at: number, value: number): Buffer {
  bytes.writeUInt32LE(value, at);
  return bytes;
}

function withAscii(bytes: Buffer, at: number, text: string): Buffer {
  bytes.write(text, at, "ascii");
  return bytes;
}
