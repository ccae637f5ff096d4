/**
 * `kiln run <speech model> <audio file>`: a file's transcript at the terminal, as whisper.cpp's and
 * faster-whisper's command lines give one, through the same speech engine as `kiln serve`: each
 * segment on its own line as soon as its 30 s window is decoded, or, once the file is done, the
 * answer the HTTP API gives for a `response_format` (subtitles as SRT or WebVTT, say).
 */
import { readFile } from "node:fs/promises";
import { billedSeconds, formatTranscript, type TranscriptionResponseFormat } from "../api/index.js";
import { loadSpeechModel, type LoadSpeechModelOptions } from "../provision/index.js";
import { decodeAudio } from "../runtime/audio/index.js";
import type { DeviceChoice } from "../runtime/device/index.js";
import type { CommandIO } from "./command.js";
import { chooseDevice, describeDevice } from "./device-option.js";
import { UsageError } from "./options.js";

export interface TranscribeFileOptions extends Pick<LoadSpeechModelOptions, "deviceActivations" | "threads"> {
  /** `--device`, resolved here once the file is read. */
  device: DeviceChoice;
  /** Whisper's starting temperature, 0..1. Default: 0 (beam search, falling back to sampling where a window fails). */
  temperature?: number;
  /** "lines" (each segment as its window is decoded) or a `response_format` of the API, printed whole at the end. Default "lines". */
  format?: "lines" | TranscriptionResponseFormat;
}

/**
 * Transcribes the file at `path` (or all of stdin when `path` is undefined) and writes its segments
 * to stdout. Usage errors (a temperature over 1, no file) come before anything is loaded.
 */
export async function transcribeFile(slug: string, path: string | undefined, options: TranscribeFileOptions, io: CommandIO): Promise<void> {
  if (options.temperature !== undefined && options.temperature > 1) throw new UsageError("--temperature: a speech model takes 0 to 1");
  const bytes = await audioBytes(path, io);
  const device = await chooseDevice("run", options.device, io);
  io.stderr.write(`${slug}: on ${describeDevice(device)}\n`);
  const model = await loadSpeechModel(slug, {
    device: device.device,
    deviceActivations: options.deviceActivations,
    adapterMemory: device.adapter?.memory,
    threads: options.threads,
    onStage: (stage) => io.stderr.write(`${slug}: ${stage}\n`),
  });
  try {
    const samples = await decodeAudio(bytes, { filename: path });
    const format = options.format ?? "lines";
    const printLines = (segments: readonly { text: string }[]) => {
      for (const segment of segments) if (segment.text.trim() !== "") io.stdout.write(`${segment.text.trim()}\n`);
    };
    const transcript = await model.transcribe(samples, { temperature: options.temperature, onSegments: format === "lines" ? printLines : undefined });
    if (format !== "lines") {
      const { body } = formatTranscript(transcript, format, { type: "duration", seconds: billedSeconds(samples.length) }, { words: false });
      io.stdout.write(typeof body === "string" ? body : `${JSON.stringify(body, null, 2)}\n`);
    }
  } finally {
    await model.close();
  }
}

async function audioBytes(path: string | undefined, io: CommandIO): Promise<Uint8Array> {
  if (path !== undefined) {
    try {
      return await readFile(path);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      throw new Error(code === "ENOENT" ? `${path}: no such file` : code === "EISDIR" ? `${path}: a folder, not an audio file` : (err as Error).message);
    }
  }
  if (!io.stdin || io.stdin.isTTY) throw new UsageError("needs an audio file to transcribe (a path after the model, or the file on stdin)");
  const chunks: Buffer[] = [];
  for await (const chunk of io.stdin) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string));
  return Buffer.concat(chunks);
}
