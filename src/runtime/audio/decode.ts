/**
 * Audio decoding through the ffmpeg command-line tool: any container and codec ffmpeg reads becomes
 * 16 kHz mono float32 samples. Most uploads go to the stdin of a spare ffmpeg started ahead of time
 * (`spare-ffmpeg.ts`), MP3s cut to their gapless length as from a file (`mp3-gapless.ts`);
 * MP4/M4A/MOV files whose index (moov atom) sits after the media and needs a seekable input, MP3s
 * whose first frame this reader does not find, and anything the pipe did not decode go to a private
 * temp file and an ffmpeg started for it, whose errors are the ones reported.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { extname, join } from "node:path";
import { SAMPLE_RATE } from "../artifact/speech-graph.js";
import { mp3GaplessLength } from "./mp3-gapless.js";
import { startSpareFfmpeg, takeSpareFfmpeg } from "./spare-ffmpeg.js";
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
  const length = pipedLength(bytes);
  if (length !== undefined) {
    const spare = takeSpareFfmpeg(ffmpegCommand(), ffmpegArgs(PIPE_INPUT));
    if (spare) {
      const samples = await runFfmpeg(spare, PIPE_INPUT, options.signal, bytes).catch((err: unknown) => {
        if (options.signal?.aborted) throw err;
        return undefined;
      });
      if (samples && samples.length > 0) return samples.length > length ? samples.subarray(0, length) : samples;
    }
  }
  return decodeFromFile(bytes, options);
}

/** Starts the spare ffmpeg that the next upload's decoding takes (a server about to transcribe calls it). */
export function prepareFfmpeg(): void {
  startSpareFfmpeg(ffmpegCommand(), ffmpegArgs(PIPE_INPUT));
}

const PIPE_INPUT = "pipe:0";

/**
 * How many samples a piped decode of `bytes` keeps to give what ffmpeg gives from a file (`Infinity`:
 * all of them), or undefined when the file must go to ffmpeg as a file. From a pipe ffmpeg keeps an
 * MP3's end padding that its LAME tag says to drop (about 20 ms more samples than from a file, and
 * than faster-whisper's decoding gives), so an MP3 (an ID3 tag or an MPEG audio frame first) is cut
 * to its gapless length, and goes to a file when its first frame is not where that is read from.
 */
function pipedLength(bytes: Uint8Array): number | undefined {
  if (needsSeeking(bytes)) return undefined;
  return looksLikeMp3(bytes) ? mp3GaplessLength(bytes, SAMPLE_RATE) : Infinity;
}

/** An ID3 tag or an MPEG audio frame's sync bits first (ADTS AAC and layers I/II too, which {@link mp3GaplessLength} tells apart). */
function looksLikeMp3(bytes: Uint8Array): boolean {
  const id3 = bytes.length >= 3 && bytes[0] === 0x49 && bytes[1] === 0x44 && bytes[2] === 0x33;
  const frameSync = bytes.length >= 2 && bytes[0] === 0xff && (bytes[1] & 0xe0) === 0xe0;
  return id3 || frameSync;
}

/**
 * Whether an MP4-family file (an `ftyp` box first) keeps its index (`moov`) after its media data,
 * which a pipe cannot seek to; a "fast start" file, index first, streams.
 */
function needsSeeking(bytes: Uint8Array): boolean {
  const boxType = (at: number) => String.fromCharCode(bytes[at + 4], bytes[at + 5], bytes[at + 6], bytes[at + 7]);
  if (bytes.length < 8 || boxType(0) !== "ftyp") return false;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let at = 0; at + 8 <= bytes.length; ) {
    const type = boxType(at);
    if (type === "moov") return false;
    if (type === "mdat") return true;
    const size = view.getUint32(at);
    const large = size === 1 && at + 16 <= bytes.length ? Number(view.getBigUint64(at + 8)) : size;
    if (large < 8) return true;
    at += large;
  }
  return true;
}

async function decodeFromFile(bytes: Uint8Array, options: DecodeOptions): Promise<Float32Array> {
  const dir = await mkdtemp(join(tmpdir(), "kiln-audio-"));
  try {
    const input = join(dir, `input${safeExtension(options.filename)}`);
    await writeFile(input, bytes, { mode: 0o600 });
    const child = spawn(ffmpegCommand(), ffmpegArgs(input), { stdio: ["ignore", "pipe", "pipe"], shell: false });
    const samples = await runFfmpeg(child, input, options.signal);
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

/** Collects a started ffmpeg's samples (writing `stdin` to it first, when given); `input` is its input's name, kept out of error messages. */
function runFfmpeg(child: ChildProcess, input: string, signal: AbortSignal | undefined, stdin?: Uint8Array): Promise<Float32Array> {
  return new Promise((resolve, reject) => {
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
    if (stdin) child.stdin?.end(stdin);
    child.stdout!.on("data", (chunk: Buffer) => {
      chunks.push(chunk);
      stdoutBytes += chunk.length;
    });
    child.stderr!.setEncoding("utf8");
    child.stderr!.on("data", (text: string) => {
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
