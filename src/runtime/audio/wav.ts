/**
 * In-process decoding of the plainest WAV uploads: uncompressed PCM already at Whisper's 16 kHz,
 * mono or stereo. Spawning ffmpeg costs tens of milliseconds, a noticeable share of a short clip's
 * transcription, and these files need no resampling. The samples are the ones kiln's ffmpeg command
 * produces (ffmpeg's libswresample conversions, reproduced in float32 arithmetic); anything this
 * module is not sure about (other rates, compressed or 8-bit data, more than two channels, RIFX,
 * RF64, streamed or truncated files, odd chunk layouts) is left to ffmpeg.
 */
import { SAMPLE_RATE } from "../artifact/speech-graph.js";

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

type SampleKind = "s16" | "s24" | "s32" | "f32";

interface WavLayout {
  kind: SampleKind;
  channels: 1 | 2;
  /** Offset and byte length of the data chunk's payload, a whole number of frames. */
  dataOffset: number;
  dataBytes: number;
}

const ascii = (bytes: Uint8Array, at: number) => String.fromCharCode(bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]);

/** What a `fmt ` chunk describes, or undefined when this module does not take it. */
function parseFormat(view: DataView, bytes: Uint8Array, at: number, size: number): { kind: SampleKind; channels: 1 | 2 } | undefined {
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
  if (rate !== SAMPLE_RATE || blockAlign !== (channels * bits) / 8) return undefined;
  let kind: SampleKind | undefined;
  if (format === FORMAT_PCM) kind = bits === 16 ? "s16" : bits === 24 ? "s24" : bits === 32 ? "s32" : undefined;
  else if (format === FORMAT_FLOAT && bits === 32) kind = "f32";
  return kind && { kind, channels };
}

/** Walks the RIFF chunks to the format and data chunks; undefined when anything is unusual. */
function parseLayout(bytes: Uint8Array): WavLayout | undefined {
  if (bytes.length < 12 || ascii(bytes, 0) !== "RIFF" || ascii(bytes, 8) !== "WAVE") return undefined;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let format: { kind: SampleKind; channels: 1 | 2 } | undefined;
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

/** One channel's sample `index` (in frames) as float32, as libswresample converts it. */
function sampleAt(view: DataView, layout: WavLayout, frame: number, channel: number): number {
  const { kind, channels, dataOffset } = layout;
  switch (kind) {
    case "s16":
      return view.getInt16(dataOffset + (frame * channels + channel) * 2, true) / 32768;
    case "s24": {
      // ffmpeg decodes 24-bit PCM into the top of a 32-bit sample, then scales by 2^-31.
      const at = dataOffset + (frame * channels + channel) * 3;
      const value = view.getUint8(at) | (view.getUint8(at + 1) << 8) | (view.getInt8(at + 2) << 16);
      return value / 8388608;
    }
    case "s32":
      // Dividing by a power of two is exact, so rounding to float32 afterwards matches ffmpeg's
      // int-to-float conversion followed by its scaling.
      return Math.fround(view.getInt32(dataOffset + (frame * channels + channel) * 4, true) / 2147483648);
    case "f32":
      return view.getFloat32(dataOffset + (frame * channels + channel) * 4, true);
  }
}

/**
 * Decodes a 16 kHz PCM WAV (16, 24 or 32-bit integer or 32-bit float; mono or stereo; plain or
 * WAVE_FORMAT_EXTENSIBLE) into 16 kHz mono float32 samples, the same ones kiln's ffmpeg command
 * gives. Returns undefined for any file it does not take, which then goes to ffmpeg; never throws
 * on malformed input.
 */
export function decodeWav(bytes: Uint8Array): Float32Array | undefined {
  const layout = parseLayout(bytes);
  if (!layout) return undefined;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const frameBytes = layout.channels * (layout.kind === "s16" ? 2 : layout.kind === "s24" ? 3 : 4);
  const frames = layout.dataBytes / frameBytes;
  const samples = new Float32Array(frames);
  if (layout.channels === 1) {
    for (let i = 0; i < frames; i++) samples[i] = sampleAt(view, layout, i, 0);
  } else {
    // libswresample mixes in float32: each product rounded, then their sum.
    for (let i = 0; i < frames; i++) {
      const left = Math.fround(STEREO_TO_MONO * Math.fround(sampleAt(view, layout, i, 0)));
      const right = Math.fround(STEREO_TO_MONO * Math.fround(sampleAt(view, layout, i, 1)));
      samples[i] = left + right;
    }
  }
  return samples;
}
