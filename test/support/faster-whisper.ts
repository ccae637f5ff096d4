/**
 * The speech tests' reference: faster-whisper (CTranslate2, CPU) through test/support/faster-whisper.py,
 * run with the .cache/pyclient venv that scripts/setup.sh prepares. KILN_TEST_PYTHON overrides the
 * interpreter (any Python with faster-whisper installed).
 */
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);
const SCRIPT = resolve("test/support/faster-whisper.py");

/** The Python that has faster-whisper: KILN_TEST_PYTHON, else the setup's .cache/pyclient venv. */
export function referencePython(): string {
  return process.env.KILN_TEST_PYTHON || resolve(".cache/pyclient/bin/python");
}

/** Whether the reference can run here (the interpreter exists); tests skip with a reason otherwise. */
export function referenceAvailable(): boolean {
  return existsSync(referencePython());
}

export interface ReferenceOptions {
  /** CTranslate2 compute type. Default "float32" (the closest to kiln's float32 graphs). */
  computeType?: "float32" | "int8";
  /** CPU threads; 0 lets CTranslate2 choose. Default 0. */
  threads?: number;
  /** Beam width; 1 is greedy decoding. Default 1. */
  beamSize?: number;
  /** Also return per-word timings. Default false. */
  wordTimestamps?: boolean;
  /** Feed the previous window's text as the prompt (faster-whisper's default). Default true. */
  conditionOnPreviousText?: boolean;
  /** CTranslate2's random seed for the temperature fallback's sampling, set before each file. Default 1. */
  seed?: number;
  /** faster-whisper's `initial_prompt` (the API's `prompt`). Default none. */
  initialPrompt?: string;
  /** faster-whisper's `hotwords`. Default none. */
  hotwords?: string;
}

export interface ReferenceSegment {
  start: number;
  end: number;
  text: string;
  words?: Array<{ start: number; end: number; word: string; probability: number }>;
}

export interface ReferenceTranscript {
  file: string;
  text: string;
  segments: ReferenceSegment[];
  /** Audio duration, in seconds. */
  duration: number;
  /** Wall time of this file's transcription (decoding included), in seconds. */
  seconds: number;
}

/** Transcribes `files` in English with faster-whisper on the CTranslate2 model folder `modelDir`, without VAD. */
export async function referenceTranscribe(
  modelDir: string,
  files: string[],
  options: ReferenceOptions = {},
): Promise<{ results: ReferenceTranscript[]; loadSeconds: number }> {
  const args = [
    SCRIPT,
    "transcribe",
    "--model",
    modelDir,
    "--compute-type",
    options.computeType ?? "float32",
    "--threads",
    String(options.threads ?? 0),
    "--beam-size",
    String(options.beamSize ?? 1),
    "--seed",
    String(options.seed ?? 1),
  ];
  if (options.wordTimestamps) args.push("--word-timestamps");
  if (options.conditionOnPreviousText === false) args.push("--no-condition-on-previous-text");
  if (options.initialPrompt !== undefined) args.push("--initial-prompt", options.initialPrompt);
  if (options.hotwords !== undefined) args.push("--hotwords", options.hotwords);
  const { stdout } = await run(referencePython(), [...args, ...files], { maxBuffer: 64 * 1024 * 1024 });
  const parsed = JSON.parse(stdout) as { results: ReferenceTranscript[]; load_seconds: number };
  return { results: parsed.results, loadSeconds: parsed.load_seconds };
}

export interface ReferenceMel {
  /** [bins, frames] row-major, as faster-whisper's FeatureExtractor returns it. */
  data: Float32Array;
  bins: number;
  frames: number;
}

/**
 * faster-whisper's FeatureExtractor log-mel of `samples` (16 kHz mono), computed on exactly these
 * samples so the comparison tests the features alone, not the decoder.
 */
export async function referenceLogMel(samples: Float32Array, bins = 80): Promise<ReferenceMel> {
  const dir = mkdtempSync(join(tmpdir(), "kiln-refmel-"));
  try {
    const input = join(dir, "samples.f32");
    const output = join(dir, "mel.f32");
    writeFileSync(input, new Uint8Array(samples.buffer, samples.byteOffset, samples.byteLength));
    const { stdout } = await run(referencePython(), [SCRIPT, "mel", "--f32", "--bins", String(bins), "--out", output, input]);
    const shape = JSON.parse(stdout) as { bins: number; frames: number };
    const bytes = readFileSync(output);
    const data = new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
    return { data, bins: shape.bins, frames: shape.frames };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
