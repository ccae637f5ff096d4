/**
 * In-process decoding of the plainest WAV uploads: uncompressed PCM, mono or stereo, at Whisper's
 * 16 kHz or at a rate {@link resample} converts exactly as ffmpeg does (8, 11.025, 12, 22.05, 24,
 * 32, 44.1 and 48 kHz among others). Spawning ffmpeg costs tens of milliseconds, a noticeable share
 * of a short clip's transcription. The samples are the ones kiln's ffmpeg command produces
 * (ffmpeg's libswresample conversions, reproduced in float32 arithmetic); anything this module is
 * not sure about (rates swr steps through inexactly, compressed or 8-bit data, more than two
 * channels, RIFX, RF64, streamed or truncated files, odd chunk layouts) is left to ffmpeg.
 */
import { SAMPLE_RATE } from "../artifact/speech-graph.js";
import { canResample, resample } from "./resample.js";

const FORMAT_PCM = 0x0001;
const FORMAT_FLOAT = 0x0003;
const FORMAT_EXTENSIBLE = 0xfffe;
/** The GUID of WAVE_FORMAT_EXTENSIBLE's subformat after its leading 16-bit format tag. */
const SUBFORMAT_TAIL = [0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xaa, 0x00, 0x38, 0x9b, 0x71];
/** Speaker masks whose layout ffmpeg treats as plain mono (front center) and stereo (front left, right). */
const MONO_MASK = 0x4;
const STEREO_MASK = 0x3;
/**
 * libswresample's stereo-to-mono coefficient: each side times sqrt(1/2), not halved, and not
 * normalized when the output is float (its matrix is only scaled down for integer outputs).
 */
const STEREO_TO_MONO = Math.fround(Math.SQRT1_2);

/**
 * The most input samples (frames x channels) resampled in-process: 30 s of 48 kHz mono, about 35 ms
 * of the event loop on the development VM (65 s of 22.05 kHz mono; 15 s of 48 kHz stereo).
 */
export const MAX_RESAMPLED_SAMPLES = 30 * 48_000;

type SampleKind = "s16" | "s24" | "s32" | "f32";

interface WavFormat {
  kind: SampleKind;
  channels: 1 | 2;
  /** Frames per second, 16 kHz or one {@link resample} takes to it. */
  rate: number;
}

interface WavLayout extends WavFormat {
  /** Offset and byte length of the data chunk's payload, a whole number of frames. */
  dataOffset: number;
  dataBytes: number;
}

const ascii = (bytes: Uint8Array, at: number) => String.fromCharCode(bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]);

/** What a `fmt ` chunk describes, or undefined when this module does not take it. */
function parseFormat(view: DataView, bytes: Uint8Array, at: number, size: number): WavFormat | undefined {
  if (size < 16) return undefined;
  let format = view.getUint16(at, true);
  const channels = view.getUint16(at + 2, true);
  const rate = view.getUint32(at + 4, true);
  const blockAlign = view.getUint16(at + 12, true);
  const bits = view.getUint16(at + 14, true);
  if (format === FORMAT_EXTENSIBLE) {
    if (size < 40 || view.getUint16(at + 16, true) < 22) return undefined;
    // Fewer valid bits than the container holds, or a speaker layout other than plain mono or
    // stereo, could change how ffmpeg reads or mixes the channels.
    if (view.getUint16(at + 18, true) !== bits) return undefined;
    const mask = view.getUint32(at + 20, true);
    if (mask !== (channels === 1 ? MONO_MASK : STEREO_MASK)) return undefined;
    if (!SUBFORMAT_TAIL.every((b, i) => bytes[at + 26 + i] === b)) return undefined;
    format = view.getUint16(at + 24, true);
  }
  if (channels !== 1 && channels !== 2) return undefined;
  if ((rate !== SAMPLE_RATE && !canResample(rate, SAMPLE_RATE)) || blockAlign !== (channels * bits) / 8) return undefined;
  let kind: SampleKind | undefined;
  if (format === FORMAT_PCM) kind = bits === 16 ? "s16" : bits === 24 ? "s24" : bits === 32 ? "s32" : undefined;
  else if (format === FORMAT_FLOAT && bits === 32) kind = "f32";
  return kind && { kind, channels, rate };
}

/** Walks the RIFF chunks to the format and data chunks; undefined when anything is unusual. */
function parseLayout(bytes: Uint8Array): WavLayout | undefined {
  if (bytes.length < 12 || ascii(bytes, 0) !== "RIFF" || ascii(bytes, 8) !== "WAVE") return undefined;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let format: WavFormat | undefined;
  let sawFormat = false;
  for (let offset = 12; offset + 8 <= bytes.length; ) {
    const id = ascii(bytes, offset);
    const size = view.getUint32(offset + 4, true);
    const body = offset + 8;
    // A chunk running past the end (a truncated file, or a streamed one whose sizes were never
    // filled in) is read by ffmpeg up to the end of the file; that case is ffmpeg's.
    if (size > bytes.length - body) return undefined;
    if (id === "fmt ") {
      if (sawFormat) return undefined;
      sawFormat = true;
      format = parseFormat(view, bytes, body, size);
      if (!format) return undefined;
    } else if (id === "data") {
      if (!format || size === 0) return undefined;
      const frameBytes = format.channels * (format.kind === "s16" ? 2 : format.kind === "s24" ? 3 : 4);
      if (size % frameBytes !== 0) return undefined;
      return { ...format, dataOffset: body, dataBytes: size };
    }
    // Whether a reader pads an odd-sized chunk to an even offset varies; such files go to ffmpeg.
    if (size % 2 !== 0) return undefined;
    offset = body + size;
  }
  return undefined;
}

/**
 * One channel's samples as float32, as libswresample converts them: 16 and 24-bit integers divided
 * by their full scale (ffmpeg decodes 24-bit PCM into the top of a 32-bit sample and scales by
 * 2^-31, the same value), 32-bit integers divided by 2^31 and rounded to float32 (exact division by
 * a power of two, so rounding once matches ffmpeg's int-to-float conversion and scaling), floats as
 * they are.
 */
function readChannel(view: DataView, layout: WavLayout, frames: number, channel: number): Float32Array {
  const { kind, channels, dataOffset } = layout;
  const samples = new Float32Array(frames);
  switch (kind) {
    case "s16":
      for (let i = 0, at = dataOffset + channel * 2; i < frames; i++, at += channels * 2) samples[i] = view.getInt16(at, true) / 32768;
      break;
    case "s24":
      for (let i = 0, at = dataOffset + channel * 3; i < frames; i++, at += channels * 3) {
        samples[i] = (view.getUint8(at) | (view.getUint8(at + 1) << 8) | (view.getInt8(at + 2) << 16)) / 8388608;
      }
      break;
    case "s32":
      for (let i = 0, at = dataOffset + channel * 4; i < frames; i++, at += channels * 4) samples[i] = view.getInt32(at, true) / 2147483648;
      break;
    case "f32":
      for (let i = 0, at = dataOffset + channel * 4; i < frames; i++, at += channels * 4) samples[i] = view.getFloat32(at, true);
      break;
  }
  return samples;
}

/** Stereo to mono as libswresample mixes in float32: each side times the coefficient, rounded, then their sum, rounded. */
function mixToMono(left: Float32Array, right: Float32Array): Float32Array {
  const mono = new Float32Array(left.length);
  for (let i = 0; i < mono.length; i++) mono[i] = Math.fround(STEREO_TO_MONO * left[i]) + Math.fround(STEREO_TO_MONO * right[i]);
  return mono;
}

/**
 * Decodes a PCM WAV (16, 24 or 32-bit integer or 32-bit float; mono or stereo; plain or
 * WAVE_FORMAT_EXTENSIBLE) at 16 kHz or at a rate {@link canResample} takes to 16 kHz into 16 kHz
 * mono float32 samples, the same ones kiln's ffmpeg command gives (within float32 rounding when
 * resampled). A file shorter than about one resampling filter decodes, as in ffmpeg, to no samples.
 * Returns undefined for any file it does not take (and for one that needs resampling of more than
 * {@link MAX_RESAMPLED_SAMPLES} samples), which then goes to ffmpeg; never throws on
 * malformed input.
 */
export function decodeWav(bytes: Uint8Array): Float32Array | undefined {
  const layout = parseLayout(bytes);
  if (!layout) return undefined;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const frameBytes = layout.channels * (layout.kind === "s16" ? 2 : layout.kind === "s24" ? 3 : 4);
  const frames = layout.dataBytes / frameBytes;
  // Resampling runs on the server's event loop (ffmpeg in a process of its own): past this much work
  // the file is ffmpeg's, so that no upload holds other requests up for more than a few tens of ms.
  if (layout.rate !== SAMPLE_RATE && frames * layout.channels > MAX_RESAMPLED_SAMPLES) return undefined;
  // With two input channels and one output, swr resamples each channel before mixing (its cost
  // heuristic, an integer division, always picks that order); the rounding of each resampled
  // channel to float32 before the mix is part of ffmpeg's output.
  const channels: Float32Array[] = [];
  for (let channel = 0; channel < layout.channels; channel++) {
    const samples = readChannel(view, layout, frames, channel);
    channels.push(layout.rate === SAMPLE_RATE ? samples : resample(samples, layout.rate, SAMPLE_RATE));
  }
  return channels.length === 1 ? channels[0] : mixToMono(channels[0], channels[1]);
}
