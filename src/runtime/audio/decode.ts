/**
 * Audio decoding through the ffmpeg command-line tool: any container and codec ffmpeg reads becomes
 * 16 kHz mono float32 samples. The bytes go to a private temp file rather than stdin because MP4/M4A
 * files may keep their index (moov atom) at the end, which needs a seekable input.
 */
import { spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { extname, join } from "node:path";
import { SAMPLE_RATE } from "../artifact/speech-graph.js";
import { decodeWav } from "./wav.js";

/** Why audio could not be decoded. */
export type AudioProblem = "empty" | "unsupported" | "corrupt" | "ffmpeg_missing";

export class AudioDecodeError extends Error {
  readonly reason: AudioProblem;
  constructor(reason: AudioProblem, message: string) {
    super(message);
    this.name = "AudioDecodeError";
    this.reason = reason;
  }
}

export interface DecodeOptions {
  /** The upload's file name; only its extension is kept (a hint for ffmpeg's probing). Default: none. */
  filename?: string;
  /** Aborting kills ffmpeg and rejects with the signal's reason. Default: never aborted. */
  signal?: AbortSignal;
}

/** The ffmpeg executable: `KILN_FFMPEG` when set (tests, unusual installs), else `ffmpeg` on PATH. */
function ffmpegCommand(): string {
  return process.env.KILN_FFMPEG || "ffmpeg";
}

/** stderr kept for the error message and classification; ffmpeg at `-loglevel error` says little. */
const MAX_STDERR_CHARS = 8192;

/**
 * Decodes any audio file ffmpeg reads into 16 kHz mono float32 samples in -1..1. Plain PCM WAVs at
 * 16 kHz or at a rate resampled exactly as ffmpeg does (8 to 48 kHz among others) are decoded
 * in-process ({@link decodeWav}) into the same samples; everything else runs ffmpeg.
 */
export async function decodeAudio(bytes: Uint8Array, options: DecodeOptions = {}): Promise<Float32Array> {
  if (bytes.length === 0) throw new AudioDecodeError("empty", "the file is empty");
  options.signal?.throwIfAborted();
  // Plain PCM WAVs decode in-process, resampled as ffmpeg would when not at 16 kHz, saving ffmpeg's start.
  const wav = decodeWav(bytes);
  if (wav) {
    // Too short for one resampling filter: ffmpeg gives no samples either.
    if (wav.length === 0) throw new AudioDecodeError("empty", "the file holds no audio samples");
    return wav;
  }
  return decodeWithFfmpeg(bytes, options);
}

/** Decodes `bytes` with kiln's ffmpeg command, whatever they hold (the in-process WAV path is checked against it). */
export async function decodeWithFfmpeg(bytes: Uint8Array, options: DecodeOptions = {}): Promise<Float32Array> {
  if (bytes.length === 0) throw new AudioDecodeError("empty", "the file is empty");
  options.signal?.throwIfAborted();
  const dir = await mkdtemp(join(tmpdir(), "kiln-audio-"));
  try {
    const input = join(dir, `input${safeExtension(options.filename)}`);
    await writeFile(input, bytes, { mode: 0o600 });
    const samples = await runFfmpeg(input, options.signal);
    if (samples.length === 0) throw new AudioDecodeError("empty", "the file holds no audio samples");
    return samples;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Keeps a short alphanumeric extension of the upload's name, which helps ffmpeg probe raw streams. */
function safeExtension(filename: string | undefined): string {
  const ext = filename ? extname(filename).toLowerCase() : "";
  return /^\.[a-z0-9]{1,8}$/.test(ext) ? ext : "";
}

function ffmpegArgs(input: string): string[] {
  return ["-nostdin", "-hide_banner", "-loglevel", "error", "-i", input, "-vn", "-f", "f32le", "-ac", "1", "-ar", String(SAMPLE_RATE), "pipe:1"];
}

function runFfmpeg(input: string, signal: AbortSignal | undefined): Promise<Float32Array> {
  return new Promise((resolve, reject) => {
    const child = spawn(ffmpegCommand(), ffmpegArgs(input), { stdio: ["ignore", "pipe", "pipe"], shell: false });
    const chunks: Buffer[] = [];
    let stdoutBytes = 0;
    let stderr = "";
    let settled = false;
    const finish = (error: unknown, samples?: Float32Array) => {
      if (settled) return;
      settled = true;
      signal?.removeEventListener("abort", onAbort);
      if (error) reject(error);
      else resolve(samples!);
    };
    const onAbort = () => {
      child.kill("SIGKILL");
      finish(signal?.reason ?? new Error("aborted"));
    };
    // The signal may have fired while the temp file was written, before this listener existed.
    if (signal?.aborted) return onAbort();
    signal?.addEventListener("abort", onAbort, { once: true });
    child.stdout.on("data", (chunk: Buffer) => {
      chunks.push(chunk);
      stdoutBytes += chunk.length;
    });
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (text: string) => {
      if (stderr.length < MAX_STDERR_CHARS) stderr += text.slice(0, MAX_STDERR_CHARS - stderr.length);
    });
    child.on("error", (error: NodeJS.ErrnoException) => {
      if (error.code === "ENOENT") {
        finish(new AudioDecodeError("ffmpeg_missing", `audio decoding needs ffmpeg, which is not installed on the server (${ffmpegCommand()} not found)`));
      } else finish(error);
    });
    child.on("close", (code, killedBy) => {
      if (code === 0) finish(undefined, samplesOf(Buffer.concat(chunks, stdoutBytes)));
      else finish(classifyFailure(stderr.replaceAll(input, "input"), stdoutBytes > 0, code ?? killedBy));
    });
  });
}

/** Little-endian f32 bytes to samples (copied, so the result is aligned and owns its buffer). */
function samplesOf(bytes: Buffer): Float32Array {
  const count = Math.floor(bytes.length / 4);
  const samples = new Float32Array(count);
  new Uint8Array(samples.buffer).set(bytes.subarray(0, count * 4));
  return samples;
}

/**
 * Turns a failed ffmpeg run into an error for the API user. Failing to open the input means the
 * format is not one ffmpeg reads ("unsupported"), unless a demuxer (named as `[mov,mp4,... @ 0x...]`)
 * recognized the container and ffmpeg reports invalid data: a known format with a broken structure,
 * like an MP4 cut before its index ("corrupt"). Random bytes that some demuxer probes as its own fail
 * with other errors and stay "unsupported". Failing after audio came out is "corrupt".
 */
export function classifyFailure(stderr: string, producedAudio: boolean, exit: number | string | null): AudioDecodeError {
  const detail = summarizeStderr(stderr) || `ffmpeg exited with ${exit}`;
  const message = (what: string) => `the file is not audio that can be decoded (${what}: ${detail})`;
  const noAudioStream = /does not contain any stream|matches no streams|Output file .* does not contain/i.test(stderr);
  const unknownCodec = /Decoder .* not found|unknown codec|Could not find codec parameters|no decoder/i.test(stderr);
  const openFailed = /^input: /m.test(stderr);
  const brokenContainer = /^\[[^\]]+ @ 0x[0-9a-f]+\]/m.test(stderr) && /^input: Invalid data found/m.test(stderr);
  if (noAudioStream) return new AudioDecodeError("unsupported", message("no audio stream"));
  if (unknownCodec) return new AudioDecodeError("unsupported", message("unsupported codec"));
  if (!producedAudio && openFailed && !brokenContainer) return new AudioDecodeError("unsupported", message("unrecognized format"));
  return new AudioDecodeError("corrupt", message("corrupt or truncated data"));
}

/** The last few distinct lines of ffmpeg's stderr, without memory addresses. */
function summarizeStderr(stderr: string): string {
  const lines = stderr
    .split(/\r?\n/)
    .map((line) => line.replace(/ @ 0x[0-9a-f]+/g, "").trim())
    .filter((line) => line.length > 0);
  return [...new Set(lines)].slice(-3).join("; ").slice(0, 300);
}

/** Whether ffmpeg can be started (runs `ffmpeg -version`); the result is cached per process. */
let ffmpegProbe: Promise<boolean> | undefined;
export function ffmpegAvailable(): Promise<boolean> {
  ffmpegProbe ??= new Promise((resolve) => {
    const child = spawn(ffmpegCommand(), ["-hide_banner", "-version"], { stdio: "ignore", shell: false });
    child.on("error", () => resolve(false));
    child.on("close", (code) => resolve(code === 0));
  });
  return ffmpegProbe;
}
